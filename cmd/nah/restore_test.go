package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/internal/testutil"
	"github.com/nah-app/nah/store"
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
	return nahRunEnv(t, nil, args...)
}

// nahRunEnv is nahRun with the variables env (an S3 target's keys, say).
func nahRunEnv(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
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
		da, db := testutil.Dump(t, filepath.Join(live, rel)), testutil.Dump(t, filepath.Join(restored, rel))
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

// TestRestoreProperty: 40 people on a small cache (16 open files, 4 of
// them watched by replication) post and delete at random from 4 clients,
// so files are registered, written and evicted over and over, often
// within Litestream's first monitor tick; after the server stops, `nah
// restore` equals the data directory file by file, row by row. A watch
// that did not sync right after registering loses such writes here.
func TestRestoreProperty(t *testing.T) {
	data, repl, out := t.TempDir(), filepath.Join(t.TempDir(), "replica"), filepath.Join(t.TempDir(), "restored")
	p := start(t, data, replicaEnv(repl, "NAH_MAX_OPEN_FILES=16", "NAH_REPLICA_MAX_FILES=4")...)
	type person struct {
		token string
		mu    sync.Mutex
		own   []string
	}
	people := make([]*person, 40)
	for i := range people {
		_, token := p.signup(t, fmt.Sprintf("prop%02d", i))
		people[i] = &person{token: token}
	}
	var posts, deletes atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range 80 {
				pp := people[r.IntN(len(people))]
				pp.mu.Lock()
				if len(pp.own) > 0 && r.IntN(4) == 0 {
					k := r.IntN(len(pp.own))
					if st, _, err := p.call("DELETE", "/api/v1/moments/"+pp.own[k], pp.token, nil); err != nil || st != 204 {
						t.Errorf("delete: %d %v", st, err)
					}
					pp.own = append(pp.own[:k], pp.own[k+1:]...)
					deletes.Add(1)
				} else {
					st, res, err := p.call("POST", "/api/v1/moments", pp.token, map[string]string{"body": base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "w%d %d", w, r.Int()))})
					if err != nil || st != 201 {
						t.Errorf("post: %d %v %v", st, res, err)
					} else {
						pp.own = append(pp.own, res["id"].(string))
						posts.Add(1)
					}
				}
				pp.mu.Unlock()
			}
		})
	}
	wg.Wait()
	p.stop(t)
	t.Logf("%d posts, %d deletes", posts.Load(), deletes.Load())
	restoreInto(t, repl, out)
	sameData(t, data, out)
}

