package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// lockedBuffer is a log sink that tests read while the store writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// count returns how many log lines hold every one of words.
func (l *lockedBuffer) count(words ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for line := range strings.Lines(l.b.String()) {
		if !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(line, w) }) {
			n++
		}
	}
	return n
}

// feedIDs reads the whole feed (or one person's moments) of id with pages of
// limit, checking that every page but the last is full, and returns the
// moment ids newest first.
func feedIDs(t *testing.T, s *Store, id string, circle bool, limit int) ([]string, error) {
	t.Helper()
	var ids []string
	var before *nah.Cursor
	for range 1000 {
		p := NewPage()
		if err := s.Feed(context.Background(), id, circle, before, limit, p); err != nil {
			p.Release()
			return ids, err
		}
		for _, m := range p.Moments {
			ids = append(ids, m.ID)
		}
		if p.Next == nil {
			p.Release()
			return ids, nil
		}
		if len(p.Moments) != limit {
			t.Fatalf("a page that is not the last holds %d moments, want %d", len(p.Moments), limit)
		}
		c := *p.Next
		before = &c
		p.Release()
	}
	t.Fatal("paging does not end")
	return nil, nil
}

// wantStorageUnavailable fails unless err is the owner's answer for a file
// that cannot be read: 503 storage_unavailable, with a Retry-After.
func wantStorageUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	var ne *nah.Error
	if !errors.As(err, &ne) || ne.Code != nah.Unavailable || ne.Reason != "storage_unavailable" || ne.RetryAfter <= 0 {
		t.Errorf("%s: %v, want Unavailable storage_unavailable with RetryAfter", what, err)
	}
}

func TestUnreadableFileIsSkipped(t *testing.T) {
	for _, heads := range []int64{-1, 0} {
		t.Run(fmt.Sprintf("heads %d", heads), func(t *testing.T) { testUnreadableFileIsSkipped(t, heads) })
	}
}

