package store

import (
	"context"
	"database/sql"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

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

// TestClosedReadsKeepTheWAL: the reads of a closed file outside the cache
// (the sweep's and full backup's copy, the overview's media count) leave
// an evicted file's kept WAL as it is: their connection is the file's
// last, and its close would checkpoint frames no ship has read yet into
// the database, so the queued ship finds no WAL to carry on from and the
// file is taken up and snapshot whole. The copy holds the WAL's moments,
// and a clean Close still leaves no WAL with anything in it.
func TestClosedReadsKeepTheWAL(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(ctx, Config{Dir: dir, MaxOpenFiles: 1})
	if err != nil {
		t.Fatal(err)
	}
	ann, bob := mustPerson(t, s, "ann"), mustPerson(t, s, "bob")
	for _, p := range []nah.Person{ann, ann, bob} { // ann's file is evicted
		if _, err := s.CreateMoment(ctx, p.ID, make([]byte, 400)); err != nil {
			t.Fatal(err)
		}
	}
	s.files.WaitClosed()
	walPath := filepath.Join(dir, "people", ann.ID, "person.db-wal")
	size := func() int64 {
		st, err := os.Stat(walPath)
		if err != nil {
			return 0
		}
		return st.Size()
	}
	kept := size()
	if kept == 0 {
		t.Fatal("ann's evicted file kept no WAL")
	}

	f, err := s.Backup(ctx, nah.PersonRel(ann.ID))
	if err != nil {
		t.Fatal(err)
	}
	if n := size(); n != kept {
		t.Errorf("the backup's copy of ann's closed file changed her WAL: %d bytes, was %d", n, kept)
	}
	if n := momentsInCopy(t, f); n != 2 {
		t.Errorf("the backup's copy holds %d of ann's moments, want 2", n)
	}
	if _, err := s.Totals(ctx); err != nil {
		t.Fatal(err)
	}
	if n := size(); n != kept {
		t.Errorf("the overview's count of ann's media changed her WAL: %d bytes, was %d", n, kept)
	}
	if open, _ := s.files.State(ann.ID); open {
		t.Error("ann's file was opened through the cache")
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	walFiles(t, dir, func(path string, size int64) {
		if size > 0 {
			t.Errorf("%s: %d bytes left after Close", path, size)
		}
	})
}

// momentsInCopy counts the moments of a database copy open as f.
func momentsInCopy(t *testing.T, f *os.File) int {
	t.Helper()
	defer f.Close()
	p := filepath.Join(t.TempDir(), "copy.db")
	out, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, f); err != nil {
		t.Fatal(err)
	}
	out.Close()
	var n int
	if err := ReadFile(context.Background(), p, func(tx *sql.Tx) error {
		return tx.QueryRow(`SELECT count(*) FROM moments`).Scan(&n)
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDeleteEmptiesAKeptWAL: a person deleted while their evicted file
// keeps its WAL has their folder moved with a WAL that holds nothing: the
// shutdown empties the WALs it knows by their path in people/, and a kept
// one moved to deleted/ would stay non-empty after a clean stop. The undo
// brings back every moment.
func TestDeleteEmptiesAKeptWAL(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := MustOpen(t, Config{Dir: dir, MaxOpenFiles: 1, DeleteGrace: time.Hour})
	ann, bob := mustPerson(t, s, "ann"), mustPerson(t, s, "bob")
	for _, p := range []nah.Person{ann, ann, bob} { // ann's file is evicted
		if _, err := s.CreateMoment(ctx, p.ID, make([]byte, 400)); err != nil {
			t.Fatal(err)
		}
	}
	s.files.WaitClosed()
	if st, err := os.Stat(filepath.Join(dir, "people", ann.ID, "person.db-wal")); err != nil || st.Size() == 0 {
		t.Fatalf("ann's evicted file kept no WAL: %v", err)
	}
	if err := s.DeletePerson(ctx, ann.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	walFiles(t, dir, func(path string, size int64) {
		if size > 0 {
			t.Errorf("%s: %d bytes left after Close", path, size)
		}
	})
	s = MustOpen(t, Config{Dir: dir, MaxOpenFiles: 1, DeleteGrace: time.Hour})
	if err := s.RestorePerson(ctx, ann.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := s.MomentCount(ctx, ann.ID); err != nil || n != 2 {
		t.Errorf("ann's moments after the undo: %d, %v, want 2", n, err)
	}
}

// TestShutdownEmptiesAWALAClosedReadFound: a WAL this process did not
// leave (another process's, or a killed run's) found by a read of the
// closed file (the backup's copy) is emptied by the clean Close, like the
// WALs this process left.
func TestShutdownEmptiesAWALAClosedReadFound(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	a := MustOpen(t, Config{Dir: dir, MaxOpenFiles: 1}) // stands for the run that left the WAL
	ann, bob := mustPerson(t, a, "ann"), mustPerson(t, a, "bob")
	for _, p := range []nah.Person{ann, ann, bob} { // ann's file is evicted, its WAL kept
		if _, err := a.CreateMoment(ctx, p.ID, make([]byte, 400)); err != nil {
			t.Fatal(err)
		}
	}
	a.files.WaitClosed()
	walPath := filepath.Join(dir, "people", ann.ID, "person.db-wal")
	if st, err := os.Stat(walPath); err != nil || st.Size() == 0 {
		t.Fatalf("ann's evicted file kept no WAL: %v", err)
	}
	b, err := Open(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	f, err := b.Backup(ctx, nah.PersonRel(ann.ID))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(walPath); err == nil && st.Size() > 0 {
		t.Errorf("ann's WAL holds %d bytes after a clean Close of the run that read her closed file", st.Size())
	}
}
