package backup

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// TestRestoredPersonReplicatesOn: ann restored to a time and posting
// again. The replica's newest copy is the restored file as soon as the
// restore returns; after her new posts and a compaction of every level,
// the replica gives back her live file moment for moment as at now, and
// the restored file as at a time between the restore and those posts.
// Internal: only the replicator's Litestream store can compact at once.
func TestRestoredPersonReplicatesOn(t *testing.T) {
	ctx := context.Background()
	r, dir := newDirReplicator(t)
	cfg := store.Config{Dir: dir}
	cfg.Replicator, cfg.MaxWatched = r, 8
	s, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	p, err := s.CreatePerson(ctx, store.NewPerson{Handle: "ann", PasswordHash: "x"})
	if err != nil {
		t.Fatal(err)
	}
	post := func(n int, what string) {
		t.Helper()
		for i := range n {
			if _, err := s.CreateMoment(ctx, p.ID, fmt.Appendf(nil, "%s %d", what, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// second waits for the next whole second and returns it, so that what
	// is written before and after it is told apart by a restore's time.
	second := func() time.Time {
		at := time.Now().Truncate(time.Second).Add(time.Second)
		time.Sleep(time.Until(at.Add(300 * time.Millisecond)))
		return at
	}
	sync := func() {
		t.Helper()
		if err := r.SyncAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	compact := func() {
		t.Helper()
		for _, db := range r.ls.DBs() {
			for lvl := 1; lvl <= 3; lvl++ {
				if _, err := db.Compact(ctx, lvl); err != nil {
					t.Fatalf("compact %s to level %d: %v", db.Path(), lvl, err)
				}
			}
		}
	}
	live := func() []string {
		t.Helper()
		ms, err := s.Moments(ctx, p.ID, nil, 1000, nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range ms {
			ids = append(ids, m.ID)
		}
		slices.Sort(ids)
		return ids
	}
	replica := func(step string, at time.Time, want []string) {
		t.Helper()
		out := filepath.Join(t.TempDir(), "person.db")
		src, err := RestoreFile(ctx, r.Target(), nah.PersonRel(p.ID), out, at)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		got, err := store.ExportedMoments(ctx, out)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: the replica (from %s) gives back %d moments %v, want %d %v", step, src, len(got), got, len(want), want)
		}
	}

	post(5, "early")
	// The watch of a file starts beside its first write, and SyncAll syncs
	// only watched files: wait for it, or the early moments may reach the
	// replica only with the late ones (CI: "no copy of this database").
	for deadline := time.Now().Add(10 * time.Second); r.ls.FindDB(s.Path(nah.PersonRel(p.ID))) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("ann's file is not watched 10 s after her posts")
		}
	}
	sync()
	at := second()
	post(20, "late")
	sync()
	compact()
	state := r.metaPath(nah.PersonRel(p.ID))
	if n := countFiles(t, state, time.Now()); n == 0 {
		t.Fatal("no local state of ann's file before the restore: the test tries nothing")
	}
	swap := time.Now()
	if _, err := r.RestorePerson(ctx, s, p.ID, at, nil); err != nil {
		t.Fatal(err)
	}
	// Litestream's local state of the replaced file describes a file that
	// is gone: none of it stays (what is there now was written since).
	if n := countFiles(t, state, swap); n > 0 {
		t.Errorf("%d files of Litestream's local state of the replaced file are still there", n)
	}
	restored := live()
	if len(restored) != 5 {
		t.Fatalf("ann has %d moments after the restore, want the 5 early", len(restored))
	}
	replica("as soon as the restore returns", time.Time{}, restored)
	between := second()
	post(3, "after")
	sync()
	compact()
	replica("after her new posts", time.Time{}, live())
	replica("as at a time between the restore and her new posts", between, restored)
}

// countFiles counts the regular files under dir last written before t.
func countFiles(t *testing.T, dir string, before time.Time) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.Type().IsRegular() {
			return nil
		}
		st, err := e.Info()
		if err != nil {
			return err
		}
		if st.ModTime().Before(before) {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
