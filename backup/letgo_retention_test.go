package backup_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/superfly/ltx"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
)

// TestLetGoFilesKeepOnlyThePolicy: a watched file let go of and never
// written again leaves Litestream's store, whose own retention then never
// looks at it again: the policy's background visits must. 200 files on a
// 6-second window are watched, written one to eight times (synced) and
// let go of; 8 more are written all along. Once every let-go file's
// last write is a window old (and a visit later), its history on the
// target is what the policy keeps, a snapshot of all of it and the newest
// level-0 file, and every file restores equal to the live data.
func TestLetGoFilesKeepOnlyThePolicy(t *testing.T) {
	const (
		window  = 6 * time.Second
		letGo   = 200
		busy    = 8
		workers = 4
	)
	ctx := context.Background()
	data, replica := t.TempDir(), filepath.Join(t.TempDir(), "replica")
	target, err := backup.ParseTarget(replica, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if err := target.Init(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := backup.Open(ctx, backup.Config{Target: target, DataDir: data, MetaDir: filepath.Join(data, "replication"),
		Logger: testLogger(t), Retention: window})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(ctx) })

	rels := make([]string, letGo+busy)
	paths := make([]string, len(rels))
	for i := range rels {
		var seed [16]byte
		binary.BigEndian.PutUint64(seed[8:], uint64(i)+1)
		rels[i] = nah.PersonRel(nah.PersonIDFrom(bytes.NewReader(seed[:])))
		paths[i] = filepath.Join(data, filepath.FromSlash(rels[i]))
		if err := os.MkdirAll(filepath.Dir(paths[i]), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	open := func(p string) *sql.DB {
		db, err := sql.Open("sqlite", p+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		return db
	}
	insert := func(db *sql.DB) error {
		_, err := db.Exec(`INSERT INTO moments (body) VALUES (randomblob(300 + abs(random()) % 600))`)
		return err
	}
	create := func(db *sql.DB) error {
		_, err := db.Exec(`CREATE TABLE IF NOT EXISTS moments (id INTEGER PRIMARY KEY, body BLOB NOT NULL)`)
		return err
	}

	// The busy files: watched and written every 100-300 ms until the end.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var errs atomic.Value
	fail := func(err error) { errs.CompareAndSwap(nil, err) }
	for i := letGo; i < len(rels); i++ {
		wg.Go(func() {
			db := open(paths[i])
			defer db.Close()
			if err := create(db); err != nil {
				fail(err)
				return
			}
			if err := r.Watch(ctx, paths[i]); err != nil {
				fail(err)
				return
			}
			var synced time.Time
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(100+k*37%200) * time.Millisecond):
				}
				if err := insert(db); err != nil {
					fail(err)
					return
				}
				// Synced at most once a second, as the store's queue does.
				if time.Since(synced) >= time.Second {
					synced = time.Now()
					r.Sync(ctx, paths[i]) // a failure is logged, and caught up later
				}
			}
		})
	}

	// The let-go files: watched, written 1-8 times with a sync each, let go.
	var lastWrite atomic.Int64
	var next atomic.Int64
	var lw sync.WaitGroup
	for range workers {
		lw.Go(func() {
			for i := int(next.Add(1)) - 1; i < letGo; i = int(next.Add(1)) - 1 {
				db := open(paths[i])
				err := create(db)
				if err == nil {
					err = r.Watch(ctx, paths[i])
				}
				for k := 0; err == nil && k < 1+i%8; k++ {
					if err = insert(db); err == nil {
						err = r.Sync(ctx, paths[i])
					}
				}
				db.Close()
				lastWrite.Store(time.Now().UnixNano())
				if err == nil {
					err = r.Unwatch(paths[i])
				}
				if err != nil {
					fail(fmt.Errorf("%s: %w", rels[i], err))
					return
				}
			}
		})
	}
	lw.Wait()
	if err, _ := errs.Load().(error); err != nil {
		t.Fatal(err)
	}
	// A file's snapshot is timed as its last transaction and becomes the
	// base a second after it leaves the window; visits come window/28
	// (0.2 s) apart, one file at a time and pausing as long as each took,
	// so a pass over 208 files takes a few seconds.
	last := time.Unix(0, lastWrite.Load())
	type kept struct {
		level    int
		min, max ltx.TXID
	}
	list := func(rel string) []kept {
		var out []kept
		for lvl := 0; lvl <= 9; lvl++ {
			es, _ := os.ReadDir(filepath.Join(replica, filepath.FromSlash(rel), "ltx", fmt.Sprint(lvl)))
			for _, e := range es {
				if lo, hi, err := ltx.ParseFilename(e.Name()); err == nil {
					out = append(out, kept{lvl, lo, hi})
				}
			}
		}
		return out
	}
	// What the policy keeps of a history unwritten for a window: one
	// snapshot of all of it, and the newest level-0 file (the replica's
	// position), which holds the same last transaction.
	beyond := func() (bad []string) {
		for _, rel := range rels[:letGo] {
			files := list(rel)
			var top ltx.TXID
			for _, f := range files {
				top = max(top, f.max)
			}
			snap, newest0, other := 0, 0, 0
			for _, f := range files {
				switch {
				case f.level == 9 && f.min == 1 && f.max == top:
					snap++
				case f.level == 0 && f.max == top:
					newest0++
				default:
					other++
				}
			}
			if snap != 1 || newest0 != 1 || other != 0 {
				bad = append(bad, fmt.Sprintf("%s keeps %v, want a snapshot of TXIDs 1-%s and the newest level-0 file", rel, files, top))
			}
		}
		return bad
	}
	time.Sleep(time.Until(last.Add(window + time.Second)))
	var bad []string
	// Under a loaded machine a pass over every file due took 15 s and more
	// (the full package beside other work): the bound is generous, the
	// wait ends as soon as every file is right.
	eventually(time.Until(last.Add(window+40*time.Second)), func() bool { bad = beyond(); return len(bad) == 0 })
	t.Logf("every let-go file's history was the policy's %v after the last let-go", time.Since(last).Round(100*time.Millisecond))
	for i, b := range bad {
		if i == 5 {
			t.Errorf("... and %d more let-go files keep more than the policy", len(bad)-5)
			break
		}
		t.Errorf("%.1f s after the last let-go: %s", time.Since(last).Seconds(), b)
	}
	st := r.RetentionStats()
	t.Logf("retention: %d LTX files deleted, %d snapshots, %d failures", st.Deleted, st.Snapshots, st.Failures)

	close(stop)
	wg.Wait()
	if err, _ := errs.Load().(error); err != nil {
		t.Fatal(err)
	}
	if err := r.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for i, rel := range rels {
		p := filepath.Join(out, fmt.Sprintf("%03d.db", i))
		if _, err := backup.RestoreFile(ctx, target, rel, p, time.Time{}); err != nil {
			t.Fatalf("restore %s: %v", rel, err)
		}
		sameRows(t, paths[i], p)
	}
}
