package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nah-app/nah"
)

// mountTmpfs mounts a tmpfs of size (such as "8m") on a fresh folder and
// unmounts it with the test. Mounting needs root: without it the test is
// skipped, except in CI, where a skipped test would pass off as a passing
// one, so there it fails.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount a tmpfs to fill (CI runs as root and must run this test): %v", err)
		}
		t.Skipf("cannot mount a tmpfs to fill (%v): run the tests as root to test a full disk", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk grows a filler file in dir until the file system is full. Call
// it again before each write that must find the disk full: SQLite frees
// space by itself (a file closed removes its WAL), and a write may fit in it.
func fillDisk(t *testing.T, dir string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "filler"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for err == nil {
		_, err = f.Write(buf)
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling %s: %v, want ENOSPC", dir, err)
	}
}

// freeDisk deletes the filler of fillDisk.
func freeDisk(t *testing.T, dir string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
}

func wantInsufficientStorage(t *testing.T, what string, err error) {
	t.Helper()
	if c := nah.ErrorCode(err); c != nah.InsufficientStorage {
		t.Errorf("%s on a full disk: %v (%s), want insufficient_storage", what, err, c)
	}
}

// TestDiskFullRefusesWritesAndReads: on a full disk writes are
// InsufficientStorage, a refused new person leaves no folder, reads go on,
// also of files that were closed and cannot be opened the usual way (their
// shared-memory index needs space), and once space returns all is well.
func TestDiskFullRefusesWritesAndReads(t *testing.T) {
	dir := mountTmpfs(t, "8m")
	ctx := context.Background()
	s := MustOpen(t, Config{Dir: dir, HeadCacheBytes: -1})
	ann, bob := mustPerson(t, s, "ann"), mustPerson(t, s, "bob")
	if err := s.ImportConnections(ctx, [][2]string{{ann.ID, bob.ID}}, 1); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		for _, p := range []nah.Person{ann, bob} {
			if _, err := s.CreateMoment(ctx, p.ID, []byte(p.Handle)); err != nil {
				t.Fatal(err)
			}
		}
	}
	folders := func() int {
		t.Helper()
		es, err := os.ReadDir(filepath.Join(dir, "people"))
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	s.files.forget(ann.ID) // closed: opening it again needs space

	fillDisk(t, dir)
	_, err := s.CreateMoment(ctx, bob.ID, []byte("to an open file"))
	wantInsufficientStorage(t, "a post", err)
	fillDisk(t, dir)
	_, err = s.CreateMoment(ctx, ann.ID, []byte("to a closed file"))
	wantInsufficientStorage(t, "a post to a closed file", err)
	fillDisk(t, dir)
	_, err = s.CreatePerson(ctx, NewPerson{Handle: "cat", PasswordHash: "x"})
	wantInsufficientStorage(t, "a new person", err)
	if n := folders(); n != 2 {
		t.Errorf("people/ holds %d folders after a refused new person, want 2", n)
	}
	fillDisk(t, dir)
	_, err = s.CreateSession(ctx, ann.ID)
	wantInsufficientStorage(t, "a new session", err)
	fillDisk(t, dir)
	_, err = s.CreateInvite(ctx, ann.ID)
	wantInsufficientStorage(t, "an invite", err)

	s.files.forget(ann.ID) // closing removes the WAL: fill what that frees
	s.files.forget(bob.ID)
	fillDisk(t, dir)
	for _, p := range []nah.Person{ann, bob} {
		if got, err := feedIDs(t, s, p.ID, true, 2); err != nil || len(got) != 6 {
			t.Errorf("%s's feed on a full disk: %d moments, %v", p.Handle, len(got), err)
		}
		if n, err := s.MomentCount(ctx, p.ID); err != nil || n != 3 {
			t.Errorf("%s's count on a full disk: %d, %v", p.Handle, n, err)
		}
	}
	if _, err := s.PersonForToken(ctx, "not-a-token-but-the-right-length-43-chars-x"); nah.ErrorCode(err) != nah.Unauthorized {
		t.Errorf("a token check on a full disk: %v", err)
	}
	if !s.Stats().DiskFull {
		t.Error("Stats().DiskFull is false on a full disk")
	}
	if len(s.FileProblems()) != 0 {
		t.Errorf("a full disk is not a broken file: %+v", s.FileProblems())
	}

	freeDisk(t, dir)
	if _, err := s.CreateMoment(ctx, ann.ID, []byte("space is back")); err != nil {
		t.Fatalf("a post once space is back: %v", err)
	}
	if _, err := s.CreatePerson(ctx, NewPerson{Handle: "cat", PasswordHash: "x"}); err != nil {
		t.Fatalf("a new person once space is back: %v", err)
	}
	if s.Stats().DiskFull {
		t.Error("Stats().DiskFull is still true once space is back and a write went through")
	}
}

// TestOpenOnFullDiskSaysSo: a server started on a full disk cannot open its
// directory (the shared-memory index needs space) and says why.
func TestOpenOnFullDiskSaysSo(t *testing.T) {
	dir := mountTmpfs(t, "8m")
	s, err := Open(context.Background(), Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	mustPerson(t, s, "ann")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fillDisk(t, dir)
	if _, err := Open(context.Background(), Config{Dir: dir}); err == nil || !strings.Contains(err.Error(), "is full: free some space") {
		t.Fatalf("open on a full disk: %v", err)
	}
	freeDisk(t, dir)
	MustOpen(t, Config{Dir: dir})
}
