package store

import (
	"context"
	"sync"
	"testing"
)

// TestPreparedInsertAcrossReopen posts round after round to more people
// than files may be open, so every post's file was closed and opened again
// since its last post: each post must land in the file (never on a closed
// handle's statement), and the prepared statements must not outlive their
// files.
func TestPreparedInsertAcrossReopen(t *testing.T) {
	s := MustOpen(t, Config{MaxOpenFiles: 2})
	ctx := context.Background()
	var ids []string
	for _, h := range []string{"ann", "bob", "cat", "dan", "eve"} {
		ids = append(ids, mustPerson(t, s, h).ID)
	}
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
	s.files.WaitClosed()
	s.inserts.mu.Lock()
	kept := len(s.inserts.m)
	s.inserts.mu.Unlock()
	if open := s.files.Len(); kept > open {
		t.Errorf("%d prepared inserts kept for %d open files", kept, open)
	}
}

// TestFirstPostsAtOnce posts 16 at once to each file just opened: the
// posts that prepare its statement together must all land, none on a
// statement another closed.
func TestFirstPostsAtOnce(t *testing.T) {
	s := MustOpen(t, Config{MaxOpenFiles: 2})
	ctx := context.Background()
	var ids []string
	for _, h := range []string{"ann", "bob", "cat", "dan", "eve"} {
		ids = append(ids, mustPerson(t, s, h).ID)
	}
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
