package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// TestWatchedWriteQueuedSurvivesAKill: a post to a watched file whose
// syncs fail (the target away) waits in the one queue, with its oldest
// write's time, and is listed on disk; a start on what a kill left then
// takes the file up without anyone posting.
func TestWatchedWriteQueuedSurvivesAKill(t *testing.T) {
	dir := t.TempDir()
	qdir := filepath.Join(dir, filepath.FromSlash(nah.QueueRel))
	var syncs atomic.Int64
	var mu sync.Mutex
	watched := map[string]int{}
	hooks := testHooks{
		QueueDir: qdir,
		Watch: func(ctx context.Context, p string) error {
			mu.Lock()
			watched[p]++
			mu.Unlock()
			return nil
		},
		Sync: func(ctx context.Context, p string) error {
			syncs.Add(1)
			return errors.New("target failing")
		},
		Unwatch: func(p string) error { return errors.New("target failing") },
	}
	s := MustOpen(t, hooks.config(Config{Dir: dir}))
	ctx := context.Background()
	ann := mustPerson(t, s, "ann")
	rel := nah.PersonRel(ann.ID)
	if err := s.WatchNow(ctx, rel); err != nil {
		t.Fatal(err)
	}
	posted := time.Now()
	if _, err := s.CreateMoment(ctx, ann.ID, []byte("not on the replica yet")); err != nil {
		t.Fatal(err)
	}
	// Her take-up's sync and her post's fail: she waits since the older.
	for deadline := time.Now().Add(5 * time.Second); syncs.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d syncs of ann's file, want her take-up's and her post's", syncs.Load())
		}
	}
	if since, queued := s.ReplicationSince(rel); !queued || since.After(posted) {
		t.Fatalf("after failed syncs ann waits since %v (queued %v), want before her post, %v", since, queued, posted)
	}
	if !marked(t, qdir, ann.ID) {
		t.Fatal("ann's watched file, written and not synced, is not listed on disk")
	}

	// A kill: the data directory as it is now, and a start on it.
	killed := t.TempDir()
	if err := os.CopyFS(killed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	clear(watched)
	mu.Unlock()
	hooks.QueueDir = filepath.Join(killed, filepath.FromSlash(nah.QueueRel))
	hooks.Sync = nil
	hooks.Unwatch = nil
	s2 := MustOpen(t, hooks.config(Config{Dir: killed}))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := watched[s2.Path(rel)]
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the start after the kill did not take ann's file up")
		}
	}
}
