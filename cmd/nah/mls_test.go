package main

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nah-app/nah/store"
)

// phones runs app/testdata/mls/family.mjs: the MLS clients (ts-mls, pinned
// there; `make mlsjs` installs it) of a family, step by step.
type phones struct {
	stdin io.Writer
	lines chan map[string]any
}

func startPhones(t *testing.T) *phones {
	t.Helper()
	dir := filepath.Join(sourceDir, "..", "..", "app", "testdata", "mls")
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "ts-mls", "package.json"))
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("ts-mls is not installed (make mlsjs): %v", err)
		}
		t.Skipf("ts-mls is not installed (make mlsjs); skipping: %v", err)
	}
	cmd := exec.Command(node, "family.mjs")
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ph := &phones{stdin: in, lines: make(chan map[string]any, 1000)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				m = map[string]any{"error": "not JSON: " + sc.Text()}
			}
			ph.lines <- m
		}
		close(ph.lines)
	}()
	return ph
}

// send asks for a step; base, when set, is the server's new address.
func (ph *phones) send(t *testing.T, step string, p *proc) {
	t.Helper()
	req := map[string]string{"step": step}
	if p != nil {
		req["base"] = "http://" + p.addr
	}
	b, _ := json.Marshal(req)
	if _, err := ph.stdin.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
}

// next is the phones' next line.
func (ph *phones) next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case m, ok := <-ph.lines:
		if !ok {
			t.Fatal("the phones' script exited")
		}
		return m
	case <-time.After(2 * time.Minute):
		t.Fatal("the phones did not answer in 2 minutes")
	}
	return nil
}

// step runs one step and fails the test on its error.
func (ph *phones) step(t *testing.T, step string, p *proc) map[string]any {
	t.Helper()
	ph.send(t, step, p)
	m := ph.next(t)
	if m["error"] != nil || m["step"] != step {
		t.Fatalf("%s: %v", step, m["error"])
	}
	t.Logf("%s in %v ms: %v", step, m["ms"], m)
	return m
}

func stop(t *testing.T, p *proc) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-p.done; err != nil {
		t.Fatalf("server exit: %v\n%s", err, p.log())
	}
}

// TestMLSFamily is issue 38's scenario with a real MLS client no one here
// wrote (ts-mls): 8 people, 2 clients each, connected unevenly, against
// the binary on a data directory it restarts, kills and edits offline.
func TestMLSFamily(t *testing.T) {
	ph := startPhones(t)
	dir := t.TempDir()
	p := start(t, dir)
	ph.step(t, "setup", p)
	if a := ph.step(t, "audit", nil); len(a["failures"].([]any)) != 0 {
		t.Fatalf("the key logs fail their audit before any plant: %v", a["failures"])
	}
	stop(t, p)
	p = start(t, dir)
	ph.step(t, "check", p)
	ph.step(t, "disconnect", nil)
	ph.step(t, "race", nil)
	ph.step(t, "offline", nil)
	ph.step(t, "newclient", nil)
	ph.step(t, "post", nil)
	ph.step(t, "check", nil)

	// kill -9 in the middle of a burst of posts and commits, right after a
	// commit's acknowledgement: every acknowledged moment is there after
	// the restart, every phone reads it, and the next posts at the phones'
	// epochs show no acknowledged commit was lost.
	ph.send(t, "burst", nil)
	for acks := 0; ; acks++ {
		m := ph.next(t)
		if m["event"] != "acked" {
			t.Fatalf("burst: %v", m)
		}
		if acks >= 10 && m["commit"] == true {
			break
		}
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	m := ph.next(t)
	for m["event"] == "acked" {
		m = ph.next(t)
	}
	if m["error"] != nil || m["step"] != "burst" {
		t.Fatalf("burst: %v", m)
	}
	t.Logf("burst: %v moments and %v commits acknowledged before kill -9, %v requests failed after it", m["acked"], m["commits"], m["failed"])
	p = start(t, dir)
	ph.step(t, "acked", p)
	ph.step(t, "post", nil)
	ph.step(t, "check", nil)
	fig := ph.step(t, "figures", nil)

	// A key planted in fam5's file behind the API, as someone with the
	// disk would: a client row and its key log entry, chained right. And
	// fam6's tablet away while fam6's log ages past the retention (its
	// commits' times moved back with the server stopped).
	ids := map[string]string{}
	for _, x := range ph.step(t, "people", nil)["people"].([]any) {
		ids[x.(map[string]any)["handle"].(string)] = x.(map[string]any)["id"].(string)
	}
	fam5 := ids["fam5"]
	ph.step(t, "away", nil)
	stop(t, p)
	plantKey(t, filepath.Join(dir, "people", fam5, "person.db"), fam5)
	ageLog(t, filepath.Join(dir, "people", ids["fam6"], "person.db"), store.MLSCommitMaxAge+time.Hour)
	p = start(t, dir)
	a := ph.step(t, "audit", p)
	failures := a["failures"].([]any)
	own := 0
	for _, f := range failures {
		if !strings.Contains(f.(string), "key log of fam5 ("+fam5+")") {
			t.Errorf("an audit failure names someone else: %v", f)
		}
		if strings.HasPrefix(f.(string), "fam5/") {
			own++
		}
	}
	if own != 2 {
		t.Errorf("%d of fam5's 2 phones saw the planted key; failures: %v", own, failures)
	}
	t.Logf("the planted key fails %d audits, all naming fam5", len(failures))
	ph.step(t, "rejoin", nil)

	refusals := fig["refusals"].(map[string]any)
	if fig["clients"] != 17.0 || fig["groups"] != 8.0 || refusals["removal_pending"] != 2.0 || refusals["epoch_conflict"] != 1.0 || refusals["log_pruned"] != nil {
		t.Errorf("figures: %v", fig)
	}
	t.Logf("MLS family: %v clients, %v groups, %v epochs, %v commits, %v moments, %v decrypted, refusals %v",
		fig["clients"], fig["groups"], fig["epochs"], fig["commits"], fig["moments"], fig["decrypted"], refusals)
}

// ageLog moves the times of the commits in a person's file back by d,
// with the server stopped, as if they had been made d earlier.
func ageLog(t *testing.T, file string, d time.Duration) {
	t.Helper()
	db, err := sql.Open("sqlite", file)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE mls_commits SET created_at = created_at - ?`, d.Milliseconds()); err != nil {
		t.Fatal(err)
	}
}

// plantKey adds a client to a person's file with the server stopped, and
// its client_added entry at the end of the key log, hashed as the chain
// wants: the server then signs the longer log as its own.
func plantKey(t *testing.T, file, person string) {
	t.Helper()
	db, err := sql.Open("sqlite", file)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := make([]byte, 32)
	rand.Read(key)
	id := fmt.Sprintf("c_%s_%x", person, key[:8])
	at := time.Now().UnixMilli()
	var pos int64
	var prev []byte
	if err := db.QueryRow(`SELECT pos, hash FROM mls_key_log ORDER BY pos DESC LIMIT 1`).Scan(&pos, &prev); err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	h.Write(prev)
	h.Write(store.KeyLogEntryBytes(store.KeyLogClientAdded, id, key, at))
	if _, err := db.Exec(`INSERT INTO mls_clients(id, signature_key, name, created_at) VALUES (?, ?, 'planted', ?)`, id, key, at); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO mls_key_log(pos, kind, client, signature_key, at, hash) VALUES (?, ?, ?, ?, ?, ?)`,
		pos+1, store.KeyLogClientAdded, id, key, at, h.Sum(nil)); err != nil {
		t.Fatal(err)
	}
}
