package backup_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
)

// TestTargetWipedWhileRunning: the replica directory is emptied while the
// server runs and the target stays reachable (an operator clearing it, a
// new empty bucket at the same URL). 36 people, 8 of them watched, the
// rest shipped, written by uneven writers throughout. Within a bound every
// file is back on the target from a snapshot and restores equal to the
// live data, the failure shows in health while it lasts and clears, and
// nothing is restarted.
func TestTargetWipedWhileRunning(t *testing.T) {
	replica := t.TempDir()
	tg, err := backup.ParseTarget(replica, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := openNode(t, t.TempDir(), tg, nodeOpts{maxOpen: 64, maxWatched: 8, run: true})
	var ids []string
	for i := range 36 {
		ids = append(ids, n.person(t, fmt.Sprintf("wiped%02d", i)))
	}
	for i, id := range ids {
		n.post(t, id, i)
	}
	for _, id := range ids[:8] {
		if err := n.s.Rewatch(context.Background(), nah.PersonRel(id)); err != nil {
			t.Fatal(err)
		}
	}
	// Uneven writers: half the posts go to four people.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 100; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(5+r.IntN(20)) * time.Millisecond):
				}
				id := ids[r.IntN(len(ids))]
				if r.IntN(2) == 0 {
					id = ids[r.IntN(4)*9]
				}
				n.post(t, id, i)
			}
		})
	}
	time.Sleep(2 * time.Second)

	// At once, as a new empty bucket at the same URL is: a wipe slower
	// than a catch-up round may delete what the round wrote after it
	// found the file whole (the mark, written last, narrows that).
	es, err := os.ReadDir(replica)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(replica, replica+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(replica, 0o700); err != nil {
		t.Fatal(err)
	}
	wiped := time.Now()
	t.Logf("emptied the replica (%d entries at its root)", len(es))

	// Health from the wipe on: the failure shows while it lasts.
	var mu sync.Mutex
	var failed []string
	sample := make(chan struct{})
	var sw sync.WaitGroup
	sw.Go(func() {
		for {
			select {
			case <-sample:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if h := n.b.Health(); !h.Ok {
				mu.Lock()
				failed = append(failed, h.LastErr)
				mu.Unlock()
			}
		}
	})
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	// Bound: a catch-up round (1 s here, 30 s by default) finds the mark
	// gone, and takes up eight files a round.
	var h backup.Health
	if !eventually(20*time.Second, func() bool { h = n.b.Health(); return h.Ok && h.Behind == 0 }) {
		for _, f := range n.r.Status() {
			t.Logf("%+v", f)
		}
		t.Fatalf("not in step %v after the wipe: %+v", time.Since(wiped).Round(100*time.Millisecond), h)
	}
	close(sample)
	sw.Wait()
	t.Logf("in step again %v after the wipe; health failed %d times while sampled, first %q", time.Since(wiped).Round(100*time.Millisecond), len(failed), first(failed))
	if len(failed) == 0 {
		t.Errorf("health never said the target was emptied")
	}

	settle(t, n)
	rels := []string{nah.DirectoryRel}
	for _, id := range ids {
		rels = append(rels, nah.PersonRel(id))
	}
	bad := 0
	for i, rel := range rels {
		p := filepath.Join(t.TempDir(), fmt.Sprintf("%03d.db", i))
		if _, err := backup.RestoreFile(context.Background(), tg, rel, p, time.Time{}); err != nil {
			bad++
			names, _ := filepath.Glob(filepath.Join(replica, filepath.FromSlash(rel), "ltx", "*", "*.ltx"))
			for i := range names {
				names[i], _ = filepath.Rel(replica, names[i])
			}
			t.Errorf("restore %s: %v; the target holds %v", rel, err, names)
			continue
		}
		sameRows(t, n.s.Path(rel), p)
	}
	if bad > 0 {
		t.Errorf("%d of %d files do not restore after the wipe", bad, len(rels))
	}
}

func first(a []string) string {
	if len(a) == 0 {
		return ""
	}
	return a[0]
}
