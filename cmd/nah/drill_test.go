package main

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nah-app/nah/internal/testutil"
	"github.com/nah-app/nah/store"
)

// TestRestoreCheck: `nah restore -check` restores every database of the
// replica and compares it with a data directory: exit 0 when all are
// equal; a person whose last write never reached the replica is named,
// with what differs, and the exit status is 1; the data directory is
// left as it was.
func TestRestoreCheck(t *testing.T) {
	data, repl := t.TempDir(), filepath.Join(t.TempDir(), "replica")
	p := start(t, data, replicaEnv(repl, "NAH_DRILL_EVERY=off")...)
	var bob string
	for i, h := range []string{"ann", "bob", "cat"} {
		id, token := p.signup(t, h)
		for j := range 3 + i {
			p.post(t, token, fmt.Sprintf("moment %d of %s", j, h))
		}
		if h == "bob" {
			bob = id
		}
	}
	p.stop(t)

	out, errOut, code := nahRun(t, "restore", "-check", "-from", repl, "-data", data)
	if code != 0 || !strings.Contains(out, "3 of 3 people restored and equal, the directory too") {
		t.Fatalf("check of a sound replica: exit %d\n%s%s", code, out, errOut)
	}

	// A write the replica never saw: made on the file while no server ran.
	if err := store.ConfigureSQLite(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(data, "people", bob, "person.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO moments (id, created_at, body) VALUES ('zzzz', 1, x'00')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before := testutil.Dump(t, filepath.Join(data, "people", bob, "person.db"))
	out, errOut, code = nahRun(t, "restore", "-check", "-from", repl, "-data", data)
	if code != 1 || !strings.Contains(out, "DIFFERS bob (people/"+bob+"/person.db): differs from the live file: moments has 4 rows on the replica and 5 in the live file") {
		t.Errorf("check with bob's write missing: exit %d\n%s%s", code, out, errOut)
	}
	if after := testutil.Dump(t, filepath.Join(data, "people", bob, "person.db")); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Error("the check changed the data directory")
	}
	if _, e, code := nahRun(t, "restore", "-check", "-from", repl); code != 2 || !strings.Contains(e, "-check -from URL -data DIR") {
		t.Errorf("check without -data: exit %d %s", code, e)
	}
}