// testUnreadableFileIsSkipped: ann's file is overwritten while closed. Her
// connections' feeds go on without her, page after page; she gets
// storage_unavailable; the file is logged once per interval and listed;
// putting the good file back heals it.
func testUnreadableFileIsSkipped(t *testing.T, heads int64) {
	ctx := context.Background()
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	var clockMu sync.Mutex
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	advance := func(d time.Duration) { clockMu.Lock(); now = now.Add(d); clockMu.Unlock() }
	var logs lockedBuffer
	s := MustOpen(t, Config{Now: clock, HeadCacheBytes: heads, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ann, bob, cat := mustPerson(t, s, "ann"), mustPerson(t, s, "bob"), mustPerson(t, s, "cat")
	if err := s.ImportConnections(ctx, [][2]string{{ann.ID, bob.ID}, {bob.ID, cat.ID}, {ann.ID, cat.ID}}, 1); err != nil {
		t.Fatal(err)
	}
	var others []string // bob's and cat's, newest first
	for i := range 20 {
		for _, p := range []nah.Person{ann, bob, cat} {
			m, err := s.CreateMoment(ctx, p.ID, fmt.Appendf(nil, "%s %d", p.Handle, i))
			if err != nil {
				t.Fatal(err)
			}
			if p.ID != ann.ID {
				others = append([]string{m.ID}, others...)
			}
			advance(time.Millisecond)
		}
	}
	// Warm the heads (when on) with everyone's feeds.
	for _, p := range []nah.Person{ann, bob, cat} {
		if _, err := feedIDs(t, s, p.ID, true, 30); err != nil {
			t.Fatal(err)
		}
	}

	s.files.Forget(ann.ID)
	path, _ := s.personPath(ann.ID)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := make([]byte, len(good))
	rand.Read(bad)
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	advance(31 * time.Second) // heads and newest times are re-checked

	for _, limit := range []int{1, 3, 7, 30, 100} {
		for _, reader := range []nah.Person{bob, cat} {
			got, err := feedIDs(t, s, reader.ID, true, limit)
			if err != nil {
				t.Fatalf("%s's feed, limit %d: %v", reader.Handle, limit, err)
			}
			if !slices.Equal(got, others) {
				t.Fatalf("%s's feed, limit %d: %d moments %v, want bob's and cat's %d %v", reader.Handle, limit, len(got), got, len(others), others)
			}
		}
	}
	_, err = feedIDs(t, s, ann.ID, true, 30)
	wantStorageUnavailable(t, "ann's feed", err)
	_, err = feedIDs(t, s, ann.ID, false, 30)
	wantStorageUnavailable(t, "ann's moments", err)
	_, err = s.CreateMoment(ctx, ann.ID, []byte("hi"))
	wantStorageUnavailable(t, "ann's post", err)
	_, err = s.MomentCount(ctx, ann.ID)
	wantStorageUnavailable(t, "ann's moment count", err)

	if n := logs.count("person file cannot be read", ann.ID); n != 1 {
		t.Errorf("ann's file was logged %d times, want once per interval", n)
	}
	advance(unreadableLogEvery)
	if _, err := feedIDs(t, s, bob.ID, true, 30); err != nil {
		t.Fatal(err)
	}
	if n := logs.count("person file cannot be read", ann.ID); n != 2 {
		t.Errorf("after an interval ann's file was logged %d times in all, want 2", n)
	}
	ps := s.FileProblems()
	if len(ps) != 1 || ps[0].PersonID != ann.ID || ps[0].Problem == "" || s.Stats().UnreadableFiles != 1 {
		t.Errorf("file problems %+v, stats %d, want ann's alone", ps, s.Stats().UnreadableFiles)
	}

	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := s.CreateMoment(ctx, ann.ID, []byte("back"))
	if err != nil {
		t.Fatalf("ann posts after the repair: %v", err)
	}
	got, err := feedIDs(t, s, bob.ID, true, 30)
	if err != nil || len(got) != 61 || got[0] != m.ID {
		t.Fatalf("bob's feed after the repair: %d moments, %v", len(got), err)
	}
	if ps := s.FileProblems(); len(ps) != 0 || s.Stats().UnreadableFiles != 0 {
		t.Errorf("after the repair: problems %+v", ps)
	}
	if n := logs.count("person file readable again", ann.ID); n != 1 {
		t.Errorf("the repair was logged %d times, want once", n)
	}
}

// TestBrokenHandleIsReopened: a file that breaks under an open handle is
// dropped from the cache at the first error, so the repaired file is read
// through a new handle rather than the broken one forever.
func TestBrokenHandleIsReopened(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, Config{HeadCacheBytes: -1})
	ann := mustPerson(t, s, "ann")
	for i := range 200 {
		if _, err := s.CreateMoment(ctx, ann.ID, fmt.Appendf(nil, "moment %d %s", i, strings.Repeat("x", 300))); err != nil {
			t.Fatal(err)
		}
	}
	s.files.Forget(ann.ID) // checkpointed: the whole file is in person.db
	path, _ := s.personPath(ann.ID)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.files.Acquire(ctx, ann.ID, false) // opened: the schema is read
	if err != nil {
		t.Fatal(err)
	}
	s.files.Release(f)
	// Cut the file under the open handle: the moments' pages are gone.
	if err := os.Truncate(path, 2*4096); err != nil {
		t.Fatal(err)
	}
	_, err = s.MomentCount(ctx, ann.ID)
	wantStorageUnavailable(t, "count through the broken handle", err)
	// The operator puts a good copy in place the safe way, by rename: a
	// handle kept open would go on reading the old, cut file.
	if err := os.WriteFile(path+".new", good, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	if n, err := s.MomentCount(ctx, ann.ID); err != nil || n != 200 {
		t.Fatalf("after the repair: %d moments, %v; the broken handle was kept", n, err)
	}
}
