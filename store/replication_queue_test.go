package store

// Written by a reviewer of the replication queue (issue 14): each failed
// before the fix it names.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nah-app/nah/store/internal/personfile"
)

// gatedHooks: while gated, every Watch blocks until gate closes (and says
// it entered), so that the two replicators can be kept busy and a third
// file stays in the queue.
type gatedHooks struct {
	gated   atomic.Bool
	gate    chan struct{}
	entered chan string
	mu      sync.Mutex
	seq     int
	last    map[string]int // path -> seq of its last Watch or Unwatch
	held    map[string]bool
	bad     []string
	once    sync.Once
}

func newGatedHooks() *gatedHooks {
	return &gatedHooks{gate: make(chan struct{}), entered: make(chan string, 16), last: map[string]int{}, held: map[string]bool{}}
}

func (g *gatedHooks) hooks() testHooks {
	return testHooks{
		Watch: func(ctx context.Context, p string) error {
			if g.gated.Load() {
				g.entered <- p
				<-g.gate
			}
			g.mu.Lock()
			g.seq++
			g.last[p] = g.seq
			g.mu.Unlock()
			return nil
		},
		Unwatch: func(p string) error {
			g.mu.Lock()
			if g.held[p] {
				g.bad = append(g.bad, "Unwatch (Litestream's close) of a file the app still has open: "+p)
			}
			g.seq++
			g.last[p] = g.seq
			g.mu.Unlock()
			return nil
		},
	}
}

// open opens the gate, once; registered with t.Cleanup after the store's
// MustOpen, it runs before the store's Close even after a Fatal.
func (g *gatedHooks) open() {
	g.once.Do(func() {
		g.gated.Store(false)
		close(g.gate)
	})
}

func (g *gatedHooks) tick() int { g.mu.Lock(); defer g.mu.Unlock(); g.seq++; return g.seq }

// busyReplicators posts to a and b (closed, so queued) and waits until each
// replicator is blocked in its Watch.
func (g *gatedHooks) busyReplicators(t *testing.T, s *Store, ids ...string) {
	ctx := context.Background()
	g.gated.Store(true)
	for _, id := range ids {
		if _, err := s.CreateMoment(ctx, id, []byte("x")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-g.entered:
		case <-time.After(5 * time.Second):
			t.Fatal("a replicator did not take the file up")
		}
	}
}

// TestShutdownLeavesAFileInUseToItsUser: a request cut off by the
// shutdown timeout still holds person x's file, and x is in the queue.
// Close's drain must leave it (its marker waits for the next start),
// not have Litestream register and let go of a file the app has open
// (its close drops the process's locks on the file).
func TestShutdownLeavesAFileInUseToItsUser(t *testing.T) {
	g := newGatedHooks()
	dir := t.TempDir()
	s := MustOpen(t, g.hooks().config(Config{Dir: dir}))
	t.Cleanup(g.open)
	ctx := context.Background()
	a, b, x := mustPerson(t, s, "ann").ID, mustPerson(t, s, "bob").ID, mustPerson(t, s, "xena").ID
	for _, id := range []string{a, b, x} {
		s.files.Forget(id) // closed and let go of: the next post queues it
	}
	g.busyReplicators(t, s, a, b)
	if _, err := s.CreateMoment(ctx, x, []byte("queued")); err != nil {
		t.Fatal(err)
	}
	fx, err := s.files.Acquire(ctx, x, false) // the cut-off request
	if err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	g.held[fx.Path] = true
	g.mu.Unlock()
	go func() {
		for !closedNow(s) {
			time.Sleep(time.Millisecond)
		}
		g.open()
	}()
	s.Close()
	g.mu.Lock()
	bad := g.bad
	g.held[fx.Path] = false
	g.mu.Unlock()
	s.files.Release(fx)
	for _, m := range bad {
		t.Error(m)
	}
}

