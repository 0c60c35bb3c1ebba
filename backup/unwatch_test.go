package backup_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/internal/tests3"
	"github.com/nah-app/nah/store"
)

// TestLetGoWhileTargetAwayIsQuick: with the target away, a post to a
// person whose watched file is being let go waits for that file's last
// sync, which must give up at once (no retries a reopen would wait for):
// the post takes well under a second, not the healthy target's 5 s.
func TestLetGoWhileTargetAwayIsQuick(t *testing.T) {
	srv := tests3.Start(t)
	tg := s3Target(t, srv, "letgo", "")
	n := openNode(t, t.TempDir(), tg, nodeOpts{maxOpen: 1, maxWatched: 4})
	ann, bob := n.person(t, "ann"), n.person(t, "bob")
	annRel := nah.PersonRel(ann)
	watched := func() bool {
		for _, f := range n.r.Status() {
			if f.Path == annRel {
				return f.Watched && !f.Behind()
			}
		}
		return false
	}
	n.post(t, ann, 0)
	// Her file was let go of in step when bob's was made (one open file),
	// so the post was shipped: taken up here, as a write to a new file is.
	if err := n.s.Rewatch(context.Background(), annRel); err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, watched) {
		t.Fatalf("ann's file was not taken up: %+v", n.r.Status())
	}
	srv.Stop()
	if err := n.r.Probe(context.Background()); err == nil {
		t.Fatal("the probe found the stopped target working")
	}
	n.post(t, ann, 1) // a write her last sync has to try to ship
	n.post(t, bob, 2) // one open file: ann's is let go, its last sync starts
	took := n.post(t, ann, 3)
	t.Logf("the post to ann while her file was let go: %v", took)
	if took > 750*time.Millisecond {
		t.Errorf("a post to ann while her file was let go with the target away took %v", took)
	}
}

// TestLetGoOfASlowTargetGetsTheLastSync: a target that answers every
// request 400 ms late is slow but healthy, and a file let go of still gets
// its last sync (a LIST and a PUT or two, about 1.2 s, within the 5 s): its
// last write is in the replica, with no catch-up loop to bring it later.
func TestLetGoOfASlowTargetGetsTheLastSync(t *testing.T) {
	srv := tests3.Start(t)
	proxy := newDelayingProxy(t, srv.Addr)
	tg := s3Target(t, srv, "slow", proxy.url)
	n := openNode(t, t.TempDir(), tg, nodeOpts{maxOpen: 1, maxWatched: 4})
	ann, bob := n.person(t, "ann"), n.person(t, "bob")
	annRel := nah.PersonRel(ann)
	state := func() (backup.FileStatus, bool) {
		for _, f := range n.r.Status() {
			if f.Path == annRel {
				return f, true
			}
		}
		return backup.FileStatus{}, false
	}
	n.post(t, ann, 0)
	if err := n.s.Rewatch(context.Background(), annRel); err != nil { // shipped, as above
		t.Fatal(err)
	}
	if !eventually(10*time.Second, func() bool { f, ok := state(); return ok && f.Watched && !f.Behind() }) {
		t.Fatalf("ann's file was not taken up: %+v", n.r.Status())
	}
	proxy.delay.Store(int64(400 * time.Millisecond))
	n.post(t, ann, 1) // the write her last sync must ship
	n.post(t, bob, 2) // one open file: ann's is let go
	if !eventually(20*time.Second, func() bool { f, ok := state(); return ok && !f.Watched }) {
		t.Fatalf("ann's file was not let go: %+v", n.r.Status())
	}
	if f, _ := state(); f.Behind() {
		t.Errorf("ann's file after its last sync to a slow target: %+v", f)
	}
	proxy.delay.Store(0)
	p := filepath.Join(t.TempDir(), "person.db")
	if _, err := backup.RestoreFile(context.Background(), tg, annRel, p, time.Time{}); err != nil {
		t.Fatal(err)
	}
	got, err := store.ExportedMoments(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Errorf("the replica holds %d of ann's 2 moments", len(got))
	}
}

// delayingProxy is an HTTP proxy in front of the S3 server that holds
// every request for delay before passing it on.
type delayingProxy struct {
	url   string
	delay atomic.Int64 // nanoseconds
}

func newDelayingProxy(t testing.TB, addr string) *delayingProxy {
	t.Helper()
	p := &delayingProxy{}
	up := &url.URL{Scheme: "http", Host: addr}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(up)
		r.Out.Host = r.In.Host // what the client signed
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(p.delay.Load()))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}
