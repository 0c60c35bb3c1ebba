package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/internal/testutil"
)

// previousRelease is the commit whose binary the upgrade tests start from:
// the last one before person schema 4 and 5 (idempotency keys, moments in
// their ids' order), so that an upgrade runs migrations on a family's data.
// Name the tag of the release before once releases are tagged.
const previousRelease = "2397046e3452837b014c677534c0f048845b576b"

var previous struct {
	once sync.Once
	path string
	err  string
}

// previousBinary builds previousRelease's nah, once per test process
// (about 20 s on 2 cores with a warm build cache: its modules are this
// commit's).
func previousBinary(t *testing.T) string {
	t.Helper()
	previous.once.Do(func() {
		dir, err := os.MkdirTemp("", "nah-previous")
		if err != nil {
			previous.err = err.Error()
			return
		}
		root := filepath.Join(sourceDir, "..", "..")
		tar := filepath.Join(dir, "src.tar")
		src := filepath.Join(dir, "src")
		for _, c := range []*exec.Cmd{
			exec.Command("git", "-C", root, "archive", "-o", tar, previousRelease),
			exec.Command("mkdir", src),
			exec.Command("tar", "-xf", tar, "-C", src),
			exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version=previous", "-o", filepath.Join(dir, "nah"), "./cmd/nah"),
		} {
			if c.Args[0] == "go" {
				c.Dir = src
				c.Env = append(os.Environ(), "CGO_ENABLED=0")
			}
			if out, err := c.CombinedOutput(); err != nil {
				previous.err = strings.Join(c.Args, " ") + ": " + err.Error() + "\n" + string(out) +
					"(a shallow clone lacks the commit: git fetch --unshallow)"
				return
			}
		}
		previous.path = filepath.Join(dir, "nah")
	})
	if previous.err != "" {
		t.Fatal(previous.err)
	}
	return previous.path
}

// family is what a family made with one release, checked on the next.
type family struct {
	annID, annToken, bobToken string
	moments                   []string // ann's, then bob's
	mediaID                   string
	mediaSum                  [32]byte
}

// fill signs up two people through the API, connects them, and posts
// moments and a photo.
func fill(t *testing.T, p *proc) family {
	t.Helper()
	var f family
	f.annID, f.annToken = p.signup(t, "ann")
	_, f.bobToken = p.signup(t, "bob")
	p.connect(t, f.annToken, f.bobToken)
	f.moments = append(f.moments, p.post(t, f.annToken, "ann's first"), p.post(t, f.annToken, "ann's second"), p.post(t, f.bobToken, "bob's first"))
	photo := bytes.Repeat([]byte("a photo "), 4096)
	f.mediaSum = sha256.Sum256(photo)
	req, _ := http.NewRequest("POST", "http://"+p.addr+"/api/v1/media", bytes.NewReader(photo))
	req.Header.Set("Authorization", "Bearer "+f.annToken)
	req.Header.Set("Content-Type", "image/jpeg")
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct{ ID string }
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 201 {
		t.Fatalf("media: %d %v", res.StatusCode, err)
	}
	f.mediaID = out.ID
	return f
}

// check finds everything fill made, through the API of p.
func (f family) check(t *testing.T, p *proc) {
	t.Helper()
	feed := strings.Join(p.feedIDs(t, f.bobToken), " ")
	for _, id := range f.moments {
		if !strings.Contains(feed, id) {
			t.Errorf("moment %s is not in bob's feed after the upgrade: %s", id, feed)
		}
	}
	req, _ := http.NewRequest("GET", "http://"+p.addr+"/api/v1/people/"+f.annID+"/media/"+f.mediaID, nil)
	req.Header.Set("Authorization", "Bearer "+f.bobToken)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || sha256.Sum256(body) != f.mediaSum {
		t.Errorf("ann's photo after the upgrade: %d, %d bytes", res.StatusCode, len(body))
	}
}

