package digest

import (
	"sort"
	"time"
)

// The schedule: when, as an instant, a person's local digest minute falls.
//
// A digest minute is read on the person's local calendar. On most days
// that names one instant. On a spring-forward day the minute may not
// exist (02:30 where clocks jump from 02:00 to 03:00): the digest goes at
// the first minute that does, the jump's own (03:00). On a fall-back day
// the minute may exist twice (01:30 where clocks go back from 02:00 to
// 01:00): the digest goes at the first. So every local day has exactly one
// slot, and the loop owes one digest per slot.

// slotOn returns the slot of local minute m (0..1439) on the local date
// y-mo-d in loc: the earliest instant whose local wall clock reads that
// minute or later.
func slotOn(y int, mo time.Month, d, m int, loc *time.Location) time.Time {
	target := time.Date(y, mo, d, m/60, m%60, 0, 0, time.UTC) // the wall clock, labelled UTC
	// The offsets in force a day either side of the target: a zone
	// changes its offset at most once within that span.
	var found time.Time
	offs := [2]int{offsetAt(target.Add(-24*time.Hour), loc), offsetAt(target.Add(24*time.Hour), loc)}
	for _, off := range offs {
		u := target.Add(-time.Duration(off) * time.Second)
		if wall(u, loc).Equal(target) && (found.IsZero() || u.Before(found)) {
			found = u
		}
	}
	if !found.IsZero() {
		return found.In(loc)
	}
	// In a gap: the first minute after it is the transition's instant,
	// found between the two readings of the target.
	lo := target.Add(-time.Duration(max(offs[0], offs[1])) * time.Second)
	hi := target.Add(-time.Duration(min(offs[0], offs[1])) * time.Second)
	n := int(hi.Sub(lo) / time.Minute)
	i := sort.Search(n+1, func(i int) bool {
		return !wall(lo.Add(time.Duration(i)*time.Minute), loc).Before(target)
	})
	return lo.Add(time.Duration(i) * time.Minute).In(loc)
}

// offsetAt is loc's offset from UTC in seconds at the instant whose UTC
// reading is t (t labelled UTC).
func offsetAt(t time.Time, loc *time.Location) int {
	_, off := t.In(loc).Zone()
	return off
}

// wall is u's local wall clock in loc, labelled UTC so that wall clocks
// compare as plain times.
func wall(u time.Time, loc *time.Location) time.Time {
	l := u.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// lastSlot returns the latest slot of local minute m at or before now.
func lastSlot(now time.Time, m int, loc *time.Location) time.Time {
	y, mo, d := now.In(loc).Date()
	s := slotOn(y, mo, d, m, loc)
	if s.After(now) {
		s = slotOn(y, mo, d-1, m, loc)
	}
	return s
}

// sameLocalDay reports whether instants a and b fall on the same local
// date in loc.
func sameLocalDay(a, b time.Time, loc *time.Location) bool {
	ay, am, ad := a.In(loc).Date()
	by, bm, bd := b.In(loc).Date()
	return ay == by && am == bm && ad == bd
}