// TestRestoreToTime: `nah restore -time T` gives the whole server as it
// was at T: the moments posted well before T (one of them deleted after
// T) and nothing later, not even a person who signed up after T, nor
// their media mirrored by a later sweep.
func TestRestoreToTime(t *testing.T) {
	data, repl, out := t.TempDir(), filepath.Join(t.TempDir(), "replica"), filepath.Join(t.TempDir(), "restored")
	p := start(t, data, replicaEnv(repl)...)
	_, ann := p.signup(t, "ann")
	_, bob := p.signup(t, "bob")
	p.connect(t, ann, bob)
	var before []string
	for i := range 3 {
		before = append(before, p.post(t, ann, fmt.Sprint("before ", i)), p.post(t, bob, fmt.Sprint("before ", i)))
	}
	sort.Strings(before)
	time.Sleep(3 * time.Second) // two sync intervals and more: on the replica
	at := time.Now()
	time.Sleep(1500 * time.Millisecond)
	p.post(t, ann, "after")
	if st, _, err := p.call("DELETE", "/api/v1/moments/"+before[0], ann, nil); err != nil || (st != 204 && st != 404) {
		t.Fatalf("delete: %d %v", st, err)
	}
	p.call("DELETE", "/api/v1/moments/"+before[0], bob, nil)
	catID, cat := p.signup(t, "cat")
	p.post(t, cat, "cat was not here yet")
	req, _ := http.NewRequest("POST", "http://"+p.addr+"/api/v1/media", bytes.NewReader([]byte("cat's photo")))
	req.Header.Set("Authorization", "Bearer "+cat)
	req.Header.Set("Content-Type", "image/jpeg")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("cat's upload: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	p.stop(t)
	sweepStamped(t, data, repl, time.Now()) // mirrors cat's media

	res := restoreInto(t, repl, out, "-time", at.UTC().Format(time.RFC3339Nano))
	if !strings.Contains(res, "Left out 1 file with no copy as old as") {
		t.Errorf("summary: %s", res)
	}
	if n := len(databases(t, out)); n != 3 {
		t.Errorf("%d databases restored, want the directory, ann's and bob's", n)
	}
	if _, err := os.Stat(filepath.Join(out, "people", catID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cat, left out, has a folder in the restored data directory (her mirrored media restored): %v", err)
	}
	p2 := start(t, out, "NAH_REPLICA_URL=off")
	got := p2.feedIDs(t, ann)
	sort.Strings(got)
	if strings.Join(got, " ") != strings.Join(before, " ") {
		t.Errorf("ann's feed restored to %s:\n%v\nwant\n%v", at.Format(time.RFC3339Nano), got, before)
	}
	if st, _, _ := p2.call("POST", "/api/v1/sessions", "", map[string]string{"handle": "cat", "password": "password-cat"}); st == 201 || st == 200 {
		t.Errorf("cat, who signed up after -time, can sign in on the restored server: %d", st)
	}
	p2.stop(t)
}

// TestRestoreAfterKill: 16 writers post; the server is killed with SIGKILL;
// restarted on the same directory and replica, each writer posts once
// more (their file is watched again and syncs what the kill left) and the
// server stops; `nah restore` then holds every moment acknowledged more
// than 2 s before the kill. Under both values of NAH_SYNC: Litestream reads
// the WAL that the kernel holds, fsynced or not.
func TestRestoreAfterKill(t *testing.T) {
	for _, mode := range []string{"full", "normal"} {
		t.Run(mode, func(t *testing.T) { restoreAfterKill(t, 16, 16, "NAH_SYNC="+mode) })
	}
}

// TestRestoreAfterKillEvicting is TestRestoreAfterKill with 40 writers'
// files and 16 open at most: nearly every post evicts a file, which keeps
// its small WAL (keptWAL) with writes still waiting for their ship when
// the kill comes, and the next start must ship them from that WAL; only
// half the writers post after the restart, so that the others' files are
// shipped only because their marker says they wait.
func TestRestoreAfterKillEvicting(t *testing.T) {
	restoreAfterKill(t, 40, 20, "NAH_SYNC=full", "NAH_MAX_OPEN_FILES=16")
}

// restoreAfterKill is TestRestoreAfterKill with writers people posting,
// the first again of them posting once after the restart.
func restoreAfterKill(t *testing.T, writers, again int, extraEnv ...string) {
	data, repl, out := t.TempDir(), filepath.Join(t.TempDir(), "replica"), filepath.Join(t.TempDir(), "restored")
	env := replicaEnv(repl, extraEnv...)
	p := start(t, data, env...)
	type ack struct {
		id string
		at time.Time
	}
	tokens := make([]string, writers)
	ids := make([]string, writers)
	for i := range tokens {
		ids[i], tokens[i] = p.signup(t, fmt.Sprintf("writer%02d", i))
	}
	var mu sync.Mutex
	acked := map[int][]ack{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	body := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 400))
	for i, token := range tokens {
		wg.Go(func() {
			for ctx.Err() == nil {
				st, res, err := p.call("POST", "/api/v1/moments", token, map[string]string{"body": body})
				if err != nil {
					return
				}
				if st == 201 {
					mu.Lock()
					acked[i] = append(acked[i], ack{res["id"].(string), time.Now()})
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(4 * time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-p.done
	cancel()
	wg.Wait()
	wals, _ := filepath.Glob(filepath.Join(data, "people", "*", "person.db-wal"))
	left := 0
	for _, w := range wals {
		if st, err := os.Stat(w); err == nil && st.Size() > 0 {
			left++
		}
	}
	t.Logf("%d of %d person files had a WAL with something in it at the kill", left, writers)

	p2 := start(t, data, env...)
	for _, token := range tokens[:again] {
		p2.post(t, token, "after the restart")
	}
	p2.stop(t)
	restoreInto(t, repl, out)
	p3 := start(t, out, "NAH_REPLICA_URL=off")
	old, all, kept := 0, 0, 0
	for i, token := range tokens {
		got := p3.ownMoments(t, ids[i], token)
		for _, a := range acked[i] {
			all++
			if got[a.id] {
				kept++
			}
			if a.at.Before(killed.Add(-2 * time.Second)) {
				old++
				if !got[a.id] {
					t.Errorf("writer %d: moment %s acknowledged %v before the kill is not in the restore", i, a.id, killed.Sub(a.at).Round(time.Millisecond))
				}
			}
		}
	}
	if old < 16 {
		t.Fatalf("only %d moments acknowledged 2 s before the kill; the test proved little", old)
	}
	t.Logf("%d moments acknowledged, %d of them more than 2 s before the kill; %d of all in the restore", all, old, kept)
	p3.stop(t)
}

// litestreamCLI returns Litestream's own command, of the version in
// go.mod, built once per machine into the user cache directory (a build
// takes minutes on two shared cores). It needs module downloads the
// project's go.sum does not list, so it is built with go install in an
// empty module. A failed build skips the test, except under CI=true.
func litestreamCLI(t *testing.T) string {
	t.Helper()
	fail := t.Skipf
	if os.Getenv("CI") == "true" {
		fail = t.Fatalf
	}
	list := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/benbjohnson/litestream")
	list.Dir = sourceDir
	v, err := list.Output()
	if err != nil {
		fail("the Litestream version in go.mod: %v", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		fail("no cache directory: %v", err)
	}
	dir := filepath.Join(cache, "nah-test", "litestream-"+strings.TrimSpace(string(v)))
	bin := filepath.Join(dir, "litestream")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	tmp := t.TempDir()
	build := exec.Command("go", "install", "github.com/benbjohnson/litestream/cmd/litestream@"+strings.TrimSpace(string(v)))
	build.Dir = tmp
	build.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	t.Logf("building the litestream command %s once (minutes)", strings.TrimSpace(string(v)))
	if out, err := build.CombinedOutput(); err != nil {
		fail("build the litestream command: %v\n%s", err, out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail("%v", err)
	}
	if err := os.Rename(filepath.Join(tmp, "litestream"), bin); err != nil {
		fail("%v", err)
	}
	return bin
}

// TestRestoreLitestreamCLI: Litestream's own `litestream restore` rebuilds
// a person's file and the directory from nah's replica, equal row by row.
func TestRestoreLitestreamCLI(t *testing.T) {
	cli := litestreamCLI(t)
	data, repl, out := t.TempDir(), filepath.Join(t.TempDir(), "replica"), t.TempDir()
	p := start(t, data, replicaEnv(repl)...)
	id, ann := p.signup(t, "ann")
	_, bob := p.signup(t, "bob")
	p.connect(t, ann, bob)
	for i := range 20 {
		p.post(t, ann, fmt.Sprint("moment ", i))
	}
	p.stop(t)
	for _, rel := range []string{"people/" + id + "/person.db", "directory.db"} {
		o := filepath.Join(out, strings.ReplaceAll(rel, "/", "-"))
		cmd := exec.Command(cli, "restore", "-o", o, "file://"+filepath.Join(repl, rel))
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("litestream restore %s: %v\n%s", rel, err, b)
		}
		live, got := testutil.Dump(t, filepath.Join(data, rel)), testutil.Dump(t, o)
		if len(live["moments"]) == 0 && rel != "directory.db" {
			t.Fatalf("%s: no moments live", rel)
		}
		for tb, rows := range live {
			if strings.Join(rows, "\n") != strings.Join(got[tb], "\n") {
				t.Errorf("%s: table %s differs: live %d rows, litestream restore %d\n%s", rel, tb, len(rows), len(got[tb]), firstDiff(rows, got[tb]))
			}
		}
		if len(got) != len(live) {
			t.Errorf("%s: %d tables restored, %d live", rel, len(got), len(live))
		}
	}
}

// TestRestoreFromSweep: a file whose Litestream history is gone from the
// target comes back from the newest sweep, the rest from history, and the
// whole restore still equals the data directory.
func TestRestoreFromSweep(t *testing.T) {
	data, repl, out := t.TempDir(), filepath.Join(t.TempDir(), "replica"), filepath.Join(t.TempDir(), "restored")
	p := start(t, data, replicaEnv(repl)...)
	id, ann := p.signup(t, "ann")
	_, bob := p.signup(t, "bob")
	p.connect(t, ann, bob)
	for i := range 5 {
		p.post(t, ann, fmt.Sprint("ann ", i))
		p.post(t, bob, fmt.Sprint("bob ", i))
	}
	photo := bytes.Repeat([]byte("a photo "), 4096)
	req, _ := http.NewRequest("POST", "http://"+p.addr+"/api/v1/media", bytes.NewReader(photo))
	req.Header.Set("Authorization", "Bearer "+ann)
	req.Header.Set("Content-Type", "image/jpeg")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload: %v %v", resp, err)
	}
	var media struct{ ID string }
	json.NewDecoder(resp.Body).Decode(&media)
	resp.Body.Close()
	p.stop(t)

	// The server's sweep, run once on the stopped data directory.
	ctx := context.Background()
	s, err := store.Open(ctx, store.Config{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	target, err := backup.ParseTarget(repl, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	// The media mirror sent the photo at the stop: the sweep copies none.
	sw := &backup.Sweeper{Target: target, Keep: 7, Source: s}
	res, err := sw.Run(ctx, time.Now())
	if err != nil || res.Files != 3 || len(res.Failed) > 0 || res.MediaCopied != 0 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(repl, "people", id, "person.db")); err != nil {
		t.Fatal(err)
	}
	summary := restoreInto(t, repl, out)
	if !strings.Contains(summary, "2 from Litestream history, 1 from sweeps ("+res.Stamp+": 1)") || !strings.Contains(summary, "Restored 1 media file") {
		t.Errorf("summary: %s", summary)
	}
	sameData(t, data, out)
	checkModes(t, out)
	if got, err := os.ReadFile(filepath.Join(out, "people", id, "media", media.ID)); err != nil || !bytes.Equal(got, photo) {
		t.Fatalf("the media file after the restore: %d bytes, %v; want %d", len(got), err, len(photo))
	}
}

// The evidence of issue 20 (backup/testdata/replica-corrupt/README.md): a
// person's replica whose Litestream history restores to a corrupt
// database; its newest transaction, 38, is of evidenceNewest.
const (
	evidenceID     = "imnketelg6ikmgbpvwmfgun5ty"
	evidenceNewest = "2026-12-02T02:01:59.408Z"
)

// plantCorruptHistory makes the history of rel on replica directory repl
// the evidence's corrupt one.
func plantCorruptHistory(t *testing.T, repl, rel string) {
	t.Helper()
	dst := filepath.Join(repl, filepath.FromSlash(rel))
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(sourceDir, "..", "..", "backup", "testdata", "replica-corrupt", "replica", evidenceID, "person.db")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	testutil.LTXTimes(t, dst)
}

// copyReplica copies a replica directory, so that each case plants its own
// fault.
func copyReplica(t *testing.T, repl string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "replica")
	if err := os.CopyFS(dst, os.DirFS(repl)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// sweepStamped runs the server's sweep once on the stopped data directory into
// replica repl, stamped made.
func sweepStamped(t *testing.T, data, repl string, made time.Time) {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, store.Config{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	target, err := backup.ParseTarget(repl, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	sw := &backup.Sweeper{Target: target, Keep: 7, Source: s}
	if res, err := sw.Run(ctx, made); err != nil || len(res.Failed) > 0 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
}

// TestRestoreCorruptHistory: ann's Litestream history restores to a corrupt
// database (the evidence of issue 20). Without a sweep, and with nothing
// of cat left on the replica, `nah restore` restores bob and the
// directory, names ann and cat as not restored, exits 1, and the server
// started on the result lists them as needing attention (503 to them,
// bob's feed goes on). With a sweep older than her
// history, ann comes back from it, the summary says so with the sweep's
// time and how far behind her history's newest position it is, and the
// restore exits 3; with cat lost as well, the loss decides: exit 1 and
// INCOMPLETE. A corrupt history of the directory, with no sweep,
// stops the restore with exit 1 and says why.
func TestRestoreCorruptHistory(t *testing.T) {
	data, repl := t.TempDir(), filepath.Join(t.TempDir(), "replica")
	p := start(t, data, replicaEnv(repl)...)
	annID, ann := p.signup(t, "ann")
	_, bob := p.signup(t, "bob")
	catID, cat := p.signup(t, "cat")
	p.connect(t, ann, bob)
	p.connect(t, bob, cat)
	for i := range 3 {
		p.post(t, ann, fmt.Sprint("ann ", i))
		p.post(t, bob, fmt.Sprint("bob ", i))
		p.post(t, cat, fmt.Sprint("cat ", i))
	}
	p.stop(t)
	annRel, catRel := nah.PersonRel(annID), nah.PersonRel(catID)

	t.Run("no sweep", func(t *testing.T) {
		r, out := copyReplica(t, repl), filepath.Join(t.TempDir(), "restored")
		plantCorruptHistory(t, r, annRel)
		if err := os.RemoveAll(filepath.Join(r, "people", catID)); err != nil { // nothing of cat on the replica
			t.Fatal(err)
		}
		o, e, code := nahRun(t, "restore", "-from", r, "-to", out)
		t.Logf("nah restore: exit %d\n%s%s", code, o, e)
		if code != 1 || !strings.Contains(o, "NOT RESTORED: 2 people could not be restored") || !strings.Contains(o, "  "+annRel+": the history does not restore to a sound database (integrity check:") ||
			!strings.Contains(o, "  "+catRel+": the replica holds no copy") || !strings.Contains(o, "INCOMPLETE: 2 of 3 people") || strings.Contains(o, "Every file passed") {
			t.Fatalf("the summary does not say ann and cat were not restored, or the exit is wrong")
		}
		if !strings.Contains(o, "Restored 2 files") || !strings.Contains(o, "2 from Litestream history") {
			t.Errorf("the directory and bob are not restored from history")
		}
		for _, rel := range databases(t, data) {
			if rel == annRel || rel == catRel {
				continue
			}
			live, got := testutil.Dump(t, filepath.Join(data, rel)), testutil.Dump(t, filepath.Join(out, rel))
			for tb, rows := range live {
				if strings.Join(rows, "\n") != strings.Join(got[tb], "\n") {
					t.Errorf("%s: table %s differs: live %d rows, restored %d", rel, tb, len(rows), len(got[tb]))
				}
			}
		}
		checkModes(t, out)

		p2 := start(t, out, "NAH_REPLICA_URL=off")
		defer p2.stop(t)
		if st, h, err := p2.call("GET", "/healthz", "", nil); err != nil || st != 200 || h["files_need_attention"] != 2.0 {
			t.Errorf("healthz of the restored server: %d %v %v, want ann's and cat's files needing attention", st, h, err)
		}
		st, res, err := p2.call("GET", "/api/v1/feed?limit=100", ann, nil)
		if code, _ := res["error"].(map[string]any)["code"].(string); err != nil || st != 503 || code != "storage_unavailable" {
			t.Errorf("ann's feed on the restored server: %d %v %v, want 503 storage_unavailable", st, res, err)
		}
		if got := p2.feedIDs(t, bob); len(got) != 3 {
			t.Errorf("bob's feed on the restored server: %d moments, want his own 3", len(got))
		}
		st, res, err = p2.call("POST", "/api/v1/moments", cat, map[string]string{"body": base64.StdEncoding.EncodeToString([]byte("hello?"))})
		if code, _ := res["error"].(map[string]any)["code"].(string); err != nil || st != 503 || code != "storage_unavailable" {
			t.Errorf("cat's post on the restored server: %d %v %v, want 503 storage_unavailable", st, res, err)
		}
	})

	t.Run("older sweep", func(t *testing.T) {
		r, out := copyReplica(t, repl), filepath.Join(t.TempDir(), "restored")
		newest, _ := time.Parse(time.RFC3339Nano, evidenceNewest)
		sweepStamped(t, data, r, newest.Add(-5*time.Hour-30*time.Minute))
		plantCorruptHistory(t, r, annRel)
		o, e, code := nahRun(t, "restore", "-from", r, "-to", out)
		t.Logf("nah restore: exit %d\n%s%s", code, o, e)
		want := annRel + ": from the sweep of 2026-12-01 20:31:59 UTC, 5 hours 30 minutes behind the history's newest position (transaction 38, 2026-12-02 02:01:59 UTC); the history: integrity check:"
		if code != 3 || !strings.Contains(o, "OLDER THAN THEIR HISTORY: 1 file") || !strings.Contains(o, want) || strings.Contains(o, "NOT RESTORED") {
			t.Fatalf("the summary does not state ann's fallback and its cost, or the exit is wrong; want a line\n%s", want)
		}
		sameData(t, data, out) // the sweep copied the stopped server: ann is whole here
		p2 := start(t, out, "NAH_REPLICA_URL=off")
		defer p2.stop(t)
		if st, h, err := p2.call("GET", "/healthz", "", nil); err != nil || st != 200 || h["files_need_attention"] != 0.0 {
			t.Errorf("healthz of the restored server: %d %v %v", st, h, err)
		}
		if got := p2.feedIDs(t, ann); len(got) != 6 {
			t.Errorf("ann's feed on the restored server: %d moments, want her and bob's 6", len(got))
		}
	})

	t.Run("older sweep and a loss", func(t *testing.T) {
		// ann falls back to the sweep, cat has no sound copy at all: the
		// loss decides the exit and the last line, not the fallback.
		r, out := copyReplica(t, repl), filepath.Join(t.TempDir(), "restored")
		newest, _ := time.Parse(time.RFC3339Nano, evidenceNewest)
		sweepStamped(t, data, r, newest.Add(-5*time.Hour-30*time.Minute))
		plantCorruptHistory(t, r, annRel)
		plantCorruptHistory(t, r, catRel)
		sweeps, _ := filepath.Glob(filepath.Join(r, "sweeps", "*", filepath.FromSlash(catRel)))
		if len(sweeps) != 1 {
			t.Fatalf("cat's sweep copies: %v", sweeps)
		}
		corruptPage(t, sweeps[0], 2)
		o, e, code := nahRun(t, "restore", "-from", r, "-to", out)
		t.Logf("nah restore: exit %d\n%s%s", code, o, e)
		if code != 1 || !strings.Contains(o, "OLDER THAN THEIR HISTORY: 1 file") || !strings.Contains(o, "NOT RESTORED: 1 person") ||
			!strings.Contains(o, "INCOMPLETE: 1 of 3 people") || strings.Contains(o, "Every file passed") {
			t.Fatalf("exit %d: the summary does not put cat's loss before ann's fallback", code)
		}
	})

	t.Run("directory", func(t *testing.T) {
		r, out := copyReplica(t, repl), filepath.Join(t.TempDir(), "restored")
		plantCorruptHistory(t, r, nah.DirectoryRel)
		o, e, code := nahRun(t, "restore", "-from", r, "-to", out)
		t.Logf("nah restore: exit %d\n%s%s", code, o, e)
		if code != 1 || !strings.Contains(e, "directory.db, the accounts of everyone, could not be restored") || strings.Contains(o, "Every file passed") {
			t.Errorf("a directory that does not restore: exit %d", code)
		}
	})
}
