package backup_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/internal/tests3"
	"github.com/nah-app/nah/store"
)

// drillFor is the restore drill of a node, wired as cmd/nah wires the
// server's (cmd/nah/drill.go), with short rechecks.
func drillFor(n *node, tg *backup.Target) *backup.Drill {
	return &backup.Drill{
		Target: tg, Repl: n.r, DataDir: n.dir, Source: n.s, Files: n.s,
		Dir:     filepath.Join(n.dir, "replication", "drill"),
		Recheck: []time.Duration{200 * time.Millisecond, 500 * time.Millisecond},
	}
}

// liveChecksums sums every live database of the node through the store.
func liveChecksums(t *testing.T, n *node) map[string]backup.Checksum {
	t.Helper()
	ctx := context.Background()
	rels, err := n.s.Databases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]backup.Checksum{}
	for _, rel := range rels {
		err := n.s.LiveRead(ctx, rel, func(tx *sql.Tx) error {
			d, err := backup.ChecksumTx(ctx, tx)
			out[rel] = d
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
	}
	return out
}

func sameLive(t *testing.T, before, after map[string]backup.Checksum) {
	t.Helper()
	if len(before) != len(after) {
		t.Errorf("live databases: %d before, %d after", len(before), len(after))
	}
	for rel, d := range before {
		if diff := d.Diff(after[rel]); diff != "" || !d.Equal(after[rel]) {
			t.Errorf("the drill changed the live %s: %s", rel, diff)
		}
	}
}

// failuresByPerson is the report's failures as handle: sentences.
func failuresByPerson(r backup.DrillReport) map[string][]string {
	out := map[string][]string{}
	for _, f := range r.Failures {
		h, _, _ := strings.Cut(f.Who, " (")
		out[h] = append(out[h], f.What)
	}
	return out
}

func TestDrillDir(t *testing.T) {
	tg, err := backup.ParseTarget(t.TempDir(), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	drillFaults(t, tg, tg.Dir())
}

func TestDrillS3(t *testing.T) {
	srv := tests3.Start(t)
	tg := s3Target(t, srv, "drill", "")
	drillFaults(t, tg, filepath.Join(srv.Dir, tests3.Bucket, "drill"))
}

// drillFaults: a sound server's drill finds every file equal, posts going
// on or not; then each fault planted on the replica (whose files are under
// root, a directory target's folder or versitygw's backing folder) is
// reported by the next drill, naming its person, and the drill changes
// nothing on the live side.
func drillFaults(t *testing.T, tg *backup.Target, root string) {
	ctx := context.Background()
	dir := t.TempDir()
	n := openNode(t, dir, tg, nodeOpts{maxOpen: 4, maxWatched: 2})
	handles := []string{"trunc", "gone", "oldsweep", "unshipped", "fine1", "fine2"}
	ids := map[string]string{}
	for _, h := range handles {
		ids[h] = n.person(t, h)
	}
	// Uneven writers: the first three write most.
	for i := range 90 {
		n.post(t, ids[handles[(i*i)%len(handles)]], i)
	}
	sw := &backup.Sweeper{Target: tg, Keep: 3, Source: n.s}
	if _, err := sw.Run(ctx, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		n.post(t, ids["oldsweep"], 100+i)
	}
	second := time.Now()
	if _, err := sw.Run(ctx, second); err != nil {
		t.Fatal(err)
	}
	settle(t, n)
	// A newer sweep not finished (no manifest yet, as while one runs): the
	// drill checks the newest complete one.
	complete := second.UTC().Format("20060102T150405Z")
	cut := filepath.Join(root, "sweeps", time.Now().Add(30*time.Minute).UTC().Format("20060102T150405Z"))
	half := filepath.Join(cut, "people", ids["fine1"], "person.db")
	if err := os.MkdirAll(filepath.Dir(half), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(half, []byte("half a copy"), 0o600); err != nil {
		t.Fatal(err)
	}

	d := drillFor(n, tg)
	r, err := d.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Passed() || r.Equal != len(handles) || r.People != len(handles) || r.Directory != "equal" || r.SweepOK != len(handles)+1 || r.Sweep != complete {
		t.Fatalf("sound server's drill, sweep %s complete and a later one cut short: %s (sweep %s): %+v", complete, r.Summary(), r.Sweep, r.Failures)
	}
	if err := os.RemoveAll(cut); err != nil {
		t.Fatal(err)
	}
	if s := r.Summary(); !strings.HasPrefix(s, "6 of 6 people restored and equal, the directory too, 7 sweep copies sound") {
		t.Errorf("summary %q", s)
	}

	// No false alarm while people post during the drill.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var posted atomic.Int64
	// One person posts every 10 ms throughout (written during every try:
	// compared next time, never a failure), the others now and then.
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			n.post(t, ids["fine1"], 1000+i)
			posted.Add(1)
			time.Sleep(10 * time.Millisecond)
		}
	})
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			n.post(t, ids[handles[i%len(handles)]], 5000+i)
			posted.Add(1)
			time.Sleep(100 * time.Millisecond)
		}
	})
	r, err = d.Once(ctx)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("drill during %d posts: %s", posted.Load(), r.Summary())
	if len(r.Failures) > 0 || r.Err != "" {
		t.Fatalf("false alarm during posts: %s: %+v", r.Summary(), r.Failures)
	}
	if posted.Load() == 0 || r.Equal == 0 {
		t.Fatalf("no post went on during the drill, or nobody was compared: %s", r.Summary())
	}

	// A third sweep, after those posts: its copies equal the live files,
	// so a person whose history is broken restores equal from it, which
	// the drill must still report (their next writes would be lost).
	settle(t, n)
	if _, err := sw.Run(ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}

	// A person whose writes never reached the replica: written by a
	// process without replication and left off the queue, as a kill after
	// the queue's marker was lost leaves it.
	n.close()
	plain, err := store.Open(ctx, store.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.CreateMoment(ctx, ids["unshipped"], []byte("never shipped")); err != nil {
		t.Fatal(err)
	}
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}
	n = openNode(t, dir, tg, nodeOpts{maxOpen: 4, maxWatched: 2})
	d = drillFor(n, tg)

	person := func(h string) string { return filepath.Join(root, "people", ids[h], "person.db") }
	// An LTX file truncated: the newest of the highest level, which every
	// restore reads.
	var snaps []string
	filepath.Walk(person("trunc"), func(p string, _ os.FileInfo, _ error) error {
		if strings.HasSuffix(p, ".ltx") { // ltx/<level>/ in a directory, <level as 4 hex digits>/ in S3
			snaps = append(snaps, p)
		}
		return nil
	})
	if len(snaps) == 0 {
		t.Fatalf("no LTX file of trunc under %s", person("trunc"))
	}
	sort.Strings(snaps)
	st, err := os.Stat(snaps[len(snaps)-1])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(snaps[len(snaps)-1], st.Size()/2); err != nil {
		t.Fatal(err)
	}
	// A person's replica deleted.
	if err := os.RemoveAll(person("gone")); err != nil {
		t.Fatal(err)
	}
	// The newest sweep's copy replaced with the older sweep's.
	stamps, err := filepath.Glob(filepath.Join(root, "sweeps", "*"))
	if err != nil || len(stamps) != 3 {
		t.Fatalf("sweeps %v: %v", stamps, err)
	}
	sort.Strings(stamps)
	rel := filepath.Join("people", ids["oldsweep"], "person.db")
	old, err := os.ReadFile(filepath.Join(stamps[0], rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stamps[2], rel), old, 0o600); err != nil {
		t.Fatal(err)
	}

	before := liveChecksums(t, n)
	r, err = d.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sameLive(t, before, liveChecksums(t, n))
	got := failuresByPerson(r)
	t.Logf("drill with four faults: %s", r.Summary())
	for h, ws := range got {
		t.Logf("  %s: %s", h, strings.Join(ws, " / "))
	}
	for _, h := range []string{"trunc", "gone", "oldsweep", "unshipped"} {
		if len(got[h]) == 0 {
			t.Errorf("%s's fault not reported", h)
		}
	}
	for _, h := range []string{"fine1", "fine2"} {
		if len(got[h]) > 0 {
			t.Errorf("%s reported though sound: %v", h, got[h])
		}
	}
	if w := strings.Join(got["unshipped"], ""); !strings.Contains(w, "moments has") {
		t.Errorf("unshipped: %q, want the moments' counts", w)
	}
	if w := strings.Join(got["oldsweep"], ""); !strings.Contains(w, "is not the copy the sweep made") {
		t.Errorf("oldsweep: %q", w)
	}
	if w := strings.Join(got["trunc"], ""); !strings.Contains(w, "history does not restore") {
		t.Errorf("trunc: %q, want its history named", w)
	}
	if w := strings.Join(got["gone"], ""); !strings.Contains(w, "history is missing") {
		t.Errorf("gone: %q, want its history named", w)
	}
	if !d.Failing() {
		t.Error("Failing() is false after a failed drill")
	}
	evidence, _ := filepath.Glob(filepath.Join(d.Dir, "failed", "*.txt"))
	if len(evidence) < 4 {
		t.Errorf("evidence kept: %v", evidence)
	}

	// The replica unreadable (a file where its folder was: the tests run
	// as root, whom chmod does not stop): every file is reported.
	if err := os.Rename(root, root+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root, []byte("not a folder"), 0o600); err != nil {
		t.Fatal(err)
	}
	before = liveChecksums(t, n)
	r, err = d.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sameLive(t, before, liveChecksums(t, n))
	got = failuresByPerson(r)
	t.Logf("drill with the replica unreadable: %s", r.Summary())
	for _, h := range handles {
		if len(got[h]) == 0 {
			t.Errorf("%s not reported with the replica unreadable", h)
		}
	}
	if r.Directory != "failed" {
		t.Errorf("directory: %q with the replica unreadable", r.Directory)
	}

	// Back, and mended (the unshipped person writes, the others' history
	// and sweep are made afresh): a drill passes again.
	os.Remove(root)
	if err := os.Rename(root+".away", root); err != nil {
		t.Fatal(err)
	}
}

