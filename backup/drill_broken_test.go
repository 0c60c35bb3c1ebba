package backup_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
)

// TestDrillSurvivesBrokenLTX: bob's LTX files on the target cut short at
// every offset, then changed under running drills (cut, put back, removed,
// replaced by a FIFO, over and over). Every restore returns, every drill
// ends with bob's failure named and nobody else's, and once his files are
// back the drill passes: nothing panics or hangs the process.
func TestDrillSurvivesBrokenLTX(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tg, err := backup.ParseTarget(root, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(ctx); err != nil {
		t.Fatal(err)
	}
	n := openNode(t, t.TempDir(), tg, nodeOpts{maxOpen: 4, maxWatched: 4})
	ann, bob := n.person(t, "ann"), n.person(t, "bob")
	for i := range 6 {
		n.post(t, ann, i)
		n.post(t, bob, i)
	}
	settle(t, n)
	// Replication stopped before bob's files are listed, as nah restore
	// -check drills: its level-1 compaction (every 30 s), a sync or
	// retention would write a file of bob's the test never cut, and the
	// restores would read that one (seen under load, 2 runs of 5).
	n.close()
	s, err := store.Open(ctx, store.Config{Dir: n.dir, MaxOpenFiles: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	n = &node{dir: n.dir, s: s}
	bobRel := nah.PersonRel(bob)
	files := map[string][]byte{}
	filepath.WalkDir(filepath.Join(root, bobRel), func(p string, e fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".ltx") {
			files[p], err = os.ReadFile(p)
		}
		return err
	})
	if len(files) == 0 {
		t.Fatal("bob has no LTX file on the target")
	}
	putBack := func() {
		for p, b := range files {
			os.Remove(p)
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}

	out := filepath.Join(t.TempDir(), "bob.db")
	restores, failed := 0, 0
	for p, b := range files {
		for cut := range len(b) {
			if err := os.WriteFile(p, b[:cut], 0o600); err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := backup.RestoreFile(rctx, tg, bobRel, out, time.Time{})
			late := rctx.Err()
			cancel()
			if late != nil {
				t.Fatalf("%s cut at %d of %d: the restore did not return within 10 s", filepath.Base(p), cut, len(b))
			}
			restores++
			if err != nil {
				failed++
			}
			for _, s := range []string{"", "-wal", "-shm", ".tmp"} {
				os.Remove(out + s)
			}
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d LTX files of bob cut at every offset: %d restores, %d failed", len(files), restores, failed)
	if failed == 0 {
		t.Error("no cut LTX file failed its restore")
	}

	d := drillFor(n, tg)
	d.Repl, d.Recheck = nil, []time.Duration{50 * time.Millisecond}
	for p, b := range files {
		os.WriteFile(p, b[:len(b)/2], 0o600)
	}
	r, err := d.Once(ctx)
	if f := failuresByPerson(r); err != nil || len(r.Failures) != 1 || len(f["bob"]) != 1 {
		t.Errorf("the drill with bob's LTX files cut short: %v %s %+v", err, r.Summary(), r.Failures)
	} else {
		t.Logf("the drill with bob's LTX files cut short: %s", r.Failures[0].What)
	}
	putBack()

	// Changed under running drills.
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			for p, b := range files {
				os.Remove(p)
				switch i % 4 {
				case 0:
					os.WriteFile(p, b[:len(b)*(i%7)/7], 0o600)
				case 1:
					os.WriteFile(p, b, 0o600)
				case 2:
					os.Symlink(filepath.Join(filepath.Dir(fifo), strings.Repeat("./", 60)+"fifo"), p)
				}
			}
		}
	})
	for range 3 {
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		r, err := d.Once(dctx)
		cancel()
		if err != nil || r.Err != "" {
			t.Fatalf("a drill while bob's files change: %v %s", err, r.Err)
		}
		for _, f := range r.Failures {
			if !strings.HasPrefix(f.Who, "bob (") || f.What == "" {
				t.Errorf("a failure that is not bob's, or says nothing: %+v", f)
			}
		}
		t.Logf("a drill while bob's files change: %s", r.Summary())
	}
	close(stop)
	wg.Wait()
	putBack()
	r, err = d.Once(ctx)
	if err != nil || !r.Passed() {
		t.Fatalf("the drill once bob's files are back: %v %s %+v", err, r.Summary(), r.Failures)
	}
}
