package integrity_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nah-app/nah/internal/integrity"
	_ "modernc.org/sqlite"
)

// open opens the SQLite file at p and closes it with the test.
func open(t *testing.T, p string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestCheck: a sound file passes; a file whose index no longer matches its
// table fails with an *Error naming the index, at every limit; a file that
// is not SQLite fails with the driver's error, not an *Error.
func TestCheck(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	sound := filepath.Join(dir, "sound.db")
	db := open(t, sound)
	for _, q := range []string{
		`CREATE TABLE t(a INTEGER, b INTEGER)`,
		`CREATE INDEX t_a ON t(a)`,
		`INSERT INTO t VALUES (1, 10), (2, 20), (3, 30)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := integrity.Check(ctx, db, 0); err != nil {
		t.Fatalf("a sound file: %v", err)
	}
	db.Close()

	// The index's entries hold a; its schema now says b, so no row of t
	// is found in it.
	broken := filepath.Join(dir, "broken.db")
	b, err := os.ReadFile(sound)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, b, 0o600); err != nil {
		t.Fatal(err)
	}
	db = open(t, broken)
	db.SetMaxOpenConns(1)
	for _, q := range []string{
		`PRAGMA writable_schema = ON`,
		`UPDATE sqlite_master SET sql = 'CREATE INDEX t_a ON t(b)' WHERE name = 't_a'`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	for _, limit := range []int{0, 1} {
		err := integrity.Check(ctx, open(t, broken), limit)
		var ie *integrity.Error
		if !errors.As(err, &ie) || !strings.Contains(ie.Problem, "t_a") || err.Error() != "integrity check: "+ie.Problem {
			t.Fatalf("limit %d: a file whose index is wrong: %v, want an *Error naming t_a", limit, err)
		}
	}

	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, []byte(strings.Repeat("not a database ", 512)), 0o600); err != nil {
		t.Fatal(err)
	}
	err = integrity.Check(ctx, open(t, junk), 0)
	var ie *integrity.Error
	if err == nil || errors.As(err, &ie) || !strings.HasPrefix(err.Error(), "integrity check: ") {
		t.Fatalf("a file that is not SQLite: %v, want the driver's error", err)
	}
}
