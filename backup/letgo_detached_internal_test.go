package backup

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestLetGoFileIsLeftAlone: once Unwatch returns, nothing of the
// Litestream that watched the file writes to or deletes from its history:
// the next ship and its compaction own it. Litestream's compactions and
// its level-0 retention went on past the let-go (1-5 of 40 let-gos, level
// 1 compacted every 71 ms on a 2 s window), and a ship's compaction then
// read a level 0 half deleted. Our own passes are stopped, so any change
// after the let-go is Litestream's.
func TestLetGoFileIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	data, repl := t.TempDir(), t.TempDir()
	tg, err := ParseTarget(repl, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := Open(ctx, Config{Target: tg, DataDir: data, MetaDir: filepath.Join(data, "replication"), Retention: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(ctx) })
	r.closeOnce.Do(func() { close(r.stop) }) // the syncers and the retention passes
	r.stopped.Wait()

	rel := "people/peeeeeeeeeeeeeeeeeeeeeeeea/person.db"
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
	if _, err := db.Exec(`CREATE TABLE moments (id INTEGER PRIMARY KEY, body BLOB NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	held := func() []string {
		var out []string
		for _, lvl := range []string{"0", "1"} {
			es, _ := os.ReadDir(filepath.Join(repl, filepath.FromSlash(rel), "ltx", lvl))
			for _, e := range es {
				out = append(out, lvl+"/"+e.Name())
			}
		}
		return out
	}
	for i := range 40 {
		if err := r.Watch(ctx, p); err != nil {
			t.Fatal(err)
		}
		for range 4 {
			if _, err := db.Exec(`INSERT INTO moments (body) VALUES (randomblob(300))`); err != nil {
				t.Fatal(err)
			}
			if err := r.Sync(ctx, p); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := r.Unwatch(p); err != nil {
			t.Fatal(err)
		}
		before := held()
		time.Sleep(40 * time.Millisecond)
		if after := held(); !slices.Equal(before, after) {
			t.Fatalf("let-go %d: the target changed after Unwatch returned\nbefore %v\nafter  %v", i, before, after)
		}
	}
	if !slices.ContainsFunc(held(), func(n string) bool { return n[0] == '1' }) {
		t.Fatal("no level-1 file: Litestream no longer compacts here and the test proves nothing")
	}
}
