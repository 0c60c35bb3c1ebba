package digest

import (
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// zoneCases are the time-zone cases of the digest tests: a half-hour
// offset without daylight saving, and two zones across both of a year's
// changes (Brazil kept daylight saving until 2019, so São Paulo is
// tested in 2018, when its clocks changed at midnight).
var zoneCases = []struct {
	name   string
	zone   string
	year   int
	minute int // the digest's local minute
	// on is a date with a change of clocks where the minute is in a gap
	// (want: the first minute after it) or repeated (want: the first).
	on   time.Time
	want time.Time // the slot on that date, in UTC
}{
	{"Kolkata half-hour offset", "Asia/Kolkata", 2018, 7*60 + 45, time.Date(2018, 3, 25, 0, 0, 0, 0, time.UTC), time.Date(2018, 3, 25, 2, 15, 0, 0, time.UTC)},
	{"Lisbon spring-forward gap 01:30", "Europe/Lisbon", 2018, 90, time.Date(2018, 3, 25, 0, 0, 0, 0, time.UTC), time.Date(2018, 3, 25, 1, 0, 0, 0, time.UTC)},
	{"Lisbon fall-back repeat 01:30", "Europe/Lisbon", 2018, 90, time.Date(2018, 10, 28, 0, 0, 0, 0, time.UTC), time.Date(2018, 10, 28, 0, 30, 0, 0, time.UTC)},
	{"Lisbon ordinary 08:00", "Europe/Lisbon", 2018, 8 * 60, time.Date(2018, 10, 28, 0, 0, 0, 0, time.UTC), time.Date(2018, 10, 28, 8, 0, 0, 0, time.UTC)},
	{"São Paulo spring-forward gap 00:30", "America/Sao_Paulo", 2018, 30, time.Date(2018, 11, 4, 0, 0, 0, 0, time.UTC), time.Date(2018, 11, 4, 3, 0, 0, 0, time.UTC)},
	{"São Paulo fall-back repeat 23:30", "America/Sao_Paulo", 2018, 23*60 + 30, time.Date(2018, 2, 17, 0, 0, 0, 0, time.UTC), time.Date(2018, 2, 18, 1, 30, 0, 0, time.UTC)},
	{"São Paulo without daylight saving 08:00", "America/Sao_Paulo", 2025, 8 * 60, time.Date(2025, 11, 2, 0, 0, 0, 0, time.UTC), time.Date(2025, 11, 2, 11, 0, 0, 0, time.UTC)},
}

// TestDigestSlotOnChangeDays checks the slot of each case's change day.
func TestDigestSlotOnChangeDays(t *testing.T) {
	for _, c := range zoneCases {
		loc, err := nah.LoadZone(c.zone)
		if err != nil {
			t.Fatal(err)
		}
		y, m, d := c.on.Date()
		if got := slotOn(y, m, d, c.minute, loc); !got.Equal(c.want) {
			t.Errorf("%s: slot %v, want %v", c.name, got.UTC(), c.want)
		}
	}
}

// TestDigestSlotEveryDayOfTheYear walks every local day of each case's
// year: one slot a day, on that local date, at the chosen minute or (in a
// gap) the first minute after it, 23 to 25 hours after the day before's;
// and lastSlot, asked at every hour, finds the latest slot at or before.
func TestDigestSlotEveryDayOfTheYear(t *testing.T) {
	for _, c := range zoneCases {
		loc, _ := nah.LoadZone(c.zone)
		var prev time.Time
		for day := time.Date(c.year, 1, 1, 0, 0, 0, 0, time.UTC); day.Year() == c.year; day = day.AddDate(0, 0, 1) {
			y, m, d := day.Date()
			s := slotOn(y, m, d, c.minute, loc)
			ly, lm, ld := s.In(loc).Date()
			if ly != y || lm != m || ld != d {
				t.Fatalf("%s: the slot of %v falls on %v", c.name, day.Format(time.DateOnly), s)
			}
			l := s.In(loc)
			if got := l.Hour()*60 + l.Minute(); got < c.minute || got > c.minute+60 {
				t.Fatalf("%s: the slot of %v is at %v", c.name, day.Format(time.DateOnly), l)
			}
			if !prev.IsZero() {
				if gap := s.Sub(prev); gap < 23*time.Hour || gap > 25*time.Hour {
					t.Fatalf("%s: %v after the slot before, on %v", c.name, gap, day.Format(time.DateOnly))
				}
				for h := prev; h.Before(s); h = h.Add(time.Hour) {
					if got := lastSlot(h, c.minute, loc); !got.Equal(prev) {
						t.Fatalf("%s: lastSlot(%v) = %v, want %v", c.name, h, got, prev)
					}
				}
			}
			prev = s
		}
	}
}

func TestDigestBodyText(t *testing.T) {
	for _, c := range []struct {
		n       int
		authors []string
		want    string
	}{
		{1, []string{"ana"}, "1 new moment from ana"},
		{3, []string{"ana", "rui"}, "3 new moments from ana and rui"},
		{4, []string{"ana", "rui", "eva"}, "4 new moments from ana, rui and eva"},
		{9, []string{"ana", "rui", "eva", "leo", "ines"}, "9 new moments from ana, rui and 3 others"},
	} {
		if got := bodyText(c.n, c.authors); got != c.want {
			t.Errorf("bodyText(%d, %v) = %q, want %q", c.n, c.authors, got, c.want)
		}
	}
}