// TestUpgradeKeepsData: a data directory and replica filled through the
// API by the previous release are served whole by this one (its schema
// migrated), the replica carries on from where it was (its moments; media
// reach the replica with the nightly sweep), and the previous binary then
// refuses the migrated files instead of serving or changing them. A
// migration that fails changes nothing (failedMigrationChangesNothing),
// and ann's export made by the previous release imports into this one.
func TestUpgradeKeepsData(t *testing.T) {
	old := previousBinary(t)
	dir := filepath.Join(t.TempDir(), "data")
	replica := dir + ".replica"

	p := startCmd(t, exec.Command(old, "serve"), dir)
	f := fill(t, p)
	export := exportOf(t, p, f.annToken)
	p.stop(t)
	failedMigrationChangesNothing(t, dir, f)

	p = start(t, dir)
	f.check(t, p)
	// Sessions made by the previous release still sign in, and a post
	// after the upgrade reaches the replica the previous release began.
	after := p.post(t, f.annToken, "after the upgrade")
	p.stop(t)
	// Every file the upgrade migrated is on the replica as migrated, read
	// since or written: the restore drill's check finds no difference.
	if out, errOut, code := nahRun(t, "restore", "-check", "-from", replica, "-data", dir); code != 0 {
		t.Errorf("nah restore -check after the upgrade: exit %d\n%s%s", code, out, errOut)
	}
	restored := filepath.Join(t.TempDir(), "restored")
	restoreInto(t, replica, restored)
	p = start(t, restored)
	if feed := strings.Join(p.feedIDs(t, f.bobToken), " "); !strings.Contains(feed, after) {
		t.Errorf("the moment posted after the upgrade is not in the restored replica: %s", feed)
	}
	p.stop(t)

	// Rolling the binary back over migrated data: the previous release
	// refuses to start on a directory database this release migrated, with
	// the reason, and leaves the data as it was.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	back := exec.CommandContext(ctx, old, "serve")
	back.Env = []string{"NAH_ADDR=127.0.0.1:0", "NAH_DATA_DIR=" + dir, "NAH_REPLICA_URL=" + replica, "PATH=" + os.Getenv("PATH")}
	out, err := back.CombinedOutput()
	if err == nil || ctx.Err() != nil || !strings.Contains(string(out), "newer than this binary") {
		t.Errorf("the previous release on migrated data: %v (%v), want it to refuse to start saying why:\n%s", err, ctx.Err(), out)
	}
	link := importWith(t, dir, replica, export)
	p = start(t, dir)
	f.check(t, p)
	f.imported(t, p, link)
	p.stop(t)
}

// exportOf downloads the export of the person signed in with token.
func exportOf(t *testing.T, p *proc, token string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+p.addr+"/api/v1/me/export", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	file := filepath.Join(t.TempDir(), "export.tar")
	out, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, res.Body); err != nil || res.StatusCode != 200 {
		t.Fatalf("export: %d %v", res.StatusCode, err)
	}
	return file
}

// importWith imports ann's export, made by the previous release, into
// dir with this one (nah person import, the server stopped) as ann.moved,
// and returns her one-time link's token.
func importWith(t *testing.T, dir, replica, export string) string {
	t.Helper()
	out, errOut, code := nahRunEnv(t, []string{"NAH_DATA_DIR=" + dir, "NAH_REPLICA_URL=" + replica},
		"person", "import", "-handle", "ann.moved", export)
	link := regexp.MustCompile(`/reset/(\S+)`).FindStringSubmatch(out + errOut)
	if code != 0 || link == nil {
		t.Fatalf("importing the previous release's export: exit %d\n%s%s", code, out, errOut)
	}
	return link[1]
}

