package store

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestStats: the gauges the console and metrics read agree with the cache
// and the heads they describe.
func TestStats(t *testing.T) {
	s := MustOpen(t, Config{MaxOpenFiles: 20, HeadCacheBytes: 1 << 20})
	ctx := context.Background()
	ann := mustPerson(t, s, "ann")
	mustPerson(t, s, "bob")
	if _, err := s.CreateMoment(ctx, ann.ID, make([]byte, 400)); err != nil {
		t.Fatal(err)
	}
	p := NewPage()
	defer p.Release()
	if err := s.Feed(ctx, ann.ID, true, nil, 30, p); err != nil || len(p.Moments) != 1 {
		t.Fatalf("feed: %v, %d moments", err, len(p.Moments))
	}
	st := s.Stats()
	if st.OpenFiles != s.files.Len() || st.OpenFiles != 2 || st.MaxOpenFiles != 20 {
		t.Fatalf("open files %d of %d, want 2 of 20", st.OpenFiles, st.MaxOpenFiles)
	}
	if st.SQLiteConnections != st.OpenFiles+1+directoryReaders {
		t.Fatalf("%d SQLite connections with %d files open", st.SQLiteConnections, st.OpenFiles)
	}
	if st.HeadBytes != s.headBytes.Load() || st.HeadBytes < 400 || st.HeadBudget != 1<<20 {
		t.Fatalf("heads %d of %d", st.HeadBytes, st.HeadBudget)
	}
	if st.SQLiteBytes <= 0 || st.SQLitePeakBytes < st.SQLiteBytes {
		t.Fatalf("SQLite memory %d, peak %d", st.SQLiteBytes, st.SQLitePeakBytes)
	}
}

// TestFileCounts: the counts a post's cost is read from (the bench divides
// them by posts) agree with what the cache and replication saw: every open
// either still open or closed, every close seen by the close seam, every
// take-up a Watch of the replicator.
func TestFileCounts(t *testing.T) {
	var mu sync.Mutex
	var watches, closes int
	hooks := testHooks{
		Watch:      func(context.Context, string) error { mu.Lock(); watches++; mu.Unlock(); return nil },
		AfterClose: func(string) { mu.Lock(); closes++; mu.Unlock() },
		MaxWatched: 2,
	}
	s := MustOpen(t, hooks.config(Config{Dir: t.TempDir(), MaxOpenFiles: 3}))
	ctx := context.Background()
	var ids []string
	for _, h := range []string{"ann", "bob", "cat", "dan", "eve", "fay"} {
		ids = append(ids, mustPerson(t, s, h).ID)
	}
	for round := range 3 {
		for _, id := range ids {
			if _, err := s.CreateMoment(ctx, id, []byte{byte(round)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Closes and take-ups run off the posts' path: wait until they settle.
	var st Stats
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st = s.Stats()
		mu.Lock()
		settled := st.FileCloses == int64(closes) && st.TakeUps == int64(watches) && st.FileOpens-st.FileCloses == int64(st.OpenFiles)
		mu.Unlock()
		if settled || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if st.FileOpens-st.FileCloses != int64(st.OpenFiles) || st.FileCloses != int64(closes) || st.TakeUps != int64(watches) {
		t.Fatalf("opens %d, closes %d (seam saw %d), open now %d, take-ups %d (replicator saw %d)",
			st.FileOpens, st.FileCloses, closes, st.OpenFiles, st.TakeUps, watches)
	}
	// Six people through three handles, three rounds: files churned.
	if st.FileOpens < 18 || st.TakeUps < 3 {
		t.Fatalf("opens %d, take-ups %d: six people through three handles should churn", st.FileOpens, st.TakeUps)
	}
}
