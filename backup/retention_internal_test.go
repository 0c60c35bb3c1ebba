package backup

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/superfly/ltx"
)

// TestRetentionExpired: what the policy deletes of one history, at its
// edges: the base is the newest snapshot from before the window (not the
// one at its very start, not an older one), nothing above it goes, the
// newest level-0 file never goes, and a level-0 file goes only once a
// level-1 file covers it and it is l0Keep old.
func TestRetentionExpired(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	p := newRetention(7 * 24 * time.Hour)
	day := 24 * time.Hour
	f := func(lvl int, lo, hi ltx.TXID, age time.Duration) *ltx.FileInfo {
		return &ltx.FileInfo{Level: lvl, MinTXID: lo, MaxTXID: hi, CreatedAt: now.Add(-age), Size: 100}
	}
	name := func(fs []*ltx.FileInfo) string {
		var s []string
		for _, f := range fs {
			s = append(s, fmt.Sprintf("L%d:%d-%d", f.Level, f.MinTXID, f.MaxTXID))
		}
		slices.Sort(s)
		return strings.Join(s, " ")
	}
	for _, c := range []struct {
		name string
		h    history
		del  string
	}{{
		name: "busy",
		h: history{
			9: {f(9, 1, 10, 9*day), f(9, 1, 20, 8*day), f(9, 1, 30, 7*day), f(9, 1, 40, 2*day)},
			1: {f(1, 1, 10, 9*day), f(1, 11, 20, 8*day), f(1, 21, 21, 8*day-time.Hour), f(1, 22, 40, 2*day), f(1, 41, 50, time.Hour)},
			2: {f(2, 1, 20, 8*day), f(2, 21, 50, time.Hour)},
			0: {f(0, 19, 19, 8*day), f(0, 20, 20, 8*day), f(0, 21, 21, 8*day-time.Hour), f(0, 50, 50, time.Hour),
				f(0, 51, 51, time.Hour), f(0, 52, 52, 2*time.Minute), f(0, 53, 53, time.Second)},
		},
		// The base is 1-20 (8 days); 1-30 is exactly 7 days old, inside.
		del: "L0:19-19 L0:20-20 L0:21-21 L0:50-50 L1:1-10 L1:11-20 L2:1-20 L9:1-10",
	}, {
		name: "idle since",
		h: history{
			9: {f(9, 1, 5, 20*day), f(9, 1, 9, 10*day)},
			1: {f(1, 1, 4, 21*day), f(1, 5, 9, 10*day)},
			0: {f(0, 9, 9, 10*day)},
		},
		// Everything is older than the window: the base and the newest
		// level-0 file (the replica's position) stay.
		del: "L1:1-4 L1:5-9 L9:1-5",
	}, {
		name: "young",
		h: history{
			1: {f(1, 1, 8, 2*day), f(1, 9, 12, day)},
			0: {f(0, 1, 1, 3*day), f(0, 2, 2, 3*day), f(0, 8, 8, 2*day), f(0, 12, 12, day), f(0, 13, 13, time.Hour)},
		},
		// No snapshot yet: the first file stays (a restore to a time
		// before the first level-1 file's starts from it), the rest of
		// level 0 goes once compacted.
		del: "L0:12-12 L0:2-2 L0:8-8",
	}, {
		name: "not compacted yet",
		h: history{
			9: {f(9, 1, 3, 9*day)},
			1: {f(1, 1, 3, 9*day), f(1, 4, 10, 3*day)},
			0: {f(0, 3, 3, 9*day), f(0, 10, 10, 3*day), f(0, 11, 11, 3*day), f(0, 12, 12, 2*day), f(0, 13, 13, day)},
		},
		// 11 and 12 are old but in no level-1 file: they stay.
		del: "L0:10-10 L0:3-3 L1:1-3",
	}} {
		t.Run(c.name, func(t *testing.T) {
			del, _ := expired(p, c.h, now)
			if got := name(del); got != c.del {
				t.Errorf("deleted %s\nwant    %s", got, c.del)
			}
		})
	}
}

// TestRetentionDue: when a history is next looked at, and when it gets a
// snapshot.
func TestRetentionDue(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	p := newRetention(7 * 24 * time.Hour)
	f := func(lvl int, lo, hi ltx.TXID, age time.Duration, size int64) *ltx.FileInfo {
		return &ltx.FileInfo{Level: lvl, MinTXID: lo, MaxTXID: hi, CreatedAt: now.Add(-age), Size: size}
	}
	h := history{
		9: {f(9, 1, 10, 2*24*time.Hour, 1000)},
		1: {f(1, 11, 20, time.Hour, 400)},
		0: {f(0, 20, 20, time.Hour, 10), f(0, 21, 21, time.Minute, 10)},
	}
	// The snapshot becomes the base a week after its time.
	if _, next := expired(p, h, now); !next.Equal(now.Add(-2*24*time.Hour + p.window + time.Second)) {
		t.Errorf("next due %v", next)
	}
	if snapshotDue(p, h, h.newest(9), now) {
		t.Errorf("a snapshot after 420 bytes of history for a 1,000-byte snapshot")
	}
	h[1] = append(h[1], f(1, 21, 30, time.Minute, 700))
	if !snapshotDue(p, h, h.newest(9), now) {
		t.Errorf("no snapshot after 1,100 bytes of history for a 1,000-byte snapshot a day old")
	}
	h[9][0].CreatedAt = now.Add(-time.Hour)
	if snapshotDue(p, h, h.newest(9), now) {
		t.Errorf("a snapshot an hour after the last")
	}
	h[9][0].CreatedAt = now.Add(-p.window / 2)
	h[1] = h[1][:1]
	if !snapshotDue(p, h, h.newest(9), now) {
		t.Errorf("no snapshot half a window after the last")
	}
}
