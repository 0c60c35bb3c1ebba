// Package testdisk makes a small, really full disk for tests: a tmpfs
// mounted on a test's folder, filled to ENOSPC and freed again. It is its own
// package because the store's and the app's tests both need it and test files
// cannot share code across packages; nothing but tests imports it.
package testdisk

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size (such as "8m") on a fresh folder and
// unmounts it with the test. Mounting needs root: without it the test is
// skipped, except in CI, where a skipped test would pass off as a passing
// one, so there it fails.
func Mount(t testing.TB, size string) string {
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

// Fill grows a filler file in dir until the file system is full. Call it
// again before each write that must find the disk full: SQLite frees
// space by itself (a file closed removes its WAL), and a write may fit in it.
func Fill(t testing.TB, dir string) {
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

// Free deletes the filler of Fill.
func Free(t testing.TB, dir string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
}
