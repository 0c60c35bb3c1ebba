package backup

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/superfly/ltx"

	"github.com/nah-app/nah/internal/tests3"
)

// TestSnapshotTimedAsListedS3: the visit that writes a snapshot judges it
// by the time a listing gives it, as every later visit does. Litestream's
// S3 client answers the write with the header's time (the history's last
// transaction) and a listing with the upload's: a snapshot of a history
// idle past the window was the base in the visit that wrote it, which
// deleted the history's first level-0 file, and no base in any later one
// (TestRetentionAtScaleS3: "lost its history's first level-0 file").
func TestSnapshotTimedAsListedS3(t *testing.T) {
	ctx := context.Background()
	srv := tests3.Start(t)
	env := srv.Env(srv.Endpoint())
	tg, err := ParseTarget("s3://"+tests3.Bucket+"/listed", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(ctx); err != nil {
		t.Fatal(err)
	}
	const window = 2 * time.Second
	data := t.TempDir()
	r, err := Open(ctx, Config{Target: tg, DataDir: data, MetaDir: filepath.Join(data, "replication"), Retention: window})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(ctx) })
	// The background passes stopped: this test makes the one visit.
	r.closeOnce.Do(func() { close(r.stop) })
	r.stopped.Wait()

	rel := "people/pdddddddddddddddddddddddda/person.db"
	p := filepath.Join(data, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", p+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range []string{`CREATE TABLE moments (id INTEGER PRIMARY KEY, body BLOB NOT NULL)`, `INSERT INTO moments (body) VALUES (randomblob(400))`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
		if ok, err := r.Ship(ctx, p, db); err != nil || !ok {
			t.Fatalf("ship: %v %v", ok, err)
		}
	}
	// Idle past the window: its first snapshot is due, timed as TXID 2.
	time.Sleep(window + 500*time.Millisecond)
	if _, err := r.retainFile(ctx, rel, time.Now()); err != nil {
		t.Fatal(err)
	}
	client, err := tg.client(rel)
	if err != nil {
		t.Fatal(err)
	}
	h, err := readHistory(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Now().Add(-window)
	first, based := false, false
	for _, f := range h[0] {
		first = first || f.MinTXID == 1
	}
	for _, f := range h[9] {
		based = based || f.CreatedAt.Before(cut)
	}
	if len(h[9]) == 0 {
		t.Fatal("no snapshot written: the test no longer makes the visit snapshot")
	}
	if !first && !based {
		var names []string
		for _, lvl := range levelsKept {
			for _, f := range h[lvl] {
				names = append(names, ltx.FormatFilename(f.MinTXID, f.MaxTXID)+"@"+f.CreatedAt.Format(time.StampMilli))
			}
		}
		t.Fatalf("the history's first level-0 file is gone and no snapshot is listed before the window's start (%s): the target holds %v", cut.Format(time.StampMilli), names)
	}
}
