package store

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// TestHeadMatchesFileUnderConcurrency: posts, deletes and head reloads race;
// once they are done, every cached head equals the uncached read of its
// file: the same newest moments, the same bodies, the right completeness.
func TestHeadMatchesFileUnderConcurrency(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	s := MustOpen(t, Config{Now: now, StaleAfter: 5 * time.Millisecond})
	ctx := context.Background()
	var ids []string
	for i := range 4 {
		ids = append(ids, mustPerson(t, s, fmt.Sprintf("person%d", i)).ID)
	}
	inv, _ := s.CreateInvite(ctx, ids[0])
	if _, err := s.RedeemInvite(ctx, ids[1], inv.Code); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var posted []nah.Moment
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range 60 {
				clock.Add(int64(rng.IntN(3))) // many posts share a millisecond
				m, err := s.CreateMoment(ctx, ids[rng.IntN(len(ids))], []byte(fmt.Sprintf("w%d-%d", w, rng.IntN(1e6))))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				posted = append(posted, m)
				mu.Unlock()
			}
		})
	}
	wg.Go(func() { // deleter
		rng := rand.New(rand.NewPCG(9, 9))
		for range 40 {
			mu.Lock()
			if len(posted) == 0 {
				mu.Unlock()
				time.Sleep(time.Millisecond)
				continue
			}
			m := posted[rng.IntN(len(posted))]
			mu.Unlock()
			if err := s.DeleteMoment(ctx, m.Author, m.ID); err != nil && nah.ErrorCode(err) != nah.NotFound {
				t.Error(err)
			}
		}
	})
	var readers sync.WaitGroup
	for range 2 { // readers: stale times force head reloads
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				clock.Add(3)
				for _, id := range ids {
					cs, err := s.candidates(ctx, id, true, nil)
					if err != nil {
						t.Error(err)
						return
					}
					for _, c := range cs {
						if _, err := s.headOf(ctx, c.n); err != nil {
							t.Error(err)
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()

	checkHeads(t, s, ids)

	// Then, with no reload in between, each person's newest moment is
	// deleted: the cached head must drop it at once, as the file does.
	for _, id := range ids {
		ms, err := s.Moments(ctx, id, nil, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			continue
		}
		if err := s.DeleteMoment(ctx, id, ms[0].ID); err != nil {
			t.Fatal(err)
		}
	}
	checkHeads(t, s, ids)
}

// checkHeads compares every cached head of ids with the uncached read of
// its file: the same newest moments, the same bodies, the right
// completeness, and the accounting of their bytes.
func checkHeads(t *testing.T, s *Store, ids []string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		n := s.graph.node(id)
		h := n.head.Load()
		if h == nil {
			t.Fatalf("%s: no head cached", id)
		}
		keys, err := s.Moments(ctx, id, nil, HeadLen+1, nil) // the uncached read, bodies included
		if err != nil {
			t.Fatal(err)
		}
		// A complete head holds every moment of the file; an incomplete one
		// holds a prefix of them (a delete may leave it shorter than
		// HeadLen until the next reload) and the file has more.
		ok := len(h.items) <= HeadLen
		if h.complete {
			ok = ok && len(keys) == len(h.items)
		} else {
			ok = ok && len(keys) > len(h.items)
		}
		if !ok {
			t.Fatalf("%s: head of %d (complete %v), file's newest %d", id, len(h.items), h.complete, len(keys))
		}
		for i, k := range keys[:len(h.items)] {
			it := h.items[i]
			if it.ID != k.ID || it.CreatedAt != k.CreatedAt {
				t.Fatalf("%s: head item %d is %s@%d, file has %s@%d", id, i, it.ID, it.CreatedAt, k.ID, k.CreatedAt)
			}
			if !bytes.Equal(k.Body, it.Body) {
				t.Fatalf("%s: body of %s differs: %q vs %q", id, k.ID, it.Body, k.Body)
			}
		}
		if len(keys) > 0 && n.newest.Load() < keys[0].CreatedAt {
			t.Fatalf("%s: newest %d is older than the file's %d", id, n.newest.Load(), keys[0].CreatedAt)
		}
	}
	var sum int64
	for _, id := range ids {
		if h := s.graph.node(id).head.Load(); h != nil {
			sum += h.bytes
		}
	}
	if sum != s.Stats().HeadBytes {
		t.Fatalf("head accounting %d, heads hold %d", s.Stats().HeadBytes, sum)
	}
}

func TestHeadBudgetHolds(t *testing.T) {
	s := MustOpen(t, Config{HeadCacheBytes: 3000})
	ctx := context.Background()
	for i := range 10 {
		p := mustPerson(t, s, fmt.Sprintf("person%d", i))
		for range 5 {
			if _, err := s.CreateMoment(ctx, p.ID, make([]byte, 400)); err != nil {
				t.Fatal(err)
			}
		}
		cs, _ := s.candidates(ctx, p.ID, false, nil)
		h, err := s.headOf(ctx, cs[0].n)
		if err != nil || h == nil || len(h.items) != 5 {
			t.Fatalf("head of %d: %v", i, err)
		}
		if s.Stats().HeadBytes > 3000 {
			t.Fatalf("heads hold %d bytes, budget 3000", s.Stats().HeadBytes)
		}
	}
	if s.Stats().HeadBytes == 0 {
		t.Fatal("nothing cached at all")
	}
}

// TestRefreshSkipsUnchangedFiles: a head whose file has not changed is
// trusted for another period without opening the file; a write by another
// process changes the file's stamp and the head is reloaded.
func TestRefreshSkipsUnchangedFiles(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	a := MustOpen(t, Config{Dir: dir, Now: clock})
	ctx := context.Background()
	p := mustPerson(t, a, "person")
	if _, err := a.CreateMoment(ctx, p.ID, []byte("one")); err != nil {
		t.Fatal(err)
	}
	// Make the file look quiet for an hour, as a file nobody wrote lately.
	old := time.Now().Add(-time.Hour)
	base := filepath.Join(dir, "people", p.ID, "person.db")
	for _, f := range []string{base, base + "-wal"} {
		os.Chtimes(f, old, old)
	}
	circle := func() []candidate {
		cs, err := a.candidates(ctx, p.ID, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	now = now.Add(31 * time.Second)
	circle() // reloads and stamps the quiet file
	reads := a.Stats().FileReads
	now = now.Add(31 * time.Second)
	circle()
	if a.Stats().FileReads != reads {
		t.Fatal("an unchanged file was read again")
	}
	b := MustOpen(t, Config{Dir: dir, Now: clock})
	now = now.Add(time.Second)
	m, err := b.CreateMoment(ctx, p.ID, []byte("two, from another process"))
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(31 * time.Second)
	if cs := circle(); cs[0].newest != m.CreatedAt || a.Stats().FileReads == reads {
		t.Fatalf("after another process wrote: newest %d, want %d", cs[0].newest, m.CreatedAt)
	}
	h, err := a.headOf(ctx, circle()[0].n)
	if err != nil || len(h.items) != 2 || h.items[0].ID != m.ID {
		t.Fatalf("head after reload: %+v, %v", h, err)
	}
}