// imported finds every moment of ann's export and her photo through the
// API of p, signed in as ann.moved with a password set through link.
func (f family) imported(t *testing.T, p *proc, link string) {
	t.Helper()
	res, err := client.PostForm("http://"+p.addr+"/reset/"+link, url.Values{"password": {"password-moved"}, "password2": {"password-moved"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	st, signin, err := p.call("POST", "/api/v1/sessions", "", map[string]string{"handle": "ann.moved", "password": "password-moved"})
	if err != nil || st != 201 {
		t.Fatalf("the imported ann signs in: %d %v (the reset: %d)", st, err, res.StatusCode)
	}
	token := signin["token"].(string)
	id := signin["person"].(map[string]any)["id"].(string)
	got := p.ownMoments(t, id, token)
	if len(got) != 2 || !got[f.moments[0]] || !got[f.moments[1]] {
		t.Errorf("the imported ann's moments: %v, want %v", got, f.moments[:2])
	}
	req, _ := http.NewRequest("GET", "http://"+p.addr+"/api/v1/people/"+id+"/media/"+f.mediaID, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || sha256.Sum256(body) != f.mediaSum {
		t.Errorf("the imported ann's photo: %d, %d bytes", res.StatusCode, len(body))
	}
}

// failedMigrationChangesNothing starts this release on a copy of dir, the
// previous release's data, holding an index named as the one the
// directory's migration 6 makes at its end (an operator's, say): the
// migration fails after its first statements, the server refuses to start
// saying so, and the directory and ann's file are as they were, schema
// version included. Without the index, the next start migrates.
func failedMigrationChangesNothing(t *testing.T, dir string, f family) {
	t.Helper()
	cp := filepath.Join(t.TempDir(), "data")
	if out, err := exec.Command("cp", "-a", dir, cp).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	directory := filepath.Join(cp, nah.DirectoryRel)
	sqlExec(t, directory, "CREATE INDEX sessions_used ON sessions(created_at)")
	ann := filepath.Join(cp, filepath.FromSlash(nah.PersonRel(f.annID)))
	before := [2]string{fileState(t, directory), fileState(t, ann)}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "serve")
	cmd.Env = []string{"NAH_ADDR=127.0.0.1:0", "NAH_DATA_DIR=" + cp, "NAH_REPLICA_URL=" + cp + ".replica", "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil || !strings.Contains(string(out), "from version 5 to 6 failed at 0006_session_use.sql and changed nothing") {
		t.Errorf("this release on data whose migration fails: %v (%v), want it to refuse to start saying so:\n%s", err, ctx.Err(), out)
	}
	if after := [2]string{fileState(t, directory), fileState(t, ann)}; after != before {
		t.Errorf("a failed migration changed the data:\nbefore %s\nafter  %s", before, after)
	}

	sqlExec(t, directory, "DROP INDEX sessions_used")
	p := start(t, cp)
	f.check(t, p)
	p.stop(t)
}

// sqlExec runs stmt on the SQLite file at path.
func sqlExec(t *testing.T, path, stmt string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		t.Fatalf("%s: %s: %v", path, stmt, err)
	}
}

// fileState is the schema version, schema and rows of the SQLite file at
// path.
func fileState(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	var schema string
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT group_concat(sql, ';') FROM (SELECT sql FROM sqlite_schema ORDER BY name)").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("version %d, schema %s, rows %v", v, schema, testutil.Dump(t, path))
}

// TestOlderBinaryNamesTheWriter: a start that creates the data directory
// records its version (nah version's), and a binary older than the
// directory's schema refuses to start in one sentence naming the version
// that wrote it, leaving the data as it was. The newer writer is made by
// hand: its schema one past this binary's, its version the test's.
func TestOlderBinaryNamesTheWriter(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	start(t, dir).stop(t)
	directory := filepath.Join(dir, nah.DirectoryRel)
	out, _, _ := nahRun(t, "version")
	ours := strings.TrimPrefix(strings.SplitN(out, "\n", 2)[0], "nah ")
	db, err := sql.Open("sqlite", directory)
	if err != nil {
		t.Fatal(err)
	}
	var writer string
	var schema int
	if err := db.QueryRow("SELECT value FROM meta WHERE key = 'written_by'").Scan(&writer); err != nil || writer != ours {
		t.Errorf("the directory's writer: %q, %v; want this binary's %q", writer, err, ours)
	}
	if err := db.QueryRow("PRAGMA user_version").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	db.Close()
	sqlExec(t, directory, "UPDATE meta SET value = 'v9.9.9' WHERE key = 'written_by'")
	sqlExec(t, directory, fmt.Sprintf("PRAGMA user_version = %d", schema+1))
	before := fileState(t, directory)

	want := fmt.Sprintf("nah: the data in %s was written by nah v9.9.9 (directory schema %d); this binary is nah %s and reads schema up to %d: install nah v9.9.9 or newer\n",
		dir, schema+1, ours, schema)
	_, errOut, code := nahRunEnv(t, []string{"NAH_ADDR=127.0.0.1:0", "NAH_DATA_DIR=" + dir, "NAH_REPLICA_URL=" + dir + ".replica"}, "serve")
	if code != 1 || !strings.HasSuffix(errOut, want) {
		t.Errorf("this binary on newer data: exit %d\n%s\nwant it to end with:\n%s", code, errOut, want)
	}
	if after := fileState(t, directory); after != before {
		t.Errorf("the refusal changed the directory:\nbefore %s\nafter  %s", before, after)
	}
}
