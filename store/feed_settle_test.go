package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// TestRefreshMissesNoConcurrentPost: three people post as fast as they
// can while the person connected to them refreshes in a loop as the feed
// handler does (everything older than the settling horizon, the page's
// refresh cursor its newest moment older than it). Every moment comes
// exactly once: a post leaves the settling set only once its newest time
// and head are up to date, else a refresh could pass it by for good.
func TestRefreshMissesNoConcurrentPost(t *testing.T) {
	s := MustOpen(t, Config{StaleAfter: time.Hour}) // newest times trusted, as between two reads of a busy feed
	ctx := context.Background()
	dan := mustPerson(t, s, "dan").ID
	var posters []string
	for _, h := range []string{"ann", "bob", "cyd"} {
		id := mustPerson(t, s, h).ID
		if err := connectPair(ctx, s, id, dan); err != nil {
			t.Fatal(err)
		}
		posters = append(posters, id)
	}
	const perPoster = 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	posted := map[string]bool{}
	for i, id := range posters {
		wg.Go(func() {
			for k := range perPoster {
				m, err := s.CreateMoment(ctx, id, fmt.Appendf(nil, "%d-%d", i, k))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				posted[m.ID] = true
				mu.Unlock()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	seen := map[string]int{}
	var after *nah.Cursor
	p := NewPage()
	defer p.Release()
	refresh := func() {
		settled := nah.Cursor{At: s.Horizon()}
		var newest *nah.Cursor
		for before := &settled; ; {
			if err := s.FeedRange(ctx, dan, true, before, after, nah.FeedPageMax, p); err != nil {
				t.Fatal(err)
			}
			for _, m := range p.Moments {
				seen[m.ID]++
				if newest == nil && m.CreatedAt < settled.At {
					newest = &nah.Cursor{At: m.CreatedAt, ID: m.ID, Author: m.Author}
				}
			}
			if p.Next == nil {
				break
			}
			next := *p.Next
			before = &next
		}
		if newest != nil {
			after = newest
		}
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		refresh()
	}
	time.Sleep(2 * time.Millisecond) // past the last post's millisecond
	refresh()
	if len(posted) != len(posters)*perPoster {
		t.Fatalf("%d posted", len(posted))
	}
	missed, twice := 0, 0
	for id := range posted {
		switch seen[id] {
		case 0:
			missed++
		case 1:
		default:
			twice++
		}
	}
	if missed > 0 || twice > 0 {
		t.Errorf("of %d moments posted while refreshing, %d were missed by every refresh and %d came more than once", len(posted), missed, twice)
	}
}
