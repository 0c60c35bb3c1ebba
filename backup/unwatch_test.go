package backup_test

import (
	"context"
	"testing"
	"time"

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
	annRel := store.PersonRel(ann)
	watched := func() bool {
		for _, f := range n.r.Status() {
			if f.Path == annRel {
				return f.Watched && !f.Behind()
			}
		}
		return false
	}
	n.post(t, ann, 0)
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
