package store

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/internal/testutil"
)

// TestReplacedFileKeptForUndo: the file a restore to a time replaced is
// kept for the delete grace, listed by no walk of the data directory
// (databases, media: what sweeps, exports and full backups read), still
// there after a restart, swapped back whole by an undo, and purged by the
// sweep once the grace has passed, after which there is nothing to undo;
// a person's purge takes theirs.
func TestReplacedFileKeptForUndo(t *testing.T) { keptForUndo(t) }

// TestReplacedFileKeptForUndoWithoutHardLinks: the same on a file system
// that refuses hard links (the kept file and media are then copies).
func TestReplacedFileKeptForUndoWithoutHardLinks(t *testing.T) {
	links := 0
	link = func(string, string) error {
		links++
		return &os.LinkError{Op: "link", Err: syscall.EPERM}
	}
	t.Cleanup(func() { link = os.Link })
	keptForUndo(t)
	if links == 0 {
		t.Error("no hard link was tried")
	}
}

func keptForUndo(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clock := testutil.NewClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	cfg := Config{Dir: dir, Now: clock.Now, DeleteGrace: time.Hour}
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ann := mustPerson(t, s, "ann").ID
	post := func(n int) {
		t.Helper()
		for range n {
			clock.Advance(time.Millisecond)
			if _, err := s.CreateMoment(ctx, ann, []byte("a moment")); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func() int {
		t.Helper()
		n, err := s.MomentCount(ctx, ann)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	post(2)
	// The copy a restore would fetch: ann with her first two moments.
	earlier := filepath.Join(t.TempDir(), "earlier.db")
	f, err := s.Backup(ctx, nah.PersonRel(ann))
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(earlier)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, f); err != nil {
		t.Fatal(err)
	}
	out.Close()
	f.Close()
	restore := func() {
		t.Helper()
		err := s.ReplacePersonFile(ctx, ann, func(p string) error {
			b, err := os.ReadFile(earlier)
			if err != nil {
				return err
			}
			return os.WriteFile(p, b, 0o600)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	post(3)
	restore()
	if n := count(); n != 2 {
		t.Fatalf("after the restore ann has %d moments, want 2", n)
	}
	until, ok := s.ReplacedUntil(ann)
	if !ok || !until.Equal(clock.Now().Add(time.Hour)) {
		t.Fatalf("after the restore: kept %v until %v, want until %v", ok, until, clock.Now().Add(time.Hour))
	}
	dbs, err := s.Databases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var media []string
	for _, rel := range dbs {
		if owner := nah.PersonOfRel(rel); owner != "" {
			err := s.MediaOf(ctx, owner, func(names []string) error {
				for _, name := range names {
					media = append(media, nah.MediaRel(owner, name))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, rel := range append(dbs, media...) {
		if strings.HasPrefix(rel, nah.ReplacedRel+"/") || !strings.HasPrefix(rel, nah.PeopleRel+"/") && rel != nah.DirectoryRel {
			t.Errorf("the data directory's walks list %s", rel)
		}
	}
	if !slices.Contains(dbs, nah.PersonRel(ann)) || len(dbs) != 2 {
		t.Errorf("databases: %v", dbs)
	}

	// A restart keeps it, and the time it is kept until.
	s.Close()
	if s, err = Open(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if again, ok := s.ReplacedUntil(ann); !ok || !again.Equal(until) {
		t.Fatalf("after a restart: kept %v until %v, want until %v", ok, again, until)
	}
	if err := s.UndoReplacePersonFile(ctx, ann, nil); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 5 {
		t.Fatalf("after the undo ann has %d moments, want the 5 of before the restore", n)
	}
	if _, ok := s.ReplacedUntil(ann); ok {
		t.Error("the undo left the kept file for another undo")
	}
	post(1)
	if n := count(); n != 6 {
		t.Fatalf("a post after the undo: %d moments, want 6", n)
	}

	// Kept for the grace, purged after it.
	restore()
	if err := os.MkdirAll(s.replacedDir(ann)+".new", 0o700); err != nil { // what a keep cut short leaves
		t.Fatal(err)
	}
	clock.Advance(59 * time.Minute)
	if n, err := s.purgeReplaced(ctx); err != nil || n != 0 {
		t.Fatalf("purge within the grace: %d, %v", n, err)
	}
	if _, ok := s.ReplacedUntil(ann); !ok {
		t.Fatal("the kept file went within the grace")
	}
	if _, err := os.Stat(s.replacedDir(ann) + ".new"); !os.IsNotExist(err) {
		t.Errorf("what a keep cut short left is still there: %v", err)
	}
	clock.Advance(2 * time.Minute)
	if n, err := s.purgeReplaced(ctx); err != nil || n != 1 {
		t.Fatalf("purge after the grace: %d, %v", n, err)
	}
	if _, err := os.Stat(s.replacedDir(ann)); !os.IsNotExist(err) {
		t.Errorf("the kept folder after its purge: %v", err)
	}
	if err := s.UndoReplacePersonFile(ctx, ann, nil); nah.ErrorCode(err) != nah.NotFound {
		t.Errorf("an undo after the purge: %v, want NotFound", err)
	}
	if n := count(); n != 2 {
		t.Errorf("after the refused undo ann has %d moments, want 2", n)
	}

	// A person purged goes with their kept file.
	restore()
	if err := s.DeletePerson(ctx, ann); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	if n, err := s.PurgeDeleted(ctx); err != nil || n != 1 {
		t.Fatalf("purge of ann: %d, %v", n, err)
	}
	if _, err := os.Stat(s.replacedDir(ann)); !os.IsNotExist(err) {
		t.Errorf("ann's kept file after her purge: %v", err)
	}
}
