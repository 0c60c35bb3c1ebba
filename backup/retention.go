package backup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// The retention policy, for every file on the target, watched or shipped:
// a restore can go back to any time within the window (NAH_RETENTION, 7
// days), and what is older goes but one snapshot per file, taken at or
// before the window's start, and the history since. Litestream enforces
// retention only for the files it watches at the moment it looks (a few of
// them), and its own rule (snapshots older than its retention go, the
// newest kept) leaves no snapshot before the window's start when a file
// was not watched at its snapshot times: so it deletes nothing here but
// level-0 files compacted into level 1 (not a history's first: watchClient),
// and this file's pass does the rest.

// DefaultRetention is how far back a restore to a time can go.
const DefaultRetention = 7 * 24 * time.Hour

// levelsKept are the levels a history is read from: those Litestream's
// default compaction writes (0-3) and the snapshots (9).
var levelsKept = []int{0, 1, 2, 3, litestream.SnapshotLevel}

// retention is the policy's timing, derived from its window.
type retention struct {
	window time.Duration
	// snapshotEvery: a file written since its newest snapshot gets a new
	// one this long after it when its history since is as large as the
	// snapshot, or window/2 after it in any case, so that there is always
	// a snapshot inside the window to become the next base.
	snapshotEvery time.Duration
	// visitEvery bounds how often a file is looked at: a written file
	// within this, an unwritten one when something of it is due to go.
	// Each visit lists five levels (five LISTs on S3).
	visitEvery time.Duration
	// l0Keep: a level-0 file compacted into level 1 goes this long after
	// it was written (Litestream's own level-0 retention, 5 minutes).
	l0Keep time.Duration
}

func newRetention(window time.Duration) retention {
	if window <= 0 {
		window = DefaultRetention
	}
	p := retention{window: window}
	p.snapshotEvery = min(24*time.Hour, window/7)
	p.visitEvery = min(time.Hour, p.snapshotEvery/4)
	p.l0Keep = min(litestream.DefaultL0Retention, p.visitEvery)
	return p
}

// levels are Litestream's compaction levels for the files it watches:
// its defaults (30 s, 5 min, 1 h) for a window of a week, shorter for a
// short one, so that its level 0 is compacted before the policy looks.
func (p retention) levels() litestream.CompactionLevels {
	return litestream.CompactionLevels{
		{Level: 0},
		{Level: 1, Interval: min(30*time.Second, p.visitEvery)},
		{Level: 2, Interval: min(5*time.Minute, p.snapshotEvery)},
		{Level: 3, Interval: min(time.Hour, p.window/2)},
	}
}

// history is one file's LTX files on the target, by level, each level in
// TXID order.
type history map[int][]*ltx.FileInfo

func readHistory(ctx context.Context, client litestream.ReplicaClient) (history, error) {
	h := history{}
	for _, lvl := range levelsKept {
		infos, err := readLevel(ctx, client, lvl)
		if err != nil {
			return nil, err
		}
		h[lvl] = infos
	}
	return h, nil
}

// readLevel is one level of a history, in TXID order, each file timed as
// a listing times it (on S3 the upload's time, not the header's).
func readLevel(ctx context.Context, client litestream.ReplicaClient, lvl int) ([]*ltx.FileInfo, error) {
	itr, err := client.LTXFiles(ctx, lvl, 0, false)
	if err != nil {
		return nil, err
	}
	var infos []*ltx.FileInfo
	for itr.Next() {
		info := *itr.Item()
		infos = append(infos, &info)
	}
	if err := itr.Close(); err != nil {
		return nil, err
	}
	slices.SortFunc(infos, func(a, b *ltx.FileInfo) int { return cmp.Compare(a.MaxTXID, b.MaxTXID) })
	return infos, nil
}

func (h history) maxTXID() ltx.TXID {
	var m ltx.TXID
	for _, infos := range h {
		if n := len(infos); n > 0 {
			m = max(m, infos[n-1].MaxTXID)
		}
	}
	return m
}

func (h history) newest(lvl int) *ltx.FileInfo {
	if n := len(h[lvl]); n > 0 {
		return h[lvl][n-1]
	}
	return nil
}

