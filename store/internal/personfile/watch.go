package personfile

import (
	"context"
	"time"
)

// Watch has replication watch f (held by the caller, written or about to
// be), first letting go the least recently used idle watched file if the set
// is full. It runs off the request path and syncs once; closeFile waits for
// it, since a file let go before Litestream set it up gets no last sync.
func (c *Cache) Watch(ctx context.Context, f *File) { c.watchFile(ctx, f, false, time.Time{}) }

// WatchWait is Watch, returning once replication has the file (its first
// sync done): for a swapped file, whose restore is done only then. A watch
// of f already under way (a replicator's) is waited for.
func (c *Cache) WatchWait(ctx context.Context, f *File) {
	c.watchFile(ctx, f, true, time.Time{})
	if w := f.watching(); w != nil {
		select {
		case <-w:
		case <-ctx.Done():
		}
	}
}

// watchFile is Watch; with wait set the Watch runs in the caller's
// goroutine (a replicator's), which is then paced by it. Once watched the
// file is queued, due at once, for the upload the Watch leaves to a sync,
// waiting since at (zero: now), the oldest write a replicator took it up
// for.
func (c *Cache) watchFile(ctx context.Context, f *File, wait bool, at time.Time) {
	if c.repl == nil {
		return
	}
	// Marked on disk until its last sync: a kill may leave writes
	// Litestream had not shipped.
	done := f.startWatch(func() { c.q.mark(f.ID) })
	if done == nil {
		return
	}
	c.mu.Lock()
	if f.elem != nil { // one that left the cache meanwhile (dropped, hidden) is not counted
		f.counted = true
		c.watched++
	}
	var victims []*File
	for e := c.lru.Back(); e != nil && c.cfg.MaxWatched > 0 && c.watched > c.cfg.MaxWatched; {
		v := e.Value.(*File)
		prev := e.Prev()
		if v.refs == 0 && v.watching() != nil {
			c.removeLocked(v)
			victims = append(victims, v)
		}
		e = prev
	}
	c.mu.Unlock()
	c.closeLater(victims)
	run := func() {
		defer close(done)
		c.takeUps.Add(1)
		if err := c.repl.Watch(context.WithoutCancel(ctx), f.Path); err != nil {
			// Behind with its error: the catch-up loop syncs it once the
			// target answers.
			c.log.Warn("replication: watch", "path", f.Path, "err", err)
			return
		}
		now := time.Now()
		if at.IsZero() {
			at = now
		}
		c.q.put(f.ID, at, now, true)
	}
	if wait {
		run()
		return
	}
	c.watchers.Go(run)
}

// replicators is how many files replication ships, takes up or syncs at
// once (replicate), and syncers how many more sync watched ones only
// (syncWatched), so that a slow target's syncs never hold a take-up up;
// extraReplicators more join while the oldest queued write is behindLag
// old, to pull the lag back under its 5 s promise, which a loaded run
// without them missed. On people-1k they cost no measurable posts/s and
// cut the mixed burst's worst lag (bench/THRESHOLDS.md).
const (
	replicators      = 2
	syncers          = 2
	extraReplicators = 2
	behindLag        = 2500 * time.Millisecond
)

// syncEvery is how often at most a watched file is synced: a moment
// reaches the replica within about a second of its post when nothing
// waits, and a heavy poster's writes go in one sync a second. A failed
// sync is tried again as long after, with the write's first time.
const syncEvery = time.Second

// Wrote records that f, which the caller holds, was just written, in the
// queue of files the replica lacks (queue.go). A file not watched is due
// at once, and shipped or taken up by a replicator, so that a post never
// pays for taking a file up: when a write took its file up itself, most
// posts under the bench's writers waited for it (people-1k,
// bench/THRESHOLDS.md). A watched one is due syncEvery after its last
// sync began, and synced then (Replicator.Sync).
// A file written again while it waits is replicated once.
func (c *Cache) Wrote(f *File) {
	if c.repl == nil {
		return
	}
	now := time.Now()
	f.wrote.Store(now.UnixNano())
	f.mu.Lock()
	defer f.mu.Unlock()
	var due time.Time
	if f.watched != nil {
		due = time.Unix(0, f.synced.Load()).Add(syncEvery)
	}
	c.q.pushDue(f.ID, due, f.watched != nil)
}

// replicate ships or takes up files queued while not watched, one at a
// time, until the cache closes (Close replicates what is left); with lag,
// only while the oldest has waited that long. One watched since it was
// queued is synced.
func (c *Cache) replicate(lag time.Duration) {
	for {
		id, at, ok := c.q.pop(lag)
		if !ok {
			return
		}
		if _, hidden := c.State(id); hidden {
			// Being deleted, restored or replaced: it waits its turn again,
			// a moment later, rather than be dropped with its write.
			time.Sleep(hiddenRetry)
			c.q.requeue(id)
			continue
		}
		if f := c.watchedFile(id); f != nil {
			c.sync(f, at)
			continue
		}
		// Watched through the cache, as a write would be: the file is open
		// while it is watched and let go of only after the app's handle
		// closed, so a post to it never waits for the take-up. One that is
		// gone meanwhile has nothing to take up.
		f, err := c.Acquire(context.Background(), id, false)
		if err != nil {
			if c.Closed() {
				c.q.requeue(id) // the shutdown's drain takes it
			}
			c.q.unmark(id)
			continue
		}
		if c.ship(f) {
			c.Release(f)
			c.q.unmark(id)
			continue
		}
		c.watchFile(context.Background(), f, true, at)
		c.Release(f)
	}
}

// syncWatched syncs files queued while watched, one at a time, until the
// cache closes; one no longer watched is left for a replicator.
func (c *Cache) syncWatched() {
	for {
		id, at, ok := c.q.popSync()
		if !ok {
			return
		}
		if f := c.watchedFile(id); f != nil {
			c.sync(f, at)
		} else {
			c.q.put(id, at, at, false)
		}
	}
}

// watchedFile is person id's file if it is open (or closing) and watched:
// a replicator syncs it without an Acquire, which would make it the most
// recently used.
func (c *Cache) watchedFile(id string) *File {
	c.mu.Lock()
	f := c.byID[id]
	if f == nil {
		f = c.closing[id]
	}
	c.mu.Unlock()
	if f == nil || f.watching() == nil {
		return nil
	}
	return f
}

// sync syncs watched file f, queued since at. A failed sync (or one while
// the target is failing, which fails at once) leaves the write queued
// with its first time, tried again syncEvery later; a file let go of
// meanwhile had its last sync (letGo).
func (c *Cache) sync(f *File, at time.Time) {
	now := time.Now()
	f.synced.Store(now.UnixNano())
	if err := c.repl.Sync(context.Background(), f.Path); err != nil {
		c.q.put(f.ID, at, time.Now().Add(syncEvery), true)
	}
}

// ship ships f, held by the caller and not watched, without a take-up if
// replication can; false: it must be taken up.
func (c *Cache) ship(f *File) bool {
	if c.repl == nil || f.watching() != nil {
		return false
	}
	shipped, err := c.repl.Ship(context.Background(), f.Path, f.DB)
	if err != nil {
		c.log.Warn("replication: ship", "path", f.Path, "err", err)
	}
	if shipped {
		c.ships.Add(1)
	}
	return shipped
}

// hiddenRetry is how long a replicator waits before it looks again at a
// queued person who is being deleted, restored or replaced.
const hiddenRetry = 100 * time.Millisecond