// A drill compares a sampled person's mirrored media with the live file:
// equal after a sweep, and a mirror changed on the target is reported,
// naming its owner.
func TestDrillComparesMedia(t *testing.T) {
	ctx := context.Background()
	tg, err := backup.ParseTarget(t.TempDir(), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(ctx); err != nil {
		t.Fatal(err)
	}
	n := openNode(t, t.TempDir(), tg, nodeOpts{maxOpen: 4, maxWatched: 2})
	id := n.person(t, "pic")
	n.post(t, id, 1)
	up, err := n.s.StartUpload(ctx, id, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.Write([]byte("a picture of the sea")); err != nil {
		t.Fatal(err)
	}
	m, err := up.Commit(ctx, "image/png")
	if err != nil {
		t.Fatal(err)
	}
	sw := &backup.Sweeper{Target: tg, Keep: 3, Source: n.s}
	if _, err := sw.Run(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	settle(t, n)
	d := drillFor(n, tg)
	r, err := d.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Passed() || r.Media != 1 || r.MediaOK != 1 {
		t.Fatalf("sound mirror: %d of %d media equal: %s: %+v", r.MediaOK, r.Media, r.Summary(), r.Failures)
	}
	mirror := filepath.Join(tg.Dir(), "media", filepath.FromSlash(nah.MediaRel(id, m.ID)))
	if err := os.WriteFile(mirror, []byte("a picture of the hills"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err = d.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := failuresByPerson(r)["pic"]
	if r.Passed() || r.Media != 1 || r.MediaOK != 0 || len(got) != 1 || !strings.Contains(got[0], "media file "+m.ID+" differs on the mirror") {
		t.Fatalf("changed mirror: %d of %d media equal, failures %+v", r.MediaOK, r.Media, r.Failures)
	}
}

// heldPuts is a proxy in front of the S3 server that holds every PUT
// under the folder of a held person until release, and passes every other
// request at once: a target slow to take only their writes.
type heldPuts struct {
	url     string
	entered chan string // a held PUT's path
	release func()

	mu   sync.Mutex
	held []string // "/<bucket>/<prefix>/people/<id>/"
}

func newHeldPuts(t *testing.T, addr string) *heldPuts {
	t.Helper()
	p := &heldPuts{entered: make(chan string, 64)}
	gate := make(chan struct{})
	var once sync.Once
	p.release = func() { once.Do(func() { close(gate) }) }
	up := &url.URL{Scheme: "http", Host: addr}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(up)
		r.Out.Host = r.In.Host // what the client signed
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && p.holds(r.URL.Path) {
			select {
			case p.entered <- r.URL.Path:
			default: // nobody counts them any more
			}
			<-gate
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// hold holds the PUTs under person id's folder of the target at prefix.
func (p *heldPuts) hold(prefix, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = append(p.held, "/"+tests3.Bucket+"/"+prefix+"/"+nah.PersonDirRel(id)+"/")
}

func (p *heldPuts) holds(path string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.held {
		if strings.HasPrefix(path, h) {
			return true
		}
	}
	return false
}

// TestDrillDefersAFileWaitingForReplication: person x posts while the target
// holds the writes of four other people, so that every replicator (two,
// and two more once the queue lags) is busy with theirs and x's write
// waits in the queue. The drill restores x's replica, which lacks that
// post: x is deferred (compared next time), not failed; once the target
// takes the writes, the next drill finds x equal.
func TestDrillDefersAFileWaitingForReplication(t *testing.T) {
	ctx := context.Background()
	srv := tests3.Start(t)
	p := newHeldPuts(t, srv.Addr)
	tg := s3Target(t, srv, "held", p.url)
	n := openNode(t, t.TempDir(), tg, nodeOpts{maxOpen: 8, maxWatched: 1})
	t.Cleanup(p.release) // before the node's close, which waits for the replicators
	var all []string
	for _, h := range []string{"held1", "held2", "held3", "held4", "xena", "yann"} {
		all = append(all, n.person(t, h))
	}
	for i, id := range all {
		n.post(t, id, i)
	}
	settle(t, n)
	// Five of the six are not watched (one may be, maxWatched): their next
	// writes go through the queue.
	var ids []string
	for _, id := range all {
		if f, ok := n.r.StatusOf(nah.PersonRel(id)); ok && !f.Watched && len(ids) < 5 {
			ids = append(ids, id)
		}
	}
	if len(ids) < 5 {
		t.Fatalf("%d of 6 people not watched, want 5", len(ids))
	}
	blockers, x := ids[:4], ids[4]
	for _, id := range blockers {
		p.hold("held", id)
	}
	for i, id := range ids {
		n.post(t, id, 100+i)
	}
	for range 2 {
		select {
		case <-p.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("no replicator shipped a held person's write")
		}
	}
	if !n.s.ReplicationQueued(nah.PersonRel(x)) {
		t.Fatal("x's write is not in the queue")
	}

	// The held people are left out: their checks would wait for their writes.
	d := drillFor(n, tg)
	d.Source = listed{n.s, []string{nah.DirectoryRel, nah.PersonRel(x)}}
	r, err := d.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queued := n.s.ReplicationQueued(nah.PersonRel(x))
	p.release()
	t.Logf("drill with x's write queued: %s", r.Summary())
	if !queued {
		t.Fatal("x left the queue during the drill: the check proves nothing")
	}
	if len(r.Failures) > 0 || r.Err != "" {
		t.Fatalf("a file waiting for replication counted as a failure: %s: %+v", r.Summary(), r.Failures)
	}
	if len(r.Deferred) != 1 || !strings.Contains(r.Deferred[0], "still waiting for replication") || r.Directory != "equal" {
		t.Fatalf("deferred %q, directory %q; want x still waiting for replication, the directory equal", r.Deferred, r.Directory)
	}

	settle(t, n)
	r, err = d.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Passed() || r.Equal != 1 || len(r.Deferred) != 0 {
		t.Fatalf("drill once the target took the writes: %s: %+v", r.Summary(), r.Failures)
	}
}

// listed is a Source whose databases are rels alone.
type listed struct {
	backup.Source
	rels []string
}

func (l listed) Databases(context.Context) ([]string, error) { return l.rels, nil }
