package backup_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
)

// TestShipWithoutTakeUp: with one file watched at a time, two people post
// in turns, so each post finds the other's file in the watched set; once
// both were let go of in step, their posts are shipped without a take-up.
// Every post is then on the replica: each file restored from its history
// (Litestream's layout, nah restore's reader) holds every moment, and so
// does a restore after a later take-up carries on from the shipped files;
// the shipped files are compacted as Litestream compacts what it watches.
func TestShipWithoutTakeUp(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	replica := filepath.Join(t.TempDir(), "replica")
	tg, err := backup.ParseTarget(replica, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(ctx); err != nil {
		t.Fatal(err)
	}
	n := openNode(t, dir, tg, nodeOpts{maxOpen: 8, maxWatched: 1})
	ann, bob := n.person(t, "ann"), n.person(t, "bob")
	want := map[string]int{}
	waitQueue := func() {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if q, _ := n.s.ReplicationQueue(); q == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the replication queue never drained")
			}
		}
	}
	for i := range 30 {
		for _, id := range []string{ann, bob} {
			n.post(t, id, i)
			want[id]++
			waitQueue()
		}
	}
	if err := n.r.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	st := n.s.Stats()
	if st.Ships < 10 {
		t.Fatalf("%d ships and %d take-ups for 60 posts in turns: the posts were not shipped", st.Ships, st.TakeUps)
	}
	t.Logf("60 posts: %d shipped, %d take-ups", st.Ships, st.TakeUps)
	// Litestream compacts only what it watches: the shipped files are
	// compacted by the ships themselves, so a restore reads a few files.
	l1, _ := filepath.Glob(filepath.Join(replica, filepath.FromSlash(nah.PersonRel(ann)), "ltx", "1", "*.ltx"))
	if len(l1) == 0 {
		all, _ := filepath.Glob(filepath.Join(replica, filepath.FromSlash(nah.PersonRel(ann)), "*", "*", "*"))
		t.Errorf("no level-1 file for the shipped file after %d ships: %v", st.Ships, all)
	}
	check := func(when string) {
		t.Helper()
		for _, id := range []string{ann, bob} {
			out := filepath.Join(t.TempDir(), "restored.db")
			from, err := backup.RestoreFile(ctx, tg, nah.PersonRel(id), out, time.Time{})
			if err != nil {
				t.Fatalf("%s: restore %s: %v", when, id, err)
			}
			if from.String() != "history" {
				t.Errorf("%s: %s restored from %s, want its history", when, id, from)
			}
			if err := store.IntegrityCheck(ctx, out); err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if got := moments(t, out); got != want[id] {
				t.Errorf("%s: %s's replica holds %d moments, want %d", when, id, got, want[id])
			}
		}
	}
	check("after the ships")

	// A take-up after ships carries the history on from them.
	if err := n.s.Rewatch(ctx, nah.PersonRel(ann)); err != nil {
		t.Fatal(err)
	}
	n.post(t, ann, 100)
	want[ann]++
	n.close()
	check("after a take-up and a clean stop")
}
