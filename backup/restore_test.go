package backup_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/benbjohnson/litestream/file"

	"github.com/nah-app/nah"
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
	s, err = store.Open(ctx, store.Config{Dir: data, Replicator: r})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Watch(ctx, s.Path(nah.DirectoryRel)); err != nil {
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
	rel := nah.PersonRel(p.ID)
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
	if err != nil || strings.Join(rels, " ") != nah.DirectoryRel+" "+rel {
		t.Fatalf("Databases: %v %v", rels, err)
	}
	out := t.TempDir()
	for _, c := range []struct {
		at   time.Time
		want int
	}{{time.Time{}, 5}, {third, 3}} {
		o := filepath.Join(out, "at-"+c.at.Format("150405.000"))
		src, err := backup.RestoreFile(ctx, target, rel, o, c.at)
		if err != nil || src.String() != "history" {
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
	sw := &backup.Sweeper{Target: target, Keep: 7, Source: s}
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
	if err != nil || src.String() != "sweep "+res.Stamp {
		t.Fatalf("RestoreFile without history: %q %v", src, err)
	}
	if n := moments(t, o); n != 5 {
		t.Errorf("from the sweep: %d moments, want 5", n)
	}
	if _, err := backup.RestoreFile(ctx, target, rel, filepath.Join(out, "old"), made); !errors.Is(err, backup.ErrNothing) {
		t.Errorf("RestoreFile without history, before the sweep: %v, want ErrNothing", err)
	}
}

// The evidence of issue 20 (testdata/replica-corrupt/README.md): a person's
// replica, as a people-1k server left it, whose history restores to a
// corrupt database (sound up to transaction 33, corrupt from 34), and the
// sound live file beside it. Its newest transaction, 38, is of this time
// (the LTX file's header).
const (
	evidenceID     = "imnketelg6ikmgbpvwmfgun5ty"
	evidenceNewest = "2026-12-02T02:01:59.408Z"
)

// corruptTarget makes a directory target holding the evidence replica as
// the history of person evidenceID, and returns it with the path of the
// sound live file.
func corruptTarget(t *testing.T) (*backup.Target, string, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "people"), os.DirFS("testdata/replica-corrupt/replica")); err != nil {
		t.Fatal(err)
	}
	target, err := backup.ParseTarget(dir, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	// A copy of the live file: SQLite leaves a -shm beside what it reads.
	live := filepath.Join(t.TempDir(), "person.db")
	b, err := os.ReadFile(filepath.Join("testdata", "replica-corrupt", "live", evidenceID, "person.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(live, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return target, dir, live
}

// sweepOf runs a sweep stamped at made onto target whose copy of rel is
// the file at src.
func sweepOf(t *testing.T, target *backup.Target, rel, src string, made time.Time) {
	t.Helper()
	sw := &backup.Sweeper{Target: target, Keep: 7, Source: oneFile{rel: rel, src: src}}
	if res, err := sw.Run(context.Background(), made); err != nil || len(res.Failed) > 0 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
}

// oneFile is a data directory of one database, rel, whose copy is the
// file at src, and no media.
type oneFile struct {
	backup.Source // nil: a sweep asks for nothing more
	rel, src      string
}

func (o oneFile) Databases(context.Context) ([]string, error)               { return []string{o.rel}, nil }
func (o oneFile) Backup(context.Context, string) (*os.File, error)          { return os.Open(o.src) }
func (oneFile) MediaOf(context.Context, string, func([]string) error) error { return nil }
func (oneFile) OpenMediaFile(string) (*os.File, error)                      { return nil, os.ErrNotExist }

// TestRestoreFileCorruptHistory: a history that restores to a corrupt
// database is never given back. Without a sweep nothing is left at the
// output and the error says why; with sweeps, the newest sweep whose copy
// passes the integrity check is used (a damaged newer copy is passed
// over), and Restored says what failed and how far the copy is behind the
// history's newest position. A history whose LTX file is truncated falls
// back the same way, with Litestream's error.
func TestRestoreFileCorruptHistory(t *testing.T) {
	ctx := context.Background()
	if err := store.ConfigureSQLite(); err != nil {
		t.Fatal(err)
	}
	rel := nah.PersonRel(evidenceID)
	newest, _ := time.Parse(time.RFC3339Nano, evidenceNewest)
	target, dir, live := corruptTarget(t)
	out := filepath.Join(t.TempDir(), "person.db")

	res, err := backup.RestoreFile(ctx, target, rel, out, time.Time{})
	if err == nil || errors.Is(err, backup.ErrNothing) || !strings.Contains(err.Error(), "integrity check") || !strings.Contains(err.Error(), "no sweep holds a copy") {
		t.Fatalf("corrupt history, no sweep: %v", err)
	}
	if res.From != "" || res.HistoryErr == nil || res.HistoryTXID != 38 || !res.HistoryAt.Equal(newest) {
		t.Errorf("corrupt history, no sweep: %+v", res)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a corrupt restore was left at the output: %v", err)
	}

	// An older sweep with the sound file, a newer one with a damaged copy.
	damaged := filepath.Join(t.TempDir(), "damaged.db")
	b, err := os.ReadFile(live)
	if err != nil {
		t.Fatal(err)
	}
	copy(b[8192:], bytes.Repeat([]byte{0xa5}, 4096)) // the third page
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	older := newest.Add(-5*time.Hour - 30*time.Minute).Truncate(time.Second)
	sweepOf(t, target, rel, live, older)
	sweepOf(t, target, rel, damaged, older.Add(time.Hour))
	res, err = backup.RestoreFile(ctx, target, rel, out, time.Time{})
	if err != nil || res.From != backup.FromSweep || !res.SweepAt.Equal(older) || !res.Fallback() {
		t.Fatalf("corrupt history with sweeps: %+v %v", res, err)
	}
	if want := newest.Sub(older); res.Behind() != want || res.HistoryTXID != 38 || !strings.Contains(res.HistoryErr.Error(), "integrity check") {
		t.Errorf("the fallback: behind %v (want %v), history %d %v", res.Behind(), want, res.HistoryTXID, res.HistoryErr)
	}
	if n, want := moments(t, out), moments(t, live); n != want {
		t.Errorf("from the sweep: %d moments, want the live file's %d", n, want)
	}

	// Litestream's own failure: the newest LTX file cut short.
	last := filepath.Join(dir, "people", evidenceID, "person.db", "ltx", "0", "0000000000000026-0000000000000026.ltx")
	if err := os.Truncate(last, 200); err != nil {
		t.Fatal(err)
	}
	out2 := filepath.Join(t.TempDir(), "person.db")
	res, err = backup.RestoreFile(ctx, target, rel, out2, time.Time{})
	if err != nil || !res.Fallback() || res.HistoryErr == nil || strings.Contains(res.HistoryErr.Error(), "integrity check") {
		t.Errorf("truncated history: %+v %v", res, err)
	}
	t.Logf("truncated history: %v", res.HistoryErr)
}

// TestRestoreTakesOnlyPersonIDs: a path from a replica names a person's
// file only with an id of the root's exact shape; anything looser is not a
// database of nah, refused before the target is read.
func TestRestoreTakesOnlyPersonIDs(t *testing.T) {
	ctx := context.Background()
	target, err := backup.ParseTarget(t.TempDir(), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.db")
	id := nah.NewPersonID()
	if _, err := backup.RestoreFile(ctx, target, nah.PersonRel(id), out, time.Now()); !errors.Is(err, backup.ErrNothing) {
		t.Fatalf("RestoreFile of a person id: %v, want ErrNothing", err)
	}
	for _, bad := range []string{"abc", strings.ToUpper(id), "a_b-c", id + "x", "..", "."} {
		_, err := backup.RestoreFile(ctx, target, "people/"+bad+"/person.db", out, time.Now())
		if err == nil || !strings.Contains(err.Error(), "not a database of nah") {
			t.Errorf("RestoreFile of people/%s/person.db: %v, want it refused as not a database of nah", bad, err)
		}
	}
}

// TestRestoreWhileTheTargetIsCompacted: a file compacted onto the target
// after a restore fetched and checked its plan (a live server's level-1
// compaction) does not fail the restore, which reads the plan it checked:
// the person comes back from the history, whole.
func TestRestoreWhileTheTargetIsCompacted(t *testing.T) {
	ctx := context.Background()
	s, r, target, _, dir := replicated(t)
	p, err := s.CreatePerson(ctx, store.NewPerson{Handle: "ann", PasswordHash: "x"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := s.CreateMoment(ctx, p.ID, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if err := r.SyncAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rel := nah.PersonRel(p.ID)
	compacted := 0
	backup.AfterFetchPlan(func(string) {
		info, err := litestream.NewCompactor(file.NewReplicaClient(filepath.Join(dir, filepath.FromSlash(rel))), slog.New(slog.DiscardHandler)).Compact(ctx, 1)
		if err != nil {
			t.Errorf("compact level 1: %v", err)
			return
		}
		compacted++
		t.Logf("compacted TXIDs %s-%s into level 1 after the plan was fetched", info.MinTXID, info.MaxTXID)
	})
	defer backup.AfterFetchPlan(nil)
	out := filepath.Join(t.TempDir(), "ann.db")
	src, err := backup.RestoreFile(ctx, target, rel, out, time.Time{})
	if err != nil || src.String() != "history" {
		t.Fatalf("RestoreFile while the target was compacted: %q %v", src, err)
	}
	if compacted != 1 {
		t.Fatalf("compacted %d times during the restore, want once", compacted)
	}
	if n := moments(t, out); n != 20 {
		t.Errorf("restored %d moments, want 20", n)
	}
}
