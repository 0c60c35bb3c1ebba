package store

import (
	"context"
	"crypto/rand"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// TestFirstFeedPrefetchesWhatThePageNeeds: the first feed after an open
// (no head cached) reads its people's heads in parallel and gives the same
// page as one read alone (GOMAXPROCS 1: no worker), reading each head once
// and at most one file more per worker than that page did. 40 people
// connected to one, 3 moments each a minute apart, one person after the
// other: the 30 newest are 10 people's, and the page reads 11 heads.
func TestFirstFeedPrefetchesWhatThePageNeeds(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	at := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	s := MustOpen(t, Config{Dir: dir, Now: func() time.Time { return at }})
	me := mustPerson(t, s, "reader").ID
	var pairs [][2]string
	var people []string
	for i := range 40 {
		id := mustPerson(t, s, fmt.Sprintf("p%02d", i)).ID
		people = append(people, id)
		pairs = append(pairs, [2]string{me, id})
	}
	if err := s.ImportConnections(ctx, pairs, at.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	for j := range 3 {
		for i, id := range people {
			when := at.Add(time.Duration(i*3+j) * time.Minute).UnixMilli()
			ms := []nah.Moment{{ID: nah.MomentIDFrom(when, rand.Reader), CreatedAt: when, Body: []byte(fmt.Sprintf("%d of %s", j, id))}}
			if err := s.ImportMoments(ctx, id, ms); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Close()

	firstFeed := func(procs int) ([]string, int64) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		s, err := Open(ctx, Config{Dir: dir, Now: func() time.Time { return at.Add(3 * time.Hour) }})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		p := NewPage()
		defer p.Release()
		if err := s.Feed(ctx, me, true, nil, 30, p); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range p.Moments {
			ids = append(ids, m.ID)
		}
		return ids, s.Stats().FileReads
	}
	alone, aloneReads := firstFeed(1)
	if len(alone) != 30 {
		t.Fatalf("first feed alone: %d moments", len(alone))
	}
	for _, procs := range []int{2, 4} {
		got, reads := firstFeed(procs)
		if !slices.Equal(got, alone) {
			t.Fatalf("GOMAXPROCS %d: the page differs from the one read alone:\n%v\n%v", procs, got, alone)
		}
		workers := int64(min(procs, 4) - 1)
		if reads > aloneReads+workers {
			t.Errorf("GOMAXPROCS %d: %d files read, %d alone: more than one ahead per worker", procs, reads, aloneReads)
		}
		t.Logf("GOMAXPROCS %d: %d files read, %d alone", procs, reads, aloneReads)
	}
}
