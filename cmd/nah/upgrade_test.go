package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
// refuses the migrated files instead of serving or changing them.
func TestUpgradeKeepsData(t *testing.T) {
	old := previousBinary(t)
	dir := filepath.Join(t.TempDir(), "data")
	replica := dir + ".replica"

	p := startCmd(t, exec.Command(old, "serve"), dir)
	f := fill(t, p)
	p.stop(t)

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
	p = start(t, dir)
	f.check(t, p)
	p.stop(t)
}
