package backup

import (
	"context"
	"errors"
	"io"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"

	"github.com/nah-app/nah"
)

// When the retention pass visits each file on the target, what it counts,
// and the client that keeps Litestream from writing after a file is let go.

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
