//go:build unix

package store

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// privateModes walks dir and reports every folder that is not 0700 and
// every file that is not 0600, and how many files it saw.
func privateModes(t *testing.T, dir string) (files int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		want := privateFile
		if e.IsDir() {
			want = privateDir
		} else {
			files++
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, info.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDataDirIsPrivate: with a umask that takes nothing away, a new data
// directory, its folders and every SQLite file (database, -wal, -shm) are
// readable by their owner only.
func TestDataDirIsPrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "data")
	s := MustOpen(t, Config{Dir: dir})
	p := mustPerson(t, s, "ann")
	if _, err := s.CreateMoment(context.Background(), p.ID, []byte("a moment")); err != nil {
		t.Fatal(err)
	}
	// While open, each database has its -wal and -shm beside it.
	if n := privateModes(t, dir); n < 6 {
		t.Fatalf("%d files checked, want directory.db and person.db with their -wal and -shm", n)
	}
}

// TestOpenTightensLooseDataDir: a data directory made by an older binary,
// readable by everyone, is made private at Open, which says so once; a
// person file is made private when it next opens.
func TestOpenTightensLooseDataDir(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPerson(t, s, "ann")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	personDir := filepath.Join(dir, "people", p.ID)
	for path, mode := range map[string]fs.FileMode{
		dir:                                   0o755,
		filepath.Join(dir, "people"):          0o755,
		filepath.Join(dir, "directory.db"):    0o644,
		personDir:                             0o755,
		filepath.Join(personDir, "person.db"): 0o666,
	} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	var log bytes.Buffer
	s = MustOpen(t, Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if got := strings.Count(log.String(), "made the data directory private"); got != 1 {
		t.Errorf("%d log lines about it, want 1:\n%s", got, log.String())
	}
	for _, path := range []string{dir, filepath.Join(dir, "people"), filepath.Join(dir, "directory.db")} {
		if !strings.Contains(log.String(), path) {
			t.Errorf("the log does not name %s:\n%s", path, log.String())
		}
	}
	if _, err := s.CreateMoment(ctx, p.ID, []byte("a moment")); err != nil {
		t.Fatal(err)
	}
	// The person's folder is left as it was (people/ shuts others out); all
	// else is private.
	if err := os.Chmod(personDir, privateDir); err != nil {
		t.Fatal(err)
	}
	privateModes(t, dir)
}

// TestOpenMakesNewDataDirPrivateQuietly: a folder made beforehand for a new
// data directory is made private without a warning: there was nothing in
// it to expose.
func TestOpenMakesNewDataDirPrivateQuietly(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	MustOpen(t, Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if log.Len() > 0 {
		t.Errorf("a new data directory logged:\n%s", log.String())
	}
	privateModes(t, dir)
}
