package backup

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"

	"github.com/nah-app/nah"
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
		// file there, a watched file's local copy stayed for ever (10,385
		// local files after an 18-minute soak on people-1k).
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

// compactShipped compacts the level-0 files of a file nobody watches that
// are past level 1 and l0Keep old into one level-1 file (a ship does it
// every shipsPerCompaction ships; a person who posts three times would
// otherwise keep three level-0 files for ever). Litestream compacts the
// files it watches.
func (r *Replicator) compactShipped(ctx context.Context, rel string, client litestream.ReplicaClient, h history, now time.Time) (bool, error) {
	var l1 ltx.TXID
	if f := h.newest(1); f != nil {
		l1 = f.MaxTXID
	}
	old := false
	for _, f := range h[0] {
		if f.MaxTXID > l1 {
			old = f.CreatedAt.Before(now.Add(-r.policy.l0Keep))
			break
		}
	}
	if !old {
		return false, nil
	}
	st := r.state(rel)
	st.op.Lock()
	defer st.op.Unlock()
	if r.ls.FindDB(r.path(rel)) != nil {
		return false, nil
	}
	_, err := litestream.NewCompactor(client, r.log).Compact(ctx, 1)
	if errors.Is(err, litestream.ErrNoCompaction) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("compact level 0: %w", err)
	}
	return true, nil
}

