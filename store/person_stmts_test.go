package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// TestPreparedInsertAcrossReopen posts round after round to more people
// than files may be open, so every post's file was closed and opened again
// since its last post: each post must land in the file (never on a closed
// handle's statement), and the prepared statements must not outlive their
// files.
func TestPreparedInsertAcrossReopen(t *testing.T) {
	s := MustOpen(t, Config{MaxOpenFiles: 2})
	ctx := context.Background()
	ids := fivePeople(t, s)
	const rounds = 3
	for range rounds {
		for _, id := range ids {
			if _, err := s.CreateMoment(ctx, id, []byte("hello")); err != nil {
				t.Fatalf("post to %s: %v", id, err)
			}
		}
	}
	// With an idempotency key the insert runs in the key's transaction.
	if _, _, err := s.CreateMomentOnce(ctx, ids[0], []byte("keyed"), &Idem{Key: "k1", Hash: []byte("h"), Answer: func(any) []byte { return []byte("{}") }}); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		n, err := s.MomentCount(ctx, id)
		want := rounds + map[bool]int{true: 1}[i == 0]
		if err != nil || n != want {
			t.Errorf("%s: %d moments, %v; want %d", id, n, err, want)
		}
	}
	checkStatementsKept(t, s)
}

// fivePeople makes ann, bob, cat, dan and eve, and returns their ids:
// more people than the statement tests let files be open.
func fivePeople(t *testing.T, s *Store) []string {
	t.Helper()
	var ids []string
	for _, h := range []string{"ann", "bob", "cat", "dan", "eve"} {
		ids = append(ids, mustPerson(t, s, h).ID)
	}
	return ids
}

// checkStatementsKept: once every closing file is closed, statements are
// kept for no more files than are open (a closed file's are forgotten).
func checkStatementsKept(t *testing.T, s *Store) {
	t.Helper()
	s.files.WaitClosed()
	s.stmts.mu.Lock()
	kept := len(s.stmts.m)
	s.stmts.mu.Unlock()
	if open := s.files.Len(); kept > open {
		t.Errorf("statements kept for %d files, %d open", kept, open)
	}
}

// TestFirstPostsAtOnce posts 16 at once to each file just opened: the
// posts that prepare its statement together must all land, none on a
// statement another closed.
func TestFirstPostsAtOnce(t *testing.T) {
	s := MustOpen(t, Config{MaxOpenFiles: 2})
	ctx := context.Background()
	ids := fivePeople(t, s)
	const rounds, writers = 4, 16
	for range rounds {
		for _, id := range ids {
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for range writers {
				wg.Go(func() {
					if _, err := s.CreateMoment(ctx, id, []byte("hello")); err != nil {
						errs <- err
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("post to %s: %v", id, err)
			}
		}
	}
	for _, id := range ids {
		if n, err := s.MomentCount(ctx, id); err != nil || n != rounds*writers {
			t.Errorf("%s: %d moments, %v; want %d", id, n, err, rounds*writers)
		}
	}
}

// TestFeedStatementsAcrossReopen reads each person's feed, a page at a
// time, round after round while more people post than files may be open:
// every page comes from the file's statements as it is open now (never a
// closed handle's), newest first, each body the one posted, and the
// statements kept never outnumber the open files.
func TestFeedStatementsAcrossReopen(t *testing.T) {
	var clock atomic.Int64 // a millisecond a post, so posting order is the feed's
	clock.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	s := MustOpen(t, Config{MaxOpenFiles: 2, Now: func() time.Time { return time.UnixMilli(clock.Add(1)) }})
	ctx := context.Background()
	ids := fivePeople(t, s)
	posted := map[string][]string{} // bodies by person, oldest first
	for round := range 3 {
		for _, id := range ids {
			for i := range 7 {
				body := fmt.Sprintf("%s round %d moment %d", id, round, i)
				if _, err := s.CreateMoment(ctx, id, []byte(body)); err != nil {
					t.Fatalf("post to %s: %v", id, err)
				}
				posted[id] = append(posted[id], body)
			}
		}
		for _, id := range ids {
			var got []string
			var before *nah.Cursor
			for {
				p := NewPage()
				if err := s.Feed(ctx, id, true, before, 4, p); err != nil {
					t.Fatalf("feed of %s: %v", id, err)
				}
				for _, m := range p.Moments {
					got = append(got, string(m.Body))
				}
				if p.Next == nil {
					p.Release()
					break
				}
				c := *p.Next
				before = &c
				p.Release()
			}
			want := slices.Clone(posted[id])
			slices.Reverse(want)
			if !slices.Equal(got, want) {
				t.Fatalf("round %d, feed of %s:\n got %q\nwant %q", round, id, got, want)
			}
		}
	}
	checkStatementsKept(t, s)
}

// TestIdsJSON: the bodies' id list is JSON that decodes to the same ids,
// whatever a file holds.
func TestIdsJSON(t *testing.T) {
	ids := []string{nah.NewMomentID(1), `a"b\c`, "é\x01", nah.NewMomentID(2)}
	var got []string
	if err := json.Unmarshal(idsJSON(nil, ids), &got); err != nil || !slices.Equal(got, ids) {
		t.Fatalf("%q: %v", got, err)
	}
}
