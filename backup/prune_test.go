package backup_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
)

// TestLetGoFilesKeepOneLocalLTXFile: a watched file writes a level-0 LTX
// file locally at each sync, and Litestream removes its copies only by
// its own level-0 retention, minutes later, which a file let go of never
// reaches. Once the last sync put them all on the target, the local state
// keeps only the newest (where the next ship or take-up carries on from):
// after people-1k was seeded through the API it held 826 MB beside 159 MB
// of databases. A let-go whose last sync failed keeps them all, and the
// replica restores equal once the target is back.
func TestLetGoFilesKeepOneLocalLTXFile(t *testing.T) {
	ctx := context.Background()
	const id = "pcccccccccccccccccccccccca"
	bf := newBareFile(t, id, 0)
	r, target, dir, rel, p := bf.r, bf.target, bf.replica, bf.rel, bf.path
	data := filepath.Dir(filepath.Dir(filepath.Dir(p)))
	db := bf.open(t)
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE moments (id INTEGER PRIMARY KEY, body BLOB NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	local := func() []string {
		names, _ := filepath.Glob(filepath.Join(data, "replication", filepath.FromSlash(rel), "ltx", "0", "*.ltx"))
		sort.Strings(names)
		return names
	}
	remote := func() []string {
		names, _ := filepath.Glob(filepath.Join(dir, filepath.FromSlash(rel), "ltx", "0", "*.ltx"))
		sort.Strings(names)
		return names
	}
	// writeWatched: n commits, each synced to its own level-0 file.
	writeWatched := func(n int) {
		t.Helper()
		if err := r.Watch(ctx, p); err != nil {
			t.Fatal(err)
		}
		for range n {
			if _, err := db.Exec(`INSERT INTO moments (body) VALUES (randomblob(400))`); err != nil {
				t.Fatal(err)
			}
			if err := r.Sync(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		if got := len(local()); got < n {
			t.Fatalf("%d local level-0 files after %d synced commits: the test no longer makes them", got, n)
		}
	}

	for round := range 3 {
		writeWatched(12)
		if err := r.Unwatch(p); err != nil {
			t.Fatal(err)
		}
		l, rm := local(), remote()
		if len(l) != 1 {
			t.Fatalf("round %d: %d local level-0 files after the let-go, want the newest only", round, len(l))
		}
		if filepath.Base(l[0]) != filepath.Base(rm[len(rm)-1]) {
			t.Fatalf("round %d: local %s, the target's newest %s", round, filepath.Base(l[0]), filepath.Base(rm[len(rm)-1]))
		}
	}

	// The target away at the let-go: its last sync fails, nothing goes.
	writeWatched(6)
	away := dir + ".away"
	if err := os.Rename(dir, away); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO moments (body) VALUES (randomblob(400))`); err != nil {
		t.Fatal(err)
	}
	var err error
	unwatched := make(chan error, 1)
	go func() { unwatched <- r.Unwatch(p) }()
	select {
	case err = <-unwatched:
	case <-time.After(2 * time.Minute):
		t.Fatal("the let-go with the target away never returned")
	}
	if err == nil {
		t.Fatal("the let-go's last sync to a target that is a plain file succeeded")
	}
	if n := len(local()); n < 2 {
		t.Fatalf("%d local level-0 files after a failed last sync: the ones the target lacks went", n)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(away, dir); err != nil {
		t.Fatal(err)
	}
	if err := r.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	writeWatched(1)
	if err := r.Unwatch(p); err != nil {
		t.Fatal(err)
	}
	if n := len(local()); n != 1 {
		t.Fatalf("%d local level-0 files after the target came back and the let-go, want 1", n)
	}
	out := filepath.Join(t.TempDir(), "restored.db")
	if _, err := backup.RestoreFile(ctx, target, rel, out, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := store.IntegrityCheck(ctx, out); err != nil {
		t.Fatal(err)
	}
	sameRows(t, p, out)
}
