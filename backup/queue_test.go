package backup_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
)

// TestWatchedWritesGoThroughTheQueue: a watched file's posts reach the
// replica through the store's one queue of files the replica lacks: in
// about a second, a sync a second at most for a steady poster (not one a
// post), and the queue's since is the lag health reports. A sync that
// fails with the target away keeps the write queued with its first time,
// and the catch-up brings it to the replica once the target is back.
func TestWatchedWritesGoThroughTheQueue(t *testing.T) {
	ctx := context.Background()
	dir, repl := t.TempDir(), filepath.Join(t.TempDir(), "replica")
	tg, err := backup.ParseTarget(repl, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(ctx); err != nil {
		t.Fatal(err)
	}
	n := openNode(t, dir, tg, nodeOpts{run: true, queue: true})
	ann := n.person(t, "ann")
	rel := nah.PersonRel(ann)
	n.post(t, ann, 0)
	if err := n.s.WatchNow(ctx, rel); err != nil {
		t.Fatal(err)
	}
	inStep := func() bool {
		f, ok := n.r.StatusOf(rel)
		_, queued := n.s.ReplicationSince(rel)
		return ok && f.Watched && !queued && f.Err == "" && f.TXID > 0 && f.Replicated >= f.TXID
	}
	if !eventually(10*time.Second, inStep) {
		t.Fatal("ann's file was never watched and in step")
	}

	// A steady poster: 20 posts in 2 s.
	l0 := func() int {
		es, _ := os.ReadDir(filepath.Join(repl, filepath.FromSlash(rel), "ltx", "0"))
		return len(es)
	}
	before := l0()
	var worst time.Duration
	for i := 1; i <= 20; i++ {
		time.Sleep(100 * time.Millisecond)
		n.post(t, ann, i)
		worst = max(worst, n.b.Health().Lag)
	}
	last := time.Now()
	// On the replica: a restore holds every post.
	want := moments(t, n.s.Path(rel))
	tmp := t.TempDir()
	tries := 0
	onReplica := func() bool {
		tries++
		p := filepath.Join(tmp, fmt.Sprintf("%d.db", tries))
		_, err := backup.RestoreFile(ctx, tg, rel, p, time.Time{})
		return err == nil && moments(t, p) == want
	}
	if !eventually(10*time.Second, onReplica) {
		t.Fatalf("ann's %d posts never all reached the replica: %+v", want, n.b.Status())
	}
	took := time.Since(last)
	syncs := l0() - before
	t.Logf("20 posts in 2 s: %d syncs, on the replica %v after the last, worst lag %v", syncs, took, worst)
	if took > 2500*time.Millisecond {
		t.Errorf("the last post reached the replica %v after it, want about a second", took)
	}
	if syncs > 6 {
		t.Errorf("%d syncs for 20 posts in 2 s, want about one a second", syncs)
	}
	if worst == 0 || worst > 2500*time.Millisecond {
		t.Errorf("health's lag was at most %v while ann posted, want the queue's, about a second", worst)
	}

	// The target away: the write's sync fails, and it waits in the queue
	// with the time of the post.
	away := repl + ".away"
	if err := os.Rename(repl, away); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(repl, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	posted := time.Now()
	n.post(t, ann, 100)
	acked := time.Now()
	if !eventually(10*time.Second, func() bool { return n.r.TargetErr() != nil }) {
		t.Fatal("the sync with the target away never failed")
	}
	time.Sleep(2 * time.Second) // tried again, failing at once
	since, queued := n.s.ReplicationSince(rel)
	if !queued || since.Before(posted) || since.After(acked) {
		t.Fatalf("after failed syncs ann waits since %v (queued %v), want the post's time, %v", since, queued, posted)
	}
	behind := 0 // ann, and the directory if its flush came after the target left
	for _, f := range n.b.Status() {
		if f.Behind() {
			behind++
		}
	}
	if h := n.b.Health(); h.Lag < 2*time.Second || h.Behind != behind || h.Queued != 1 {
		t.Errorf("health with the post not shipped: lag %v, %d behind, %d queued; want ≥ 2 s, %d behind (ann once), ann queued", h.Lag, h.Behind, h.Queued, behind)
	}
	if err := os.Remove(repl); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(away, repl); err != nil {
		t.Fatal(err)
	}
	if !eventually(15*time.Second, inStep) {
		t.Fatalf("ann's file did not catch up once the target was back: %+v", n.b.Status())
	}
	restoreAll(t, n, tg, []string{rel})
}
