package testutil

import (
	"database/sql"
	"fmt"
	"sort"
	"testing"

	_ "modernc.org/sqlite" // the driver the store registers too
)

// Dump reads every table of the SQLite file at path, SQLite's and
// Litestream's own excepted: table name to its rows, each printed, sorted.
// The file is opened read-only and waits up to 10 s for a writer. A test
// that opens a store after a Dump must have configured SQLite first
// (store.ConfigureSQLite): SQLite refuses it after its first connection.
func Dump(t testing.TB, path string) map[string][]string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_litestream%' ORDER BY name`)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		tables = append(tables, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	rows.Close()
	out := map[string][]string{}
	for _, tb := range tables {
		rs, err := db.Query(`SELECT * FROM "` + tb + `"`)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, tb, err)
		}
		cols, _ := rs.Columns()
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		list := []string{}
		for rs.Next() {
			if err := rs.Scan(ptrs...); err != nil {
				t.Fatalf("%s: %s: %v", path, tb, err)
			}
			list = append(list, fmt.Sprintf("%q", vals))
		}
		if err := rs.Err(); err != nil {
			t.Fatalf("%s: %s: %v", path, tb, err)
		}
		rs.Close()
		sort.Strings(list)
		out[tb] = list
	}
	return out
}

// Checkpoint empties the WAL of the SQLite file at path, which nobody has
// open, into the file and removes it, so that the file alone holds its
// data (a person file closed to make room keeps a small WAL).
func Checkpoint(t testing.TB, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatalf("%s: checkpoint: %v", path, err)
	}
}