// snapshotHistory writes a snapshot of file rel's history up to TXID top:
// restored by Litestream's restore as `nah restore` runs it, checked whole
// by SQLite, and written as a level-9 file of TXIDs 1 to top, timed as its
// last transaction (so that a restore to a time takes it only after it).
func (r *Replicator) snapshotHistory(ctx context.Context, rel string, client litestream.ReplicaClient, top ltx.TXID) (*ltx.FileInfo, error) {
	plan, err := litestream.CalcRestorePlan(ctx, client, top, time.Time{}, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	last := plan[len(plan)-1]
	rc, err := client.OpenLTXFile(ctx, last.Level, last.MinTXID, last.MaxTXID, 0, ltx.HeaderSize)
	if err != nil {
		return nil, err
	}
	hdr, _, err := ltx.PeekHeader(rc)
	rc.Close()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(r.cfg.MetaDir, retainScratch)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "snapshot.db")
	removeDB(out)
	defer removeDB(out)
	rep := litestream.NewReplicaWithClient(nil, client)
	opt := litestream.NewRestoreOptions()
	opt.OutputPath, opt.TXID = out, top
	if err := rep.Restore(ctx, opt); err != nil {
		return nil, err
	}
	if err := checkSound(ctx, out); err != nil {
		return nil, err
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var dbh [100]byte
	if _, err := f.ReadAt(dbh[:], 0); err != nil {
		return nil, err
	}
	pageSize := uint32(binary.BigEndian.Uint16(dbh[16:]))
	if pageSize == 1 {
		pageSize = 65536
	}
	if pageSize < 512 || fi.Size()%int64(pageSize) != 0 {
		return nil, fmt.Errorf("restored %s: page size %d does not divide its %d bytes", rel, pageSize, fi.Size())
	}
	snap := ltx.Header{
		Version: ltx.Version, Flags: ltx.HeaderFlagNoChecksum, PageSize: pageSize,
		Commit: uint32(fi.Size() / int64(pageSize)), MinTXID: 1, MaxTXID: top, Timestamp: hdr.Timestamp,
	}
	spill := &spillFile{name: filepath.Join(dir, "snapshot.ltx.tmp"), buf: shipBufs.Get().(*bytes.Buffer)}
	defer spill.close()
	spill.buf.Reset()
	lock := ltx.LockPgno(pageSize)
	err = writeLTX(spill, snap, func(lw *ltxWriter) error {
		data := make([]byte, pageSize)
		for pgno := uint32(1); pgno <= snap.Commit; pgno++ {
			if pgno == lock {
				continue
			}
			if _, err := f.ReadAt(data, int64(pgno-1)*int64(pageSize)); err != nil {
				return err
			}
			if err := lw.page(pgno, data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	body, err := spill.reader()
	if err != nil {
		return nil, err
	}
	info, err := client.WriteLTXFile(ctx, litestream.SnapshotLevel, 1, top, body)
	if err != nil {
		return nil, err
	}
	r.snapshots.Add(1)
	return info, nil
}

// retainScratch is where snapshots are restored before they are written,
// under the local state.
const retainScratch = ".retain"

// pruneLocal removes the level-0 files of a file nobody watches from its
// local state (pruneLevel0), the target holding its history up to TXID
// onTarget.
func (r *Replicator) pruneLocal(rel string, onTarget ltx.TXID) error {
	st := r.state(rel)
	st.op.Lock()
	defer st.op.Unlock()
	if r.ls.FindDB(r.path(rel)) != nil {
		return nil
	}
	return r.pruneLevel0(rel, st, onTarget)
}

// pruneLevel0 removes from file rel's local level 0 every LTX file but
// the newest, which is all a ship and a take-up read, that the target
// holds (up to TXID onTarget or the file's replicated position): files
// past it wait for a catch-up to send them. Litestream removes its local
// copies only with its own level-0 retention, so a file it let go of kept
// them all: after people-1k was seeded through the API, 826 MB of local
// state beside 159 MB of databases. The caller holds st.op and the file
// is not watched.
func (r *Replicator) pruneLevel0(rel string, st *fileState, onTarget ltx.TXID) error {
	r.mu.Lock()
	held := max(onTarget, ltx.TXID(st.Replicated))
	r.mu.Unlock()
	level0 := filepath.Join(r.metaPath(rel), "ltx", "0")
	es, err := os.ReadDir(level0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	_, top, err := maxLTX(level0)
	if err != nil {
		return err
	}
	for _, e := range es {
		if _, hi, err := ltx.ParseFilename(e.Name()); err == nil && hi < top && hi <= held {
			if err := os.Remove(filepath.Join(level0, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// state is file rel's state, made if replication has none yet.
func (r *Replicator) state(rel string) *fileState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.files[rel]
	if st == nil {
		st = &fileState{Since: time.Now()}
		r.files[rel] = st
	}
	return st
}

// historyGrew marks file rel's history as grown on the target: it is
// looked at within visitEvery.
func (r *Replicator) historyGrew(rel string) {
	r.retainDueMu.Lock()
	defer r.retainDueMu.Unlock()
	at := time.Now().Add(r.policy.visitEvery)
	if due, ok := r.retainDue[rel]; !ok || due.IsZero() || at.Before(due) {
		r.retainDue[rel] = at
	}
}

// retainLoop applies the policy in the background: first to every file
// the target holds (a restart forgets when each is due), then to each file
// when it is due, one at a time and pausing as long as each took, so at
// most half of one core.
func (r *Replicator) retainLoop() {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-r.stop; cancel() }()
	defer cancel()
	tick := min(time.Minute, r.policy.visitEvery)
	t := time.NewTimer(min(r.policy.visitEvery, retainFirstAfter))
	defer t.Stop()
	listed := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !listed {
			if err := r.listForRetention(ctx); err != nil {
				r.log.Warn("retention: list the target", "err", err)
			} else {
				listed = true
			}
		}
		r.retainDueFiles(ctx, time.Now())
		t.Reset(tick)
	}
}

// retainFirstAfter is how long after the start the first pass begins: the
// start (the directory's first snapshot, the queue left by a kill) first.
const retainFirstAfter = time.Minute

// listForRetention makes every database on the target due now.
func (r *Replicator) listForRetention(ctx context.Context) error {
	rels, err := r.historyFiles(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	r.retainDueMu.Lock()
	defer r.retainDueMu.Unlock()
	for _, rel := range rels {
		r.retainDue[rel] = now
	}
	r.retainListed = true
	return nil
}

// historyFiles lists the databases the target holds a history of.
func (r *Replicator) historyFiles(ctx context.Context) ([]string, error) {
	blobs := r.cfg.Target.store()
	out := []string{nah.DirectoryRel}
	ids, err := blobs.children(ctx, nah.PeopleRel)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if rel := path.Join(nah.PeopleRel, id, nah.PersonFileName); nah.ValidDatabaseRel(rel) {
			out = append(out, rel)
		}
	}
	return out, nil
}

// retainDueFiles visits every file due at now.
func (r *Replicator) retainDueFiles(ctx context.Context, now time.Time) {
	r.retainDueMu.Lock()
	var due []string
	for rel, at := range r.retainDue {
		if !at.IsZero() && !at.After(now) {
			due = append(due, rel)
		}
	}
	r.retainDueMu.Unlock()
	slices.Sort(due)
	for _, rel := range due {
		if ctx.Err() != nil {
			return
		}
		start := time.Now()
		next, err := r.retainFile(ctx, rel, start)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("retention", "path", rel, "err", err)
			r.retainErrs.Add(1)
		}
		r.retainDueMu.Lock()
		if at, ok := r.retainDue[rel]; ok && at.After(now) {
			// Written during the visit: due again within visitEvery.
			next = minTime(next, at)
		}
		if next.IsZero() {
			delete(r.retainDue, rel)
		} else {
			r.retainDue[rel] = next
		}
		r.retainDueMu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Since(start)):
		}
	}
}

// RetentionStats is what the metrics say of the policy's background work.
type RetentionStats struct {
	// Overdue files are due to be looked at and not yet done (every file
	// on the target until the first listing after the start), and
	// OverdueFor is how long the one due longest has waited: a pass that
	// cannot keep up.
	Overdue    int
	OverdueFor time.Duration
	// Since the start: LTX files deleted, snapshots written, visits that
	// failed (logged; the file is tried again within visitEvery).
	Deleted, Snapshots, Failures int64
}

// RetentionStats is the policy's state now.
func (r *Replicator) RetentionStats() RetentionStats {
	now := time.Now()
	st := RetentionStats{Deleted: r.retained.Load(), Snapshots: r.snapshots.Load(), Failures: r.retainErrs.Load()}
	r.retainDueMu.Lock()
	defer r.retainDueMu.Unlock()
	if !r.retainListed {
		st.Overdue, st.OverdueFor = 1, max(0, now.Sub(r.started)-retainFirstAfter)
	}
	for _, at := range r.retainDue {
		if !at.IsZero() && !at.After(now) {
			st.Overdue++
			st.OverdueFor = max(st.OverdueFor, now.Sub(at))
		}
	}
	return st
}

func minTime(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// watchClient is the client Litestream replicates a watched file
// through. Its level-0 retention deletes every level-0 file that level 1
// covers, the history's first too, which the policy keeps until there is
// a base (expired) and deletes itself through the plain client: without
// it, a restore to a time before the first level-1 file's finds no history.
//
// Litestream's compactions (and the level-0 retention after each) go on
// after the file is let go of (UnregisterDB does not wait for them): in 1-5
// of 40 let-gos (level 1 every 71 ms, a 2 s window) a level-1 file was
// written or level-0 files deleted after Unwatch returned, under the next
// ship's feet (a ship's compaction read its level 0 half deleted:
// "non-contiguous transaction ids"). letGo refuses its writes and deletes
// from then on, and waits for those under way.
type watchClient struct {
	litestream.ReplicaClient
	mu   sync.RWMutex // held for reading by each write and delete
	gone bool
}

var errLetGo = errors.New("the file was let go of: replication writes nothing more through this client")

func (c *watchClient) WriteLTXFile(ctx context.Context, level int, minTXID, maxTXID ltx.TXID, rd io.Reader) (*ltx.FileInfo, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.gone {
		return nil, errLetGo
	}
	return c.ReplicaClient.WriteLTXFile(ctx, level, minTXID, maxTXID, rd)
}

func (c *watchClient) DeleteLTXFiles(ctx context.Context, a []*ltx.FileInfo) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.gone {
		return errLetGo
	}
	a = slices.DeleteFunc(slices.Clone(a), func(f *ltx.FileInfo) bool { return f.Level == 0 && f.MinTXID == 1 })
	if len(a) == 0 {
		return nil
	}
	return c.ReplicaClient.DeleteLTXFiles(ctx, a)
}

func (c *watchClient) DeleteAll(ctx context.Context) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.gone {
		return errLetGo
	}
	return c.ReplicaClient.DeleteAll(ctx)
}

// letGo refuses every later write and delete, and returns once those
// under way are done.
func (c *watchClient) letGo() {
	c.mu.Lock()
	c.gone = true
	c.mu.Unlock()
}
