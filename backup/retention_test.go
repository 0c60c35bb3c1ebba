package backup_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/internal/testutil"
)

// TestFirstFileOutlivesTakeUp: a history's first level-0 file is the only
// one timed when the file began (a compacted file is timed as its newest
// input), so it stays until there is a base snapshot; Litestream's own
// level-0 retention deleted it once a watched file's level 1 covered it,
// and a restore to a time between then and the first level-1 file found
// no history at all. Two ships and a take-up on a 20-second window (0.7 s
// level-1 compactions, as TestRetentionAtScale runs them).
func TestFirstFileOutlivesTakeUp(t *testing.T) {
	ctx := context.Background()
	bf := newBareFile(t, "pcccccccccccccccccccccccca", 20*time.Second)
	r, target, dir, rel, p := bf.r, bf.target, bf.replica, bf.rel, bf.path
	db := bf.open(t)
	defer db.Close()
	insert := func() {
		t.Helper()
		if _, err := db.Exec(`INSERT INTO moments (body) VALUES (randomblob(400))`); err != nil {
			t.Fatal(err)
		}
	}
	ship := func() {
		t.Helper()
		if ok, err := r.Ship(ctx, p, db); err != nil || !ok {
			t.Fatalf("ship: %v %v", ok, err)
		}
	}
	if _, err := db.Exec(`CREATE TABLE moments (id INTEGER PRIMARY KEY, body BLOB NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	insert()
	ship() // TXID 1: the file with one moment
	first := time.Now()
	time.Sleep(300 * time.Millisecond)
	insert()
	ship() // TXID 2, 300 ms later
	// Taken up and written for 2.5 s: Litestream compacts level 0 into
	// level 1 every 0.7 s and runs its level-0 retention (0.7 s) after.
	if err := r.Watch(ctx, p); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		insert()
		if err := r.Sync(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Unwatch(p); err != nil {
		t.Fatal(err)
	}
	if l1, _ := filepath.Glob(filepath.Join(dir, filepath.FromSlash(rel), "ltx", "1", "*.ltx")); len(l1) == 0 {
		t.Fatal("no level-1 file after 2.5 s watched: the test no longer makes Litestream compact")
	}

	out := filepath.Join(t.TempDir(), "first.db")
	at := first.Add(time.Millisecond)
	if _, err := backup.RestoreFile(ctx, target, rel, out, at); err != nil {
		es, _ := filepath.Glob(filepath.Join(dir, filepath.FromSlash(rel), "ltx", "*", "*.ltx"))
		t.Fatalf("restore to %s, after the first ship: %v\nthe target holds %v", at.Format(time.StampMilli), err, es)
	}
	if rows := testutil.Dump(t, out)["moments"]; len(rows) != 1 {
		t.Fatalf("restore to just after the first ship holds %d moments, want 1", len(rows))
	}
}
