package main

import (
	"bytes"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The restore tests run the real server with a directory replica, stop it,
// run `nah restore` and compare every table of every database row by row
// with the data directory the server left.

// replicaEnv is the server's environment for a replica in dir.
func replicaEnv(dir string, more ...string) []string {
	return append([]string{"NAH_REPLICA_URL=" + dir, "NAH_SWEEP_EVERY=off"}, more...)
}

// nahRun runs the binary with args and returns its output and exit code.
func nahRun(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return o.String(), e.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), 0
}

// restoreInto runs `nah restore` and fails the test unless it succeeds.
func restoreInto(t *testing.T, from, to string, more ...string) string {
	t.Helper()
	out, errOut, code := nahRun(t, append([]string{"restore", "-from", from, "-to", to}, more...)...)
	if code != 0 {
		t.Fatalf("nah restore: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("nah restore: %s", strings.TrimSpace(out))
	return out
}

// dumpDB reads every table of the database at p: table name to its rows,
// each row printed, sorted.
func dumpDB(t *testing.T, p string) map[string][]string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+p+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	var tables []string
	for rows.Next() {
		var n string
		rows.Scan(&n)
		tables = append(tables, n)
	}
	rows.Close()
	out := map[string][]string{}
	for _, tb := range tables {
		rs, err := db.Query(`SELECT * FROM "` + tb + `"`)
		if err != nil {
			t.Fatalf("%s %s: %v", p, tb, err)
		}
		cols, _ := rs.Columns()
		list := []string{}
		for rs.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rs.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			list = append(list, fmt.Sprintf("%q", vals))
		}
		if err := rs.Err(); err != nil {
			t.Fatalf("%s %s: %v", p, tb, err)
		}
		rs.Close()
		sort.Strings(list)
		out[tb] = list
	}
	return out
}

// databases lists the databases of data directory dir, as paths under it.
func databases(t *testing.T, dir string) []string {
	t.Helper()
	out := []string{"directory.db"}
	ps, _ := filepath.Glob(filepath.Join(dir, "people", "*", "person.db"))
	for _, p := range ps {
		rel, _ := filepath.Rel(dir, p)
		out = append(out, filepath.ToSlash(rel))
	}
	sort.Strings(out)
	return out
}

// sameData reports every difference between two data directories: the
// same databases, and in each the same tables with the same rows.
func sameData(t *testing.T, live, restored string) {
	t.Helper()
	a, b := databases(t, live), databases(t, restored)
	if strings.Join(a, " ") != strings.Join(b, " ") {
		t.Errorf("databases differ:\nlive     %v\nrestored %v", a, b)
	}
	rows := 0
	for _, rel := range a {
		if _, err := os.Stat(filepath.Join(restored, rel)); err != nil {
			continue
		}
		da, db := dumpDB(t, filepath.Join(live, rel)), dumpDB(t, filepath.Join(restored, rel))
		for tb, ra := range da {
			rb, ok := db[tb]
			if !ok {
				t.Errorf("%s: table %s missing from the restore", rel, tb)
				continue
			}
			rows += len(ra)
			if strings.Join(ra, "\n") != strings.Join(rb, "\n") {
				t.Errorf("%s: table %s differs: live %d rows, restored %d\n%s", rel, tb, len(ra), len(rb), firstDiff(ra, rb))
			}
		}
		for tb := range db {
			if _, ok := da[tb]; !ok {
				t.Errorf("%s: table %s only in the restore", rel, tb)
			}
		}
	}
	t.Logf("%d databases, %d rows compared", len(a), rows)
}

