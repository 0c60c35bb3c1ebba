package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/internal/testutil"
	"github.com/nah-app/nah/store/internal/personfile"
)

// MustOpen opens a store on a fresh directory and closes it with the test.
func MustOpen(t *testing.T, cfg Config) *Store {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Feed is FeedRange with no lower bound: the first page of a feed and the
// pages after it, as the tests read them.
func (s *Store) Feed(ctx context.Context, id string, circle bool, before *nah.Cursor, limit int, p *Page) error {
	return s.FeedRange(ctx, id, circle, before, nil, limit, p)
}

func mustPerson(t *testing.T, s *Store, handle string) nah.Person {
	t.Helper()
	p, err := s.CreatePerson(context.Background(), NewPerson{Handle: handle, PasswordHash: "x"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMigrateUpgradesAndRefusesNewer(t *testing.T) {
	ctx := context.Background()
	v1 := fstest.MapFS{
		"m/0001_a.sql": {Data: []byte("CREATE TABLE a(x);")},
	}
	v2 := fstest.MapFS{
		"m/0001_a.sql": {Data: []byte("CREATE TABLE a(x);")},
		"m/0002_b.sql": {Data: []byte("ALTER TABLE a ADD COLUMN y; INSERT INTO a VALUES (1, 2);")},
	}
	file := filepath.Join(t.TempDir(), "x.db")
	db, err := openDB(file, false, 1, 64, SyncFull, false)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old, err := loadMigrations(v1, "m")
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate(ctx, db, file, old, nil); err != nil {
		t.Fatal(err)
	}
	cur, err := loadMigrations(v2, "m")
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate(ctx, db, file, cur, nil); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	var v, y int
	db.QueryRow("PRAGMA user_version").Scan(&v)
	if err := db.QueryRow("SELECT y FROM a").Scan(&y); err != nil || v != 2 || y != 2 {
		t.Fatalf("after upgrade: version %d, y %d, err %v", v, y, err)
	}
	// Opening again is a no-op.
	if err := migrate(ctx, db, file, cur, nil); err != nil {
		t.Fatal(err)
	}
	// The old binary refuses the newer file.
	err = migrate(ctx, db, file, old, nil)
	if !errors.Is(err, ErrTooNew) || !strings.Contains(err.Error(), "schema version 2") {
		t.Fatalf("old binary on new file: %v", err)
	}
}

func TestMigrationsMustBeNumbered(t *testing.T) {
	for _, fsys := range []fstest.MapFS{
		{"m/0002_a.sql": {Data: []byte("")}},
		{"m/first.sql": {Data: []byte("")}},
	} {
		if _, err := loadMigrations(fsys, "m"); err == nil {
			t.Errorf("%v: no error", fsys)
		}
	}
}

func TestStoreRefusesNewerPersonFile(t *testing.T) {
	dir := t.TempDir()
	s := MustOpen(t, Config{Dir: dir})
	p := mustPerson(t, s, "ann")
	s.Close()
	file := filepath.Join(dir, "people", p.ID, "person.db")
	db, err := sql.Open("sqlite", file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s2 := MustOpen(t, Config{Dir: dir})
	_, err = s2.CreateMoment(context.Background(), p.ID, []byte("hi"))
	if !errors.Is(err, ErrTooNew) {
		t.Fatalf("post to a newer file: %v", err)
	}
	s2.Close()
	// A negative version is no schema of ours: refused, not stepped from.
	db, err = sql.Open("sqlite", file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = -1"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s3 := MustOpen(t, Config{Dir: dir})
	if _, err = s3.CreateMoment(context.Background(), p.ID, []byte("hi")); err == nil || !strings.Contains(err.Error(), "schema version -1") {
		t.Fatalf("post to a file of version -1: %v", err)
	}
}

// TestFailedMigrationChangesNothing: a person file of schema 3 (the
// previous release's) whose own unique index on created_at makes person
// migration 5 fail, after migration 4 ran in the same open: reading it
// fails, and the file is as it was, schema version 3 and rows alike, so
// the previous release still reads it; without the index the next read
// migrates it.
func TestFailedMigrationChangesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := MustOpen(t, Config{Dir: dir})
	ann := mustPerson(t, s, "ann")
	s.Close()
	file := filepath.Join(dir, filepath.FromSlash(nah.PersonRel(ann.ID)))
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(file + suffix)
	}
	// Two moments of one millisecond, one stored a second early (as an
	// import before migration 5 could): tying each to its id's time
	// breaks the index.
	at := int64(1_700_000_000_000)
	var stmts []string
	for _, m := range personMigrations[:3] {
		stmts = append(stmts, m.sql)
	}
	stmts = append(stmts, "PRAGMA user_version = 3",
		"CREATE UNIQUE INDEX one_a_millisecond ON moments(created_at)",
		fmt.Sprintf("INSERT INTO moments VALUES ('%s', %d, x'61'), ('%s', %d, x'62')", nah.NewMomentID(at), at, nah.NewMomentID(at), at-1000))
	db, err := openDB(file, false, 1, personCacheKiB, SyncFull, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	state := func() string {
		db, err := sql.Open("sqlite", "file:"+file+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var v int
		var schema string
		db.QueryRow("PRAGMA user_version").Scan(&v)
		db.QueryRow("SELECT group_concat(name, ' ') FROM (SELECT name FROM sqlite_schema ORDER BY name)").Scan(&schema)
		return fmt.Sprintf("version %d, schema %s, rows %v", v, schema, testutil.Dump(t, file))
	}
	before := state()

	s = MustOpen(t, Config{Dir: dir})
	if _, err := s.Moments(ctx, ann.ID, nil, 10, nil); err == nil {
		t.Fatal("read a file whose migration fails")
	}
	s.Close()
	if after := state(); after != before {
		t.Errorf("a failed migration changed the file:\nbefore %s\nafter  %s", before, after)
	}

	db, err = openDB(file, false, 1, personCacheKiB, SyncFull, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("DROP INDEX one_a_millisecond"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s = MustOpen(t, Config{Dir: dir})
	if ms, err := s.Moments(ctx, ann.ID, nil, 10, nil); err != nil || len(ms) != 2 {
		t.Fatalf("after the index went: %d moments, %v", len(ms), err)
	}
	s.Close()
	if v := state(); !strings.HasPrefix(v, "version "+strconv.Itoa(len(personMigrations))+",") {
		t.Errorf("after the index went: %s", v)
	}
}

// TestKeysUsePrimaryKey: every keys query and the head's read walk the
// primary key backwards from their bound, with no sort and no scan of the
// table (each id bound a range, not a filter).
func TestKeysUsePrimaryKey(t *testing.T) {
	s := MustOpen(t, Config{})
	p := mustPerson(t, s, "ann")
	f, err := s.files.Acquire(context.Background(), p.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.files.Release(f)
	qs := append([]string{`SELECT id, created_at, body FROM moments ORDER BY id DESC LIMIT 31`}, stmtText[stmtKeysAll:stmtBodies]...)
	for _, q := range qs {
		args := []any{30}
		if n := strings.Count(q, "?"); n > 1 {
			args = append([]any{"9", "1"}[:n-1], 30)
		}
		got := queryPlan(t, f.DB, q, args...)
		want := "SEARCH moments USING PRIMARY KEY (id"
		if !strings.Contains(q, "WHERE") {
			want = "SCAN moments"
		}
		if !strings.HasPrefix(got, want) || strings.Contains(got, "TEMP B-TREE") || strings.Contains(got, "INDEX moments_time") {
			t.Errorf("%s\nplan: %s", q, got)
		}
	}
	// The bodies: one lookup by the primary key an id, never a scan.
	if got := queryPlan(t, f.DB, stmtText[stmtBodies], `["9","1"]`); !strings.Contains(got, "SEARCH m USING PRIMARY KEY (id=?)") || strings.Contains(got, "SCAN m") {
		t.Errorf("bodies: %s", got)
	}
}

// queryPlan is SQLite's plan of q with args, its steps joined by "; ".
func queryPlan(t *testing.T, db *sql.DB, q string, args ...any) string {
	t.Helper()
	rows, err := db.Query("EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		rows.Scan(&id, &parent, &unused, &detail)
		plan = append(plan, detail)
	}
	return strings.Join(plan, "; ")
}

func TestFileCacheBound(t *testing.T) {
	s := MustOpen(t, Config{MaxOpenFiles: 3})
	ctx := context.Background()
	var ids []string
	for _, h := range []string{"ann", "bob", "cat", "dan", "eve"} {
		p := mustPerson(t, s, h)
		ids = append(ids, p.ID)
		if _, err := s.CreateMoment(ctx, p.ID, []byte(h)); err != nil {
			t.Fatal(err)
		}
		if n := s.Stats().OpenFiles; n > 3 {
			t.Fatalf("%d files open, bound 3", n)
		}
	}
	// The evicted ones are closed (their small WAL kept for the next open:
	// TestEvictionKeepsSmallWAL).
	s.files.WaitClosed()
	for _, id := range ids[:2] {
		if open, _ := s.files.State(id); open {
			t.Errorf("%s: evicted file still open", id)
		}
	}
	// Holding more than the bound works and shrinks back on release.
	var held []*personfile.File
	for _, id := range ids {
		f, err := s.files.Acquire(ctx, id, false)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, f)
	}
	if n := s.Stats().OpenFiles; n != 5 {
		t.Fatalf("%d files open while 5 held", n)
	}
	for _, f := range held {
		s.files.Release(f)
	}
	mustPerson(t, s, "fay")
	if n := s.Stats().OpenFiles; n > 3 {
		t.Fatalf("%d files open after release, bound 3", n)
	}
	for _, id := range ids {
		keys, err := s.momentKeys(ctx, id, nil, nil, 10, nil)
		if err != nil || len(keys) != 1 {
			t.Fatalf("%s: keys %v, %v", id, keys, err)
		}
	}
}

func TestCloseCheckpointsEveryFile(t *testing.T) {
	dir := t.TempDir()
	s := MustOpen(t, Config{Dir: dir})
	ctx := context.Background()
	for _, h := range []string{"ann", "bob", "cat"} {
		p := mustPerson(t, s, h)
		for range 20 {
			if _, err := s.CreateMoment(ctx, p.ID, make([]byte, 400)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	walFiles(t, dir, func(path string, size int64) {
		if size > 0 {
			t.Errorf("%s: %d bytes left after Close", path, size)
		}
	})
}

func walFiles(t *testing.T, dir string, fn func(string, int64)) {
	t.Helper()
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && strings.HasSuffix(p, "-wal") {
			fn(p, info.Size())
		}
		return nil
	})
}

func TestCircleRereadsStaleTimes(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	a := MustOpen(t, Config{Dir: dir, Now: clock})
	ctx := context.Background()
	ann := mustPerson(t, a, "ann")
	// A second store on the same directory stands for a second process.
	b := MustOpen(t, Config{Dir: dir, Now: clock})
	if _, err := a.candidates(ctx, ann.ID, true, nil); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	m, err := b.CreateMoment(ctx, ann.ID, []byte("from b"))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := a.candidates(ctx, ann.ID, true, nil)
	if c[0].newest != 0 {
		t.Fatalf("trusted time re-read early: %d", c[0].newest)
	}
	now = now.Add(30 * time.Second)
	c, _ = a.candidates(ctx, ann.ID, true, nil)
	if c[0].newest != m.CreatedAt {
		t.Fatalf("after 31 s newest is %d, want %d", c[0].newest, m.CreatedAt)
	}
}

func TestSQLiteMemoryStatisticsAreOn(t *testing.T) {
	s := MustOpen(t, Config{})
	mustPerson(t, s, "ann")
	now, peak := SQLiteMemory()
	if now <= 0 || peak < now {
		t.Fatalf("memory statistics look off: now %d, peak %d", now, peak)
	}
}

// TestSessionCache: a revocation through this store works at once; one
// through another process on the same directory within StaleAfter.
func TestSessionCache(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	a := MustOpen(t, Config{Dir: dir, Now: clock})
	ctx := context.Background()
	p := mustPerson(t, a, "ann")
	t1, _ := a.CreateSession(ctx, p.ID)
	t2, _ := a.CreateSession(ctx, p.ID)
	for _, tok := range []string{t1, t2} {
		if _, err := a.PersonForToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.DeleteSession(ctx, t1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PersonForToken(ctx, t1); nah.ErrorCode(err) != nah.Unauthorized {
		t.Fatalf("revoked here, still accepted: %v", err)
	}
	b := MustOpen(t, Config{Dir: dir, Now: clock})
	if err := b.DeleteSession(ctx, t2); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PersonForToken(ctx, t2); err != nil {
		t.Fatalf("cached token refused before StaleAfter: %v", err)
	}
	now = now.Add(31 * time.Second)
	if _, err := a.PersonForToken(ctx, t2); nah.ErrorCode(err) != nah.Unauthorized {
		t.Fatalf("revoked by another process, still accepted after 31 s: %v", err)
	}
}

// TestHooksAlternate: under churn from concurrent posts, replication sees
// each person file opened and closed in turn, never opened twice at once,
// and closed last.
func TestHooksAlternate(t *testing.T) {
	var mu sync.Mutex
	open := map[string]bool{}
	var problems []string
	hooks := testHooks{
		BeforeOpen: func(p string) error {
			mu.Lock()
			defer mu.Unlock()
			if open[p] {
				problems = append(problems, "opened twice: "+p)
			}
			open[p] = true
			return nil
		},
		AfterClose: func(p string) {
			mu.Lock()
			defer mu.Unlock()
			if !open[p] {
				problems = append(problems, "closed while not open: "+p)
			}
			open[p] = false
		},
	}
	dir := t.TempDir()
	s := MustOpen(t, hooks.config(Config{Dir: dir, MaxOpenFiles: 4}))
	ctx := context.Background()
	var ids []string
	for i := range 12 {
		ids = append(ids, mustPerson(t, s, fmt.Sprintf("person%02d", i)).ID)
	}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := range 60 {
				if _, err := s.CreateMoment(ctx, ids[(w*7+i*5)%len(ids)], []byte("x")); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	s.Close()
	mu.Lock()
	defer mu.Unlock()
	for p, o := range open {
		if o {
			problems = append(problems, "still open after Close: "+p)
		}
	}
	if len(problems) > 0 {
		t.Fatal(strings.Join(problems, "\n"))
	}
}

// TestRefusedPersonFileLeavesNoFolder: when a new person's file cannot be
// made (replication refuses it here; a full disk does the same), the
// folder made for it goes too.
func TestRefusedPersonFileLeavesNoFolder(t *testing.T) {
	dir := t.TempDir()
	refuse := errors.New("refused")
	s := MustOpen(t, testHooks{BeforeOpen: func(string) error { return refuse }}.config(Config{Dir: dir}))
	if _, err := s.CreatePerson(context.Background(), NewPerson{Handle: "ann", PasswordHash: "x"}); !errors.Is(err, refuse) {
		t.Fatalf("create with its file refused: %v", err)
	}
	if es, err := os.ReadDir(filepath.Join(dir, "people")); err != nil || len(es) != 0 {
		t.Fatalf("people/ holds %d entries (%v), want none", len(es), err)
	}
}

// TestMomentsByIDMigration: a file of schema 4, with the (created_at, id)
// index and a moment whose time is not its id's (an import before step 5
// did not check), opens as schema 5: that time is its id's, the index is
// gone, and its pages come in the ids' order.
func TestMomentsByIDMigration(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := MustOpen(t, Config{Dir: dir})
	p := mustPerson(t, s, "ann")
	var ids []string
	for i := 0; i < 3; i++ {
		m, err := s.CreateMoment(ctx, p.ID, []byte{byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
		time.Sleep(2 * time.Millisecond)
	}
	s.Close()
	file := filepath.Join(dir, "people", p.ID, "person.db")
	db, err := sql.Open("sqlite", file)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE INDEX moments_time ON moments(created_at, id)`,
		`UPDATE moments SET created_at = created_at - 86400000 WHERE id = '` + ids[2] + `'`,
		// A version 4 file has none of migration 6's tables.
		`DROP TABLE mls_clients; DROP TABLE mls_key_packages; DROP TABLE mls_group; DROP TABLE mls_members;
		DROP TABLE mls_removals; DROP TABLE mls_commits; DROP TABLE mls_inbox; DROP TABLE mls_key_log`,
		`PRAGMA user_version = 4`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	db.Close()

	s = MustOpen(t, Config{Dir: dir})
	got, err := s.Moments(ctx, p.ID, nil, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d moments after the migration, want 3", len(got))
	}
	for i, m := range got {
		at, _ := nah.MomentTime(m.ID)
		if m.ID != ids[2-i] || m.CreatedAt != at {
			t.Errorf("moment %d: (%d, %s), want %s at its id's time %d", i, m.CreatedAt, m.ID, ids[2-i], at)
		}
	}
	f, err := s.files.Acquire(ctx, p.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.files.Release(f)
	var v, idx int
	if err := f.DB.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if err := f.DB.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'moments_time'`).Scan(&idx); err != nil {
		t.Fatal(err)
	}
	if v != len(personMigrations) || idx != 0 {
		t.Fatalf("user_version %d, moments_time %d after the migration; want %d and none", v, idx, len(personMigrations))
	}
}
