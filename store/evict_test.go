package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/nah-app/nah"
)

// TestEvictionKeepsSmallWAL: a file evicted to make room closes without a
// checkpoint while its WAL is small, so its WAL and -shm stay and the next
// open reads them back; one past keptWAL (128 KiB) is checkpointed at its
// close; a clean Close leaves no WAL with anything in it, and every moment
// is there after a restart.
func TestEvictionKeepsSmallWAL(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(ctx, Config{Dir: dir, MaxOpenFiles: 1})
	if err != nil {
		t.Fatal(err)
	}
	ann, bob := mustPerson(t, s, "ann"), mustPerson(t, s, "bob")
	wal := func(p nah.Person) int64 {
		t.Helper()
		s.files.WaitClosed()
		if open, _ := s.files.State(p.ID); open {
			t.Fatalf("%s: file still open, want it evicted", p.Handle)
		}
		st, err := os.Stat(filepath.Join(dir, "people", p.ID, "person.db-wal"))
		if err != nil {
			return 0
		}
		return st.Size()
	}
	post := func(p nah.Person, n, size int) {
		t.Helper()
		for range n {
			if _, err := s.CreateMoment(ctx, p.ID, make([]byte, size)); err != nil {
				t.Fatal(err)
			}
		}
	}

	post(ann, 1, 400)
	post(bob, 1, 400) // ann's file is evicted
	if n := wal(ann); n == 0 {
		t.Fatal("ann's evicted file was checkpointed: its WAL is empty")
	}
	if _, err := os.Stat(filepath.Join(dir, "people", ann.ID, "person.db-shm")); err != nil {
		t.Errorf("ann's -shm is gone after her eviction: %v", err)
	}
	if n, err := s.MomentCount(ctx, ann.ID); err != nil || n != 1 {
		t.Fatalf("ann's moments read back from the kept WAL: %d, %v", n, err)
	}

	post(ann, 40, 4000) // past keptWAL
	post(bob, 1, 400)
	if n := wal(ann); n != 0 {
		t.Errorf("ann's WAL of 40 large moments was kept at her eviction: %d bytes", n)
	}
	post(ann, 1, 400) // bob's small WAL is kept again
	if n := wal(bob); n == 0 {
		t.Error("bob's evicted file was checkpointed")
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	walFiles(t, dir, func(path string, size int64) {
		if size > 0 {
			t.Errorf("%s: %d bytes left after Close", path, size)
		}
	})
	s = MustOpen(t, Config{Dir: dir, MaxOpenFiles: 1})
	for p, want := range map[nah.Person]int{ann: 42, bob: 2} {
		if n, err := s.MomentCount(ctx, p.ID); err != nil || n != want {
			t.Errorf("%s after a restart: %d moments, %v, want %d", p.Handle, n, err, want)
		}
	}
}
