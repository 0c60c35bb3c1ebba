package main

import (
	"database/sql"
	bin "encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// TestRestoreSweepChecks: the restore's guards around sweeps and its
// target folder. Ann's history is gone from the replica, so she comes
// back from a sweep: never from a newer sweep that was cut short (no
// manifest.json) while a complete one exists, never from a copy that fails
// SQLite's integrity check or carries a trigger, not our schema (the
// restore fails and names her file), nor the directory with a trigger; and a
// -to folder holding only lost+found (a fresh filesystem's root) is
// refused like any other non-empty folder, with nothing written.
func TestRestoreSweepChecks(t *testing.T) {
	data, repl := t.TempDir(), filepath.Join(t.TempDir(), "replica")
	p := start(t, data, replicaEnv(repl)...)
	annID, ann := p.signup(t, "ann")
	for i := range 3 {
		p.post(t, ann, fmt.Sprint("ann ", i))
	}
	p.stop(t)
	now := time.Now().UTC().Truncate(time.Second)
	sweepStamped(t, data, repl, now.Add(-2*time.Hour))
	complete := now.Add(-2 * time.Hour).Format("20060102T150405Z")

	p = start(t, data, replicaEnv(repl)...)
	p.post(t, ann, "ann 3")
	p.stop(t)
	sweepStamped(t, data, repl, now.Add(-time.Hour))
	cut := now.Add(-time.Hour).Format("20060102T150405Z")
	if err := os.Remove(filepath.Join(repl, "sweeps", cut, "manifest.json")); err != nil {
		t.Fatal(err)
	}
	annRel := nah.PersonRel(annID)
	noHistory := func(t *testing.T, r string) {
		t.Helper()
		if err := os.RemoveAll(filepath.Join(r, filepath.FromSlash(annRel))); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("cut-short sweep", func(t *testing.T) {
		r, out := copyReplica(t, repl), filepath.Join(t.TempDir(), "restored")
		noHistory(t, r)
		summary := restoreInto(t, r, out)
		if !strings.Contains(summary, "1 from sweeps ("+complete+": 1)") {
			t.Fatalf("ann is not restored from the complete sweep %s (the cut-short one is %s): %s", complete, cut, summary)
		}
		p2 := start(t, out, "NAH_REPLICA_URL=off")
		defer p2.stop(t)
		if got := p2.feedIDs(t, ann); len(got) != 3 {
			t.Errorf("ann's feed after the restore: %d moments, want the complete sweep's 3", len(got))
		}
	})

	t.Run("corrupt sweep copy", func(t *testing.T) {
		r, out := copyReplica(t, repl), filepath.Join(t.TempDir(), "restored")
		noHistory(t, r)
		if err := os.RemoveAll(filepath.Join(r, "sweeps", cut)); err != nil {
			t.Fatal(err)
		}
		corruptPage(t, filepath.Join(r, "sweeps", complete, filepath.FromSlash(annRel)), 2)
		o, e, code := nahRun(t, "restore", "-from", r, "-to", out)
		t.Logf("nah restore: exit %d\n%s%s", code, o, e)
		if code == 0 || !strings.Contains(o+e, annRel) || !strings.Contains(o+e, "integrity check") || !strings.Contains(o, "NOT RESTORED") {
			t.Fatalf("a sweep copy with a corrupt page restored without naming %s as failing its integrity check", annRel)
		}
	})

	t.Run("sweep copy with a trigger", func(t *testing.T) {
		r, out := copyReplica(t, repl), filepath.Join(t.TempDir(), "restored")
		noHistory(t, r)
		if err := os.RemoveAll(filepath.Join(r, "sweeps", cut)); err != nil {
			t.Fatal(err)
		}
		// Whoever can write the bucket could leave a trigger that runs on
		// the server's own inserts into the restored file.
		db, err := sql.Open("sqlite", filepath.Join(r, "sweeps", complete, filepath.FromSlash(annRel)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = db.Exec(`CREATE TRIGGER planted AFTER INSERT ON moments BEGIN DELETE FROM moments; END`)
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		o, e, code := nahRun(t, "restore", "-from", r, "-to", out)
		t.Logf("nah restore: exit %d\n%s%s", code, o, e)
		if code == 0 || !strings.Contains(o+e, annRel) || !strings.Contains(o+e, "schema") || !strings.Contains(o, "NOT RESTORED") {
			t.Fatalf("a sweep copy carrying a trigger restored without naming %s as not this server's schema", annRel)
		}
	})

	t.Run("directory with a trigger", func(t *testing.T) {
		r, out := copyReplica(t, repl), filepath.Join(t.TempDir(), "restored")
		if err := os.RemoveAll(filepath.Join(r, nah.DirectoryRel)); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(r, "sweeps", cut)); err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("sqlite", filepath.Join(r, "sweeps", complete, nah.DirectoryRel))
		if err != nil {
			t.Fatal(err)
		}
		_, err = db.Exec(`CREATE TRIGGER planted AFTER INSERT ON sessions BEGIN DELETE FROM sessions; END`)
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		o, e, code := nahRun(t, "restore", "-from", r, "-to", out)
		t.Logf("nah restore: exit %d\n%s%s", code, o, e)
		if code == 0 || !strings.Contains(o+e, nah.DirectoryRel) || !strings.Contains(o+e, "schema is not this server's") {
			t.Fatalf("a directory carrying a trigger restored without naming %s as not this server's schema", nah.DirectoryRel)
		}
	})

	t.Run("lost+found", func(t *testing.T) {
		out := t.TempDir()
		if err := os.Mkdir(filepath.Join(out, "lost+found"), 0o700); err != nil {
			t.Fatal(err)
		}
		o, e, code := nahRun(t, "restore", "-from", repl, "-to", out)
		if code != 2 || !strings.Contains(e, "is not empty") {
			t.Errorf("restore into a folder holding lost+found: exit %d\n%s%s", code, o, e)
		}
		if es, _ := os.ReadDir(out); len(es) != 1 {
			t.Errorf("the refused restore wrote into the folder: %d entries", len(es))
		}
	})
}

// corruptPage overwrites page n (from 1) of the SQLite file at p with a
// pattern that is no valid b-tree page, leaving the header whole.
func corruptPage(t *testing.T, p string, n int64) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var hdr [18]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		t.Fatal(err)
	}
	size := int64(bin.BigEndian.Uint16(hdr[16:]))
	if size == 1 {
		size = 65536
	}
	page := []byte(strings.Repeat("\x0d\xff\xfe\x00", int(size)/4))
	if _, err := f.WriteAt(page, (n-1)*size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