// TestQueuedWriteSurvivesDeleteAndRestore: person x posts while both
// replicators are busy, is deleted before x's turn comes, and the deletion
// is undone. The write was acknowledged; it must reach the replica (a
// Watch or Unwatch of x's file after it).
func TestQueuedWriteSurvivesDeleteAndRestore(t *testing.T) {
	g := newGatedHooks()
	dir := t.TempDir()
	qdir := filepath.Join(dir, "replication", "queue")
	h := g.hooks()
	h.QueueDir = qdir
	s := MustOpen(t, h.config(Config{Dir: dir}))
	t.Cleanup(g.open)
	ctx := context.Background()
	a, b, x := mustPerson(t, s, "ann").ID, mustPerson(t, s, "bob").ID, mustPerson(t, s, "xena").ID
	for _, id := range []string{a, b, x} {
		s.files.Forget(id)
	}
	g.busyReplicators(t, s, a, b)
	if _, err := s.CreateMoment(ctx, x, []byte("acknowledged")); err != nil {
		t.Fatal(err)
	}
	wrote := g.tick()
	if err := s.DeletePerson(ctx, x); err != nil {
		t.Fatal(err)
	}
	g.open()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if n, _ := s.files.Queue(); n == 0 && !marked(t, qdir, x) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queue did not drain")
		}
	}
	time.Sleep(50 * time.Millisecond) // the replicator's one-shot of x ends
	if err := s.RestorePerson(ctx, x); err != nil {
		t.Fatal(err)
	}
	s.Close()
	p := filepath.Join(dir, "people", x, "person.db")
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last[p] < wrote {
		t.Fatalf("x's acknowledged write (seq %d) was never replicated: last Watch/Unwatch of the file at seq %d", wrote, g.last[p])
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func closedNow(s *Store) bool {
	return s.files.Closed()
}

// TestQueuedWriteSurvivesAFailedReplace: person x posts while both
// replicators are busy, and a restore of x's file fails while x waits its
// turn: the old file stays, and its acknowledged write must still reach
// the replica (the replicator that finds x hidden puts x back in the queue).
func TestQueuedWriteSurvivesAFailedReplace(t *testing.T) {
	g := newGatedHooks()
	dir := t.TempDir()
	h := g.hooks()
	h.QueueDir = filepath.Join(dir, "replication", "queue")
	s := MustOpen(t, h.config(Config{Dir: dir}))
	t.Cleanup(g.open)
	ctx := context.Background()
	a, b, x := mustPerson(t, s, "ann").ID, mustPerson(t, s, "bob").ID, mustPerson(t, s, "xena").ID
	for _, id := range []string{a, b, x} {
		s.files.Forget(id)
	}
	g.busyReplicators(t, s, a, b)
	if _, err := s.CreateMoment(ctx, x, []byte("acknowledged")); err != nil {
		t.Fatal(err)
	}
	wrote := g.tick()
	err := s.ReplacePersonFile(ctx, x, func(string) error {
		g.open()                           // the replicators finish a and b, and find x hidden
		time.Sleep(300 * time.Millisecond) // a few of their looks at x
		return errors.New("the restore failed")
	})
	if err == nil {
		t.Fatal("the failed restore said it worked")
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if n, _ := s.files.Queue(); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queue did not drain")
		}
	}
	p := filepath.Join(dir, "people", x, "person.db")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		g.mu.Lock()
		last := g.last[p]
		g.mu.Unlock()
		if last >= wrote { // the replicator's take-up of x ended after the write
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("x's acknowledged write (seq %d) was never replicated: last Watch/Unwatch of the file at seq %d", wrote, last)
		}
	}
}

// marked says whether the queue on disk in qdir lists person id.
func marked(t *testing.T, qdir, id string) bool {
	t.Helper()
	m, err := personfile.Marked(qdir)
	if err != nil {
		t.Fatal(err)
	}
	return m[id]
}

// TestFailedLastSyncKeepsTheMark: a watched file whose last sync fails
// (the target is away) stays marked on disk, so that a kill before the
// next sync has the next start replicate it.
func TestFailedLastSyncKeepsTheMark(t *testing.T) {
	dir := t.TempDir()
	qdir := filepath.Join(dir, "replication", "queue")
	hooks := testHooks{
		QueueDir: qdir,
		Watch:    func(context.Context, string) error { return nil },
		Unwatch:  func(string) error { return errors.New("target away") },
	}
	s := MustOpen(t, hooks.config(Config{Dir: dir}))
	ann := mustPerson(t, s, "ann")
	if _, err := s.CreateMoment(context.Background(), ann.ID, []byte("not on the replica yet")); err != nil {
		t.Fatal(err)
	}
	if !marked(t, qdir, ann.ID) {
		t.Fatal("ann's watched file is not marked")
	}
	s.files.Forget(ann.ID) // closed now: its last sync fails
	if !marked(t, qdir, ann.ID) {
		t.Fatal("ann's mark went although her last sync failed: a kill now leaves her post off the replica for good")
	}
}