func firstDiff(a, b []string) string {
	in := func(s []string) map[string]bool {
		m := map[string]bool{}
		for _, x := range s {
			m[x] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var d []string
	for _, x := range a {
		if !mb[x] {
			d = append(d, "- "+x)
		}
	}
	for _, x := range b {
		if !ma[x] {
			d = append(d, "+ "+x)
		}
	}
	if len(d) > 6 {
		d = append(d[:6], fmt.Sprintf("… %d more", len(d)-6))
	}
	return strings.Join(d, "\n")
}

// post posts one moment and returns its id.
func (p *proc) post(t *testing.T, token, body string) string {
	t.Helper()
	st, out, err := p.call("POST", "/api/v1/moments", token, map[string]string{"body": base64.StdEncoding.EncodeToString([]byte(body))})
	if err != nil || st != 201 {
		t.Fatalf("post: %d %v %v", st, out, err)
	}
	return out["id"].(string)
}

// connect connects two people through an invite.
func (p *proc) connect(t *testing.T, tokenA, tokenB string) {
	t.Helper()
	st, out, err := p.call("POST", "/api/v1/invites", tokenA, nil)
	if err != nil || st != 201 {
		t.Fatalf("invite: %d %v %v", st, out, err)
	}
	st, out, err = p.call("POST", "/api/v1/connections", tokenB, map[string]string{"code": out["code"].(string)})
	if err != nil || (st != 200 && st != 201) {
		t.Fatalf("redeem: %d %v %v", st, out, err)
	}
}

// feedIDs is the first page of a person's feed, as moment ids.
func (p *proc) feedIDs(t *testing.T, token string) []string {
	t.Helper()
	st, out, err := p.call("GET", "/api/v1/feed?limit=100", token, nil)
	if err != nil || st != 200 {
		t.Fatalf("feed: %d %v %v", st, out, err)
	}
	var ids []string
	for _, m := range out["moments"].([]any) {
		ids = append(ids, m.(map[string]any)["id"].(string))
	}
	return ids
}

// checkModes checks that a restored data directory is private: folders
// 0700, databases 0600.
func checkModes(t *testing.T, dir string) {
	t.Helper()
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if info.IsDir() {
			want = 0o700
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, info.Mode().Perm(), want)
		}
		return nil
	})
}

// TestRestoreRoundTrip: people sign up (one never posts), post, delete and
// connect on a server replicating to a directory; after it stops, `nah
// restore` rebuilds the data directory with every table of every database
// equal row by row, private modes, and a server started on it serves the
// same feed to the same session. A second restore into it is refused.
func TestRestoreRoundTrip(t *testing.T) {
	data, repl, out := t.TempDir(), filepath.Join(t.TempDir(), "replica"), filepath.Join(t.TempDir(), "restored")
	p := start(t, data, replicaEnv(repl)...)
	type person struct{ id, token string }
	var people []person
	for _, h := range []string{"ann", "bob", "cat", "dan"} {
		id, token := p.signup(t, h)
		people = append(people, person{id, token})
	}
	p.connect(t, people[0].token, people[1].token)
	p.connect(t, people[0].token, people[2].token)
	for i, pp := range people[:3] {
		for j := range 5 {
			id := p.post(t, pp.token, fmt.Sprintf("moment %d of %d", j, i))
			if j == 2 {
				if st, _, err := p.call("DELETE", "/api/v1/moments/"+id, pp.token, nil); err != nil || st != 204 {
					t.Fatalf("delete: %d %v", st, err)
				}
			}
		}
	}
	feed := p.feedIDs(t, people[0].token)
	p.stop(t)

	summary := restoreInto(t, repl, out)
	if !strings.Contains(summary, "Restored 5 files") || !strings.Contains(summary, "5 from Litestream history") {
		t.Errorf("summary: %s", summary)
	}
	sameData(t, data, out)
	checkModes(t, out)

	p2 := start(t, out, "NAH_REPLICA_URL=off")
	if got := p2.feedIDs(t, people[0].token); strings.Join(got, " ") != strings.Join(feed, " ") || len(got) != 12 {
		t.Errorf("feed on the restored server: %d moments %v, want %d %v", len(got), got, len(feed), feed)
	}
	p2.stop(t)

	o, e, code := nahRun(t, "restore", "-from", repl, "-to", out)
	if code != 2 || !strings.Contains(e, "is not empty") {
		t.Errorf("restore into a non-empty directory: exit %d\n%s%s", code, o, e)
	}
}
