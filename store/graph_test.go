package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/nah-app/nah"
)

// connectPair connects a and b through an invite, as the API does.
func connectPair(ctx context.Context, s *Store, a, b string) error {
	inv, err := s.CreateInvite(ctx, a)
	if err != nil {
		return err
	}
	_, err = s.RedeemInvite(ctx, b, inv.Code)
	return err
}

// loadedPeople counts the people whose connections are in memory.
func loadedPeople(s *Store) int {
	s.graph.mu.RLock()
	defer s.graph.mu.RUnlock()
	n := 0
	for _, id := range s.graph.index {
		if s.graph.nodes[id].loaded {
			n++
		}
	}
	return n
}

// memoryConns is who the graph says id is connected to, sorted.
func memoryConns(t *testing.T, s *Store, id string) []string {
	t.Helper()
	nodes, err := s.circle(context.Background(), id, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, n := range nodes[min(1, len(nodes)):] {
		ids = append(ids, n.id)
	}
	slices.Sort(ids)
	return ids
}

// directoryConns is who the directory says id is connected to, sorted:
// the connection list of the API, read with SQL, never from the graph.
func directoryConns(t *testing.T, s *Store, id string) []string {
	t.Helper()
	cs, err := s.Connections(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	return ids
}

// checkFeed compares the first page of id's feed with the brute-force read
// of the files of id and of everyone the directory says id is connected to.
func checkFeed(t *testing.T, s *Store, id string, limit int) {
	t.Helper()
	ctx := context.Background()
	var want []nah.Moment
	for _, who := range append([]string{id}, directoryConns(t, s, id)...) {
		ms, err := s.Moments(ctx, who, nil, limit, nil)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ms...)
	}
	slices.SortFunc(want, func(a, b nah.Moment) int {
		return nah.CompareNewest(a.CreatedAt, a.ID, a.Author, b.CreatedAt, b.ID, b.Author)
	})
	want = want[:min(limit, len(want))]
	p := NewPage()
	defer p.Release()
	if err := s.Feed(ctx, id, true, nil, limit, p); err != nil {
		t.Fatal(err)
	}
	if len(p.Moments) != len(want) {
		t.Fatalf("feed of %s: %d moments, want %d", id, len(p.Moments), len(want))
	}
	for i, m := range p.Moments {
		if m.ID != want[i].ID || m.Author != want[i].Author {
			t.Fatalf("feed of %s, item %d: %s by %s, want %s by %s", id, i, m.ID, m.Author, want[i].ID, want[i].Author)
		}
	}
}

// TestConnectionsLoadedOnFirstUse: a store opened on a directory with
// connections serves a feed and the connection list before it has read
// anyone's connections but the reader's; then, on each reopen, readers
// race connects, disconnects and a deletion while every person's
// connections are read for the first time, and once they are done the
// graph agrees with the directory for everyone: lists, counts, pairs and
// feeds.
func TestConnectionsLoadedOnFirstUse(t *testing.T) {
	const people, rounds = 24, 4
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range people {
		p := mustPerson(t, s, fmt.Sprintf("p%02d", i))
		ids = append(ids, p.ID)
		for range 3 {
			if _, err := s.CreateMoment(ctx, p.ID, fmt.Appendf(nil, "by p%02d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range people { // a ring and its chords: four each
		for _, d := range []int{1, 5} {
			if err := connectPair(ctx, s, ids[i], ids[(i+d)%people]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = MustOpen(t, Config{Dir: dir})
	if n := loadedPeople(s); n != 0 {
		t.Fatalf("%d people's connections read at open, want none", n)
	}
	checkFeed(t, s, ids[0], 30)
	if got, want := memoryConns(t, s, ids[0]), directoryConns(t, s, ids[0]); !slices.Equal(got, want) || len(got) != 4 {
		t.Fatalf("connections of the first reader: %v, want %v", got, want)
	}
	if n := loadedPeople(s); n != 1 {
		t.Fatalf("%d people's connections read after one feed, want 1", n)
	}
	s.Close()

	deleted := map[string]bool{}
	for round := range rounds {
		s := MustOpen(t, Config{Dir: dir})
		rng := rand.New(rand.NewPCG(uint64(round), 14))
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Go(func() { // connects and disconnects, by the API's rules
			defer close(stop)
			for range 60 {
				a, b := ids[rng.IntN(people)], ids[rng.IntN(people)]
				if a == b || deleted[a] || deleted[b] {
					continue
				}
				err := connectPair(ctx, s, a, b)
				if nah.ErrorCode(err) == nah.Conflict {
					err = s.Disconnect(ctx, a, b)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
			victim := ids[round] // and one deletion a round
			if err := s.DeletePerson(ctx, victim); err != nil {
				t.Error(err)
			}
			deleted[victim] = true
		})
		for r := range 3 {
			wg.Go(func() { // readers: everything that reads the graph
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					a, b := ids[(i*7+r)%people], ids[(i*11+r*3)%people]
					p := NewPage()
					err := s.Feed(ctx, a, true, nil, 30, p)
					p.Release()
					if err == nil {
						_, err = s.ConnectionCount(ctx, a)
					}
					if err == nil {
						_, err = s.Connected(ctx, b, a)
					}
					if err == nil {
						_, err = s.Connections(ctx, b)
					}
					if err == nil {
						s.MaybeNew(ctx, b, 0)
						_, _, err = s.CountNew(ctx, a, 0, 1<<62)
					}
					if err != nil && nah.ErrorCode(err) != nah.NotFound { // a deleted reader
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		for _, a := range ids {
			if deleted[a] {
				if n, err := s.ConnectionCount(ctx, a); err != nil || n != 0 {
					t.Fatalf("round %d: deleted %s has %d connections (%v)", round, a, n, err)
				}
				continue
			}
			want := directoryConns(t, s, a)
			if got := memoryConns(t, s, a); !slices.Equal(got, want) {
				t.Fatalf("round %d: connections of %s in memory %v, in the directory %v", round, a, got, want)
			}
			if n, err := s.ConnectionCount(ctx, a); err != nil || n != len(want) {
				t.Fatalf("round %d: count of %s is %d (%v), want %d", round, a, n, err, len(want))
			}
			for _, b := range ids {
				c, err := s.Connected(ctx, a, b)
				if err != nil || c != slices.Contains(want, b) {
					t.Fatalf("round %d: Connected(%s, %s) = %v (%v)", round, a, b, c, err)
				}
			}
			checkFeed(t, s, a, 30)
		}
		s.Close()
	}
}

// TestConnectionsReadAgainAfterAChange: a list read from the directory is
// not installed when a connection change lands between its read and its
// install (a disconnect, a connect, a deletion); it is read again, and
// after loadRetries such reads, read under connMu, where nothing can land.
func TestConnectionsReadAgainAfterAChange(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, Config{})
	ann, bob, cat, dan := mustPerson(t, s, "ann"), mustPerson(t, s, "bob"), mustPerson(t, s, "cat"), mustPerson(t, s, "dan")
	for _, p := range []nah.Person{bob, cat} {
		if err := connectPair(ctx, s, ann.ID, p.ID); err != nil {
			t.Fatal(err)
		}
	}
	reads := 0
	s.afterConnsRead = func() {
		reads++
		if reads == 1 {
			if err := s.Disconnect(ctx, ann.ID, bob.ID); err != nil {
				t.Error(err)
			}
		}
	}
	if n, err := s.ConnectionCount(ctx, ann.ID); err != nil || n != 1 || reads != 2 {
		t.Fatalf("after a disconnect during the read: %d connections (%v), %d reads; want 1, 2", n, err, reads)
	}

	// A deletion during the read of one of the deleted person's connections.
	reads = 0
	s.afterConnsRead = func() {
		reads++
		if reads == 1 {
			if err := s.DeletePerson(ctx, ann.ID); err != nil {
				t.Error(err)
			}
		}
	}
	if n, err := s.ConnectionCount(ctx, cat.ID); err != nil || n != 0 || reads != 2 {
		t.Fatalf("after a deletion during the read: %d connections (%v), %d reads; want 0, 2", n, err, reads)
	}
	if c, err := s.Connected(ctx, cat.ID, ann.ID); err != nil || c {
		t.Fatalf("connected to the deleted person: %v (%v)", c, err)
	}

	// Changes that keep landing: the last read holds connMu.
	changes := []func() error{
		func() error { return connectPair(ctx, s, bob.ID, dan.ID) },
		func() error { return connectPair(ctx, s, cat.ID, bob.ID) },
		func() error { return s.Disconnect(ctx, dan.ID, bob.ID) },
	}
	if len(changes) != loadRetries {
		t.Fatalf("%d changes for %d retries", len(changes), loadRetries)
	}
	reads = 0
	s.afterConnsRead = func() {
		reads++
		if reads <= loadRetries {
			if err := changes[reads-1](); err != nil {
				t.Error(err)
			}
			return
		}
		if s.connMu.TryLock() {
			s.connMu.Unlock()
			t.Error("the last read does not hold connMu")
		}
	}
	if got, want := memoryConns(t, s, bob.ID), directoryConns(t, s, bob.ID); !slices.Equal(got, want) || len(want) != 1 || reads != loadRetries+1 {
		t.Fatalf("after changes during every read: %v, want %v; %d reads, want %d", got, want, reads, loadRetries+1)
	}
}

// TestRemoveCleansListsLoadedBefore: a deleted person's own list may be
// read after the deletion committed (empty) while others' were read
// before (with them): remove takes them off every loaded list all the
// same.
func TestRemoveCleansListsLoadedBefore(t *testing.T) {
	g := newGraph()
	for _, id := range []string{"a", "b", "c"} {
		g.add(id, 0, 0)
	}
	ia, ib, ic := g.index["a"], g.index["b"], g.index["c"]
	if !g.install(ib, []string{"a", "c"}, g.changes) || !g.install(ia, nil, g.changes) {
		t.Fatal("install refused without a change")
	}
	g.remove("a")
	if c, known := g.connected("b", "a"); c || !known {
		t.Fatalf("b still connected to the removed a (known %v)", known)
	}
	if n, _ := g.count("b"); n != 1 || g.nodes[ib].conns[0] != ic {
		t.Fatalf("b's connections after the removal: %v", g.nodes[ib].conns)
	}
	if g.install(ic, []string{"b"}, g.changes-1) {
		t.Fatal("a list read before a change was installed")
	}
}
