package store

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// TestTotalsConstantInMedia: the overview's totals come from what the
// store counts in SQL (each person's media rows, summed once and kept with
// their usage), not from a walk of every media file: the allocations of a
// first Totals at 25,000 media are those at 5,000, and the figures are the
// rows' sizes plus the database files.
func TestTotalsConstantInMedia(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 30,000 media files")
	}
	totals := func(n int) (allocs uint64, took time.Duration) {
		s := MustOpen(t, Config{})
		ann := mustPerson(t, s, "ann")
		mustPerson(t, s, "bob") // no media at all
		seedMedia(t, s, ann.ID, n, 100)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		tot, err := s.Totals(t.Context())
		took = time.Since(start)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		if tot.People != 2 || tot.MediaBytes != int64(n)*100 {
			t.Errorf("%d media: totals %+v, want 2 people and %d media bytes", n, tot, n*100)
		}
		annDB, _ := s.databaseBytes(ann.ID)
		if tot.StorageBytes < tot.MediaBytes+annDB {
			t.Errorf("%d media: storage %d, less than the media and ann's database (%d + %d)", n, tot.StorageBytes, tot.MediaBytes, annDB)
		}
		again, err := s.Totals(t.Context())
		if err != nil || again.MediaBytes != tot.MediaBytes {
			t.Errorf("%d media: a second Totals %+v %v, want the same media bytes", n, again, err)
		}
		return after.Mallocs - before.Mallocs, took
	}
	small, tookSmall := totals(5_000)
	large, tookLarge := totals(25_000)
	t.Logf("a first Totals: %d allocations in %v at 5,000 media, %d in %v at 25,000", small, tookSmall, large, tookLarge)
	if large > small+2_000 {
		t.Errorf("Totals at 25,000 media made %d allocations, at 5,000 %d: it grows with the media", large, small)
	}
}

// TestTotalsOpensNoFile: the overview's first Totals reads the media rows
// of files nobody has open without opening them through the open-file
// cache, which would close the hot ones to make room.
func TestTotalsOpensNoFile(t *testing.T) {
	s := MustOpen(t, Config{MaxOpenFiles: 2})
	const people, each, size = 6, 3, 100
	for i := range people {
		p := mustPerson(t, s, fmt.Sprintf("person%d", i))
		seedMedia(t, s, p.ID, each, size)
	}
	s.WaitClosed()
	before := s.Stats().FileOpens
	tot, err := s.Totals(t.Context())
	if err != nil || tot.MediaBytes != people*each*size {
		t.Fatalf("totals %+v %v, want %d media bytes", tot, err, people*each*size)
	}
	if opened := s.Stats().FileOpens - before; opened != 0 {
		t.Errorf("Totals opened %d person files through the cache, want 0", opened)
	}
}