// retainFile applies the policy to file rel at now: compacts a file
// nobody watches into level 1, snapshots it when due, and deletes what the
// window no longer needs. It returns when the file is next due (zero:
// only once written again).
//
// Safety, in this order: a snapshot is made from the history by the code
// a restore runs (Litestream's plan, then SQLite's full integrity check)
// and written before anything it replaces is deleted; the base is the
// newest snapshot whose time is before the window's start, so a restore
// to any time in the window starts at it or at a newer one and reads only
// files above it; the newest level-0 file (the replica's position, which
// Litestream and the next ship read) is never deleted.
func (r *Replicator) retainFile(ctx context.Context, rel string, now time.Time) (time.Time, error) {
	r.retainMu.Lock()
	defer r.retainMu.Unlock()
	p := r.policy
	client, err := r.cfg.Target.client(rel)
	if err != nil {
		return time.Time{}, err
	}
	h, err := readHistory(ctx, client)
	if err != nil {
		return time.Time{}, err
	}
	top := h.maxTXID()
	if top == 0 {
		return time.Time{}, nil
	}
	if compacted, err := r.compactShipped(ctx, rel, client, h, now); err != nil {
		return now.Add(p.visitEvery), err
	} else if compacted {
		if h, err = readHistory(ctx, client); err != nil {
			return time.Time{}, err
		}
		top = h.maxTXID()
	}

	snap := h.newest(litestream.SnapshotLevel)
	if snapshotDue(p, h, snap, now) {
		if _, err := r.snapshotHistory(ctx, rel, client, top); err != nil {
			return now.Add(p.visitEvery), fmt.Errorf("snapshot: %w", err)
		}
		// Listed again rather than timed as the write answered: S3 answers
		// with the header's time (the last transaction) and lists the
		// upload's, so the new snapshot was a base in this visit alone.
		if h[litestream.SnapshotLevel], err = readLevel(ctx, client, litestream.SnapshotLevel); err != nil {
			return now.Add(p.visitEvery), err
		}
	}

	del, next := expired(p, h, now)
	// A history nobody writes again is looked at when its snapshot is due
	// too: a file let go of (or shipped) once, its history younger than
	// snapshotEvery, was never visited again and kept all of it for ever.
	next = minTime(next, snapshotDueAt(p, h, h.newest(litestream.SnapshotLevel)))
	if len(del) > 0 {
		if err := client.DeleteLTXFiles(ctx, del); err != nil {
			return now.Add(p.visitEvery), fmt.Errorf("delete %d expired LTX files: %w", len(del), err)
		}
		r.retained.Add(int64(len(del)))
		// Their local copies too, as Litestream's own level-0 retention
		// removes them: it lists the target, so once the policy deleted a
		// file there, a watched file's local copy would stay for ever.
		level0 := filepath.Join(r.metaPath(rel), "ltx", "0")
		for _, f := range del {
			if f.Level == 0 {
				if err := os.Remove(filepath.Join(level0, ltx.FormatFilename(f.MinTXID, f.MaxTXID))); err != nil && !errors.Is(err, os.ErrNotExist) {
					return now.Add(p.visitEvery), err
				}
			}
		}
	}
	if err := r.pruneLocal(rel, top); err != nil {
		return now.Add(p.visitEvery), err
	}
	if !next.IsZero() && next.Before(now.Add(p.visitEvery)) {
		next = now.Add(p.visitEvery)
	}
	return next, nil
}

// snapshotDue says whether file h needs a new snapshot at now.
func snapshotDue(p retention, h history, snap *ltx.FileInfo, now time.Time) bool {
	at := snapshotDueAt(p, h, snap)
	return !at.IsZero() && !now.Before(at)
}

// snapshotDueAt is when file h needs a new snapshot (zero: not until it
// is written): it has history after its newest snapshot snap (or has
// none), and snap is window/2 old, or snapshotEvery old with its size
// written since; a history without one, snapshotEvery after its oldest file.
func snapshotDueAt(p retention, h history, snap *ltx.FileInfo) time.Time {
	top := h.maxTXID()
	if snap == nil {
		oldest := time.Time{}
		for _, lvl := range levelsKept {
			if len(h[lvl]) > 0 && (oldest.IsZero() || h[lvl][0].CreatedAt.Before(oldest)) {
				oldest = h[lvl][0].CreatedAt
			}
		}
		if oldest.IsZero() {
			return time.Time{}
		}
		return oldest.Add(p.snapshotEvery)
	}
	if snap.MaxTXID >= top {
		return time.Time{}
	}
	var since int64
	l1 := ltx.TXID(0)
	for _, f := range h[1] {
		if f.MaxTXID > snap.MaxTXID {
			since += f.Size
		}
		l1 = max(l1, f.MaxTXID)
	}
	for _, f := range h[0] {
		if f.MaxTXID > max(l1, snap.MaxTXID) {
			since += f.Size
		}
	}
	if since >= snap.Size {
		return snap.CreatedAt.Add(min(p.snapshotEvery, p.window/2))
	}
	return snap.CreatedAt.Add(p.window / 2)
}

// expired is what the policy deletes of history h at now, and when the
// next of its files is due to go (zero: none until the file is written).
func expired(p retention, h history, now time.Time) (del []*ltx.FileInfo, next time.Time) {
	due := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	cut := now.Add(-p.window)
	var base *ltx.FileInfo
	for _, s := range h[litestream.SnapshotLevel] {
		if s.CreatedAt.Before(cut) {
			if base == nil || s.MaxTXID > base.MaxTXID {
				base = s
			}
		} else {
			// It becomes the base once it is older than the window.
			due(s.CreatedAt.Add(p.window + time.Second))
		}
	}
	newest0 := h.newest(0)
	gone := func(f *ltx.FileInfo) bool {
		return base != nil && f.MaxTXID <= base.MaxTXID && f != newest0
	}
	for _, s := range h[litestream.SnapshotLevel] {
		if base != nil && s.MaxTXID < base.MaxTXID {
			del = append(del, s)
		}
	}
	for _, lvl := range levelsKept[1 : len(levelsKept)-1] {
		for _, f := range h[lvl] {
			if gone(f) {
				del = append(del, f)
			}
		}
	}
	// Level 0: below the base, or compacted into level 1 and l0Keep old,
	// oldest first and stopping at the first that must stay (Litestream's
	// own rule, which keeps level 0 contiguous). The history's first file
	// (a snapshot of the file when replication first had it) stays until
	// there is a base: a compacted file is timed as its last transaction,
	// so without it a restore to a time before that finds nothing, for a
	// file that existed then.
	var l1 ltx.TXID
	if f := h.newest(1); f != nil {
		l1 = f.MaxTXID
	}
	for _, f := range h[0] {
		if f == newest0 {
			break
		}
		if gone(f) {
			del = append(del, f)
			continue
		}
		if f.MinTXID == 1 {
			continue
		}
		if f.MaxTXID > l1 {
			due(f.CreatedAt.Add(p.l0Keep)) // compacted then (compactShipped), or by Litestream
			break
		}
		if f.CreatedAt.After(now.Add(-p.l0Keep)) {
			due(f.CreatedAt.Add(p.l0Keep))
			break
		}
		del = append(del, f)
	}
	return del, next
}
