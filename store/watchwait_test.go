package store

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWatchWaitWaitsForAWatchUnderWay: the wait of a restore for
// replication to have the new file holds while another watch of that same
// file (a replicator's, after a write) is under way, and ends when it does:
// returning at once would call the restore done before the file is on the
// replica.
func TestWatchWaitWaitsForAWatchUnderWay(t *testing.T) {
	var (
		mu      sync.Mutex
		gate1st bool // the next watch of a person file waits for gate
		started = make(chan struct{})
		gate    = make(chan struct{})
	)
	var openGate sync.Once
	hooks := testHooks{Watch: func(ctx context.Context, p string) error {
		mu.Lock()
		g := gate1st && strings.HasSuffix(p, "person.db")
		if g {
			gate1st = false
		}
		mu.Unlock()
		if g {
			close(started)
			<-gate
		}
		return nil
	}}
	s := MustOpen(t, hooks.config(Config{Dir: t.TempDir(), MaxOpenFiles: 4}))
	// After the store's own cleanup is registered, so that it runs first:
	// the store's close waits for the watch the gate holds.
	t.Cleanup(func() { openGate.Do(func() { close(gate) }) })
	ctx := context.Background()
	// Gated from before ann exists: her first watch, after her creation's
	// write or her post's, is the one under way. Gating only after her
	// creation missed it when that watch had already ended (she is then
	// watched, and her post calls no watch).
	mu.Lock()
	gate1st = true
	mu.Unlock()
	ann := mustPerson(t, s, "ann").ID
	if _, err := s.CreateMoment(ctx, ann, []byte("queued for a replicator")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no replicator took ann's file up after her post")
	}
	returned := make(chan error, 1)
	go func() { returned <- s.watchPerson(ctx, ann, true) }()
	select {
	case err := <-returned:
		t.Fatalf("the wait returned (%v) while the replicator's watch of the file was under way", err)
	case <-time.After(300 * time.Millisecond):
	}
	openGate.Do(func() { close(gate) })
	select {
	case err := <-returned:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end once the watch under way ended")
	}
}
