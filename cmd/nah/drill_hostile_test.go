package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/superfly/ltx"

	"github.com/nah-app/nah"
)

// TestDrillHostileReplica: a backup target that plants what a directory
// can hold. First a FIFO as a person's newest LTX snapshot (reached
// through a symlink, which Litestream's listing sizes as its own path), a
// FIFO as a sweep's copy and /dev/zero as another: each open would block
// for ever or read without end. Then a newer sweep whose manifest is 60 MB
// of empty strings. Each drill ends with its failures named, the console
// answers at once, the server's peak resident memory stays where it was,
// and the server stays up (before: the manifest took a drill from 28 to
// 1,236 MB and its POST 54 s; a FIFO hung the drill for ever).
func TestDrillHostileReplica(t *testing.T) {
	data := t.TempDir()
	repl := filepath.Join(t.TempDir(), "replica")
	consoleAdmin(t, data)
	// Nightly copies on (not due during the test): the Backups page reads
	// every sweep's manifest too.
	p := start(t, data, replicaEnv(repl, "NAH_DRILL_EVERY=off", "NAH_SWEEP_EVERY=24h")...)
	ids := map[string]string{}
	for _, h := range []string{"ann", "bob", "cat"} {
		id, token := p.signup(t, h)
		ids[h] = id
		p.post(t, token, "a moment of "+h)
	}
	c := consoleSignIn(t, p)
	drill := func(want ...string) string {
		t.Helper()
		t0 := time.Now()
		res, err := c.PostForm("http://"+p.addr+"/console/backups/drill", nil)
		if err != nil {
			t.Fatalf("drill: %v", err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		answered := time.Since(t0)
		for time.Since(t0) < 60*time.Second {
			page := consolePage(t, c, p, "/console/backups")
			if !strings.Contains(page, "Another is running now") && !strings.Contains(page, "The first restore drill is running") && strings.Contains(page, "Last drill") {
				t.Logf("the drill's POST answered in %s, the drill ended within %s", answered.Round(time.Millisecond), time.Since(t0).Round(100*time.Millisecond))
				if answered > 5*time.Second {
					t.Errorf("the drill's POST took %s", answered)
				}
				for _, w := range want {
					if !strings.Contains(page, w) {
						t.Errorf("the Backups page does not say %q", w)
					}
				}
				return page
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("the drill did not end within 60 s\n%s", p.log())
		return ""
	}
	drill("3 of 3 people restored and equal")
	alive := func() {
		t.Helper()
		if st, h, err := p.call("GET", "/healthz", "", nil); err != nil || st != 200 || h["restore_drill"] != "failed" {
			t.Fatalf("healthz after the drill: %d %v %v", st, h, err)
		}
	}

	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Litestream sizes an LTX file by Lstat: a symlink's size is its
	// target's path, which must be a header's length at least.
	long := filepath.Join(filepath.Dir(fifo), strings.Repeat("x", ltx.HeaderSize))
	if err := os.Symlink(fifo, long); err != nil {
		t.Fatal(err)
	}
	snapshots := filepath.Join(repl, nah.PersonRel(ids["bob"]), "ltx", "9")
	os.MkdirAll(snapshots, 0o700)
	if err := os.Symlink(long, filepath.Join(snapshots, ltx.FormatFilename(1, 1<<40))); err != nil {
		t.Fatal(err)
	}
	sweep := func(stamp string, manifest []byte, copies map[string]string) {
		t.Helper()
		dir := filepath.Join(repl, "sweeps", stamp)
		os.MkdirAll(dir, 0o700)
		for rel, target := range copies {
			os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o700)
			if err := os.Symlink(target, filepath.Join(dir, rel)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "manifest.json"), manifest, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	annRel, catRel := nah.PersonRel(ids["ann"]), nah.PersonRel(ids["cat"])
	m, _ := json.Marshal(map[string]any{"files": []string{annRel, catRel},
		"sums": map[string]any{annRel: map[string]any{"size": 4096, "sha256": strings.Repeat("0", 64)}, catRel: map[string]any{"size": 4096, "sha256": strings.Repeat("0", 64)}}})
	sweep("20260101T000000Z", m, map[string]string{annRel: fifo, catRel: "/dev/zero"})
	page := drill("bob (people/"+ids["bob"]+"/person.db)", "is a named pipe, not a regular file", "is a device, not a regular file")
	alive()
	if testing.Verbose() {
		t.Log(page[strings.Index(page, "Last drill"):][:3000])
	}
	os.RemoveAll(snapshots)

	base := vmHWM(p.cmd.Process.Pid)
	var empties bytes.Buffer
	empties.WriteString(`{"files":[""`)
	for empties.Len() < 60<<20 {
		empties.WriteString(`,""`)
	}
	empties.WriteString(`]}`)
	sweep("20260102T000000Z", empties.Bytes(), nil)
	size := empties.Len()
	empties = bytes.Buffer{}
	drill(fmt.Sprintf("manifest.json is %d bytes, more than a manifest of 4 databases takes", size))
	peak := vmHWM(p.cmd.Process.Pid)
	t.Logf("VmHWM %d MB before the drill of a 60 MB manifest, %d MB after", base>>20, peak>>20)
	if peak > base+32<<20 {
		t.Errorf("VmHWM %d MB, %d MB before: the manifest was read", peak>>20, base>>20)
	}
	alive()
}

// consolePage is the console page at path, read by the signed-in client c.
func consolePage(t *testing.T, c *http.Client, p *proc, path string) string {
	t.Helper()
	res, err := c.Get("http://" + p.addr + path)
	if err != nil {
		t.Fatalf("%s: %v (the server is gone?)\n%s", path, err, p.log())
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode != 200 {
		t.Fatalf("%s: %d", path, res.StatusCode)
	}
	return string(b)
}
