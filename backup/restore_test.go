package backup_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
)

// replicated opens a store on a new data directory whose files replicate
// to a directory target, wired as the server wires it.
func replicated(t *testing.T) (s *store.Store, r *backup.Replicator, target *backup.Target, data, dir string) {
	t.Helper()
	ctx := context.Background()
	data, dir = t.TempDir(), t.TempDir()
	target, err := backup.ParseTarget(dir, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if err := target.Init(ctx); err != nil {
		t.Fatal(err)
	}
	r, err = backup.Open(ctx, backup.Config{Target: target, DataDir: data, MetaDir: filepath.Join(data, "replication")})
	if err != nil {
		t.Fatal(err)
	}
	s, err = store.Open(ctx, store.Config{Dir: data, Hooks: store.Hooks{Watch: r.Watch, Unwatch: r.Unwatch}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Watch(ctx, s.Path(store.DirectoryRel)); err != nil {
		t.Fatal(err)
	}
	return s, r, target, data, dir
}

// moments counts the moments in a person's file at p.
func moments(t *testing.T, p string) int {
	t.Helper()
	if err := store.ConfigureSQLite(); err != nil { // before any connection, as the store needs
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+p+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM moments`).Scan(&n); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return n
}

// TestRestoreFile: a person's file comes back from its Litestream history
// (now, and as it was after three of five moments), is nothing before it
// was made, and comes back from the sweep once its history is gone;
// Databases lists what the target holds and RestoreFile refuses paths nah
// does not make.
func TestRestoreFile(t *testing.T) {
	ctx := context.Background()
	s, r, target, data, dir := replicated(t)
	made := time.Now()
	time.Sleep(1100 * time.Millisecond) // LTX times are kept to the millisecond; be well past
	p, err := s.CreatePerson(ctx, store.NewPerson{Handle: "ann", PasswordHash: "x"})
	if err != nil {
		t.Fatal(err)
	}
	rel := store.PersonRel(p.ID)
	var third time.Time
	for i := range 5 {
		if _, err := s.CreateMoment(ctx, p.ID, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if err := r.SyncAll(ctx); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			time.Sleep(1100 * time.Millisecond)
			third = time.Now()
			time.Sleep(1100 * time.Millisecond)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}

	rels, err := backup.Databases(ctx, target)
	if err != nil || strings.Join(rels, " ") != store.DirectoryRel+" "+rel {
		t.Fatalf("Databases: %v %v", rels, err)
	}
	out := t.TempDir()
	for _, c := range []struct {
		at   time.Time
		want int
	}{{time.Time{}, 5}, {third, 3}} {
		o := filepath.Join(out, "at-"+c.at.Format("150405.000"))
		src, err := backup.RestoreFile(ctx, target, rel, o, c.at)
		if err != nil || src != "history" {
			t.Fatalf("RestoreFile at %v: %q %v", c.at, src, err)
		}
		if n := moments(t, o); n != c.want {
			t.Errorf("restored at %v: %d moments, want %d", c.at, n, c.want)
		}
	}
	if _, err := backup.RestoreFile(ctx, target, rel, filepath.Join(out, "before"), made); !errors.Is(err, backup.ErrNothing) {
		t.Errorf("RestoreFile before the file was made: %v, want ErrNothing", err)
	}
	if _, err := os.Stat(filepath.Join(out, "before")); err == nil {
		t.Error("a file was left where there was nothing to restore")
	}
	for _, bad := range []string{"../directory.db", "people/../../x/person.db", "people/a/b/person.db", "other.db"} {
		if _, err := backup.RestoreFile(ctx, target, bad, filepath.Join(out, "bad"), time.Time{}); err == nil {
			t.Errorf("RestoreFile(%q) accepted", bad)
		}
	}

	// The sweep, then the history gone: the sweep's copy comes back.
	s, err = store.Open(ctx, store.Config{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	sw := &backup.Sweeper{Target: target, Keep: 7, Copy: s.Backup, List: s.Databases}
	res, err := sw.Run(ctx, time.Now())
	s.Close()
	if err != nil || res.Files != 2 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	if err := os.RemoveAll(filepath.Join(dir, filepath.FromSlash(rel))); err != nil {
		t.Fatal(err)
	}
	o := filepath.Join(out, "from-sweep")
	src, err := backup.RestoreFile(ctx, target, rel, o, time.Time{})
	if err != nil || src != "sweep "+res.Stamp {
		t.Fatalf("RestoreFile without history: %q %v", src, err)
	}
	if n := moments(t, o); n != 5 {
		t.Errorf("from the sweep: %d moments, want 5", n)
	}
	if _, err := backup.RestoreFile(ctx, target, rel, filepath.Join(out, "old"), made); !errors.Is(err, backup.ErrNothing) {
		t.Errorf("RestoreFile without history, before the sweep: %v, want ErrNothing", err)
	}
}
