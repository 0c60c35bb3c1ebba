package store

import (
	"context"
	"testing"
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
