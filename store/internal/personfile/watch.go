package personfile

import (
	"context"
	"time"
)

// Watch has replication watch f (held by the caller, written or about to
// be), first letting go the least recently used idle watched file if the set
// is full. It runs off the request path and syncs once; closeFile waits for
// it, since a file let go before Litestream set it up gets no last sync.
func (c *Cache) Watch(ctx context.Context, f *File) { c.watchFile(ctx, f, false) }

// WatchWait is Watch, returning once replication has the file (its first
// sync done): for a swapped file, whose restore is done only then. A watch
// of f already under way (a replicator's) is waited for.
func (c *Cache) WatchWait(ctx context.Context, f *File) {
	c.watchFile(ctx, f, true)
	if w := f.watching(); w != nil {
		select {
		case <-w:
		case <-ctx.Done():
		}
	}
}

// watchFile is Watch; with wait set the Watch runs in the caller's
// goroutine (a replicator's), which is then paced by it.
func (c *Cache) watchFile(ctx context.Context, f *File, wait bool) {
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
			c.log.Warn("replication: watch", "path", f.Path, "err", err)
		}
	}
	if wait {
		run()
		return
	}
	c.watchers.Go(run)
}

// replicators is how many files replication ships or takes up at once
// for posts (replicate); extraReplicators more join while the oldest
// queued write is behindLag old, to pull the lag back under its 5 s
// promise, which a loaded run without them missed. On people-1k they cost
// no measurable posts/s and cut the mixed burst's worst lag
// (bench/THRESHOLDS.md).
const (
	replicators      = 2
	extraReplicators = 2
	behindLag        = 2500 * time.Millisecond
)

// Wrote records that f, which the caller holds, was just written. A file
// that replication watches is told to it (Replicator.Wrote), which ships it
// within a second. Any other waits in the queue for a replicator, so that
// a post never pays for taking a file up: when a write took its file up
// itself, most posts under the bench's writers waited for it (people-1k,
// bench/THRESHOLDS.md).
// A file written again while it waits is taken up once.
func (c *Cache) Wrote(f *File) {
	if c.repl == nil {
		return
	}
	f.wrote.Store(time.Now().UnixNano())
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watched != nil {
		c.repl.Wrote(f.Path)
		return
	}
	c.q.push(f.ID)
}

// replicate ships or takes up files in the queue, one at a time, until
// the cache closes (Close replicates what is left); with lag, only while
// the oldest has waited that long.
func (c *Cache) replicate(lag time.Duration) {
	for {
		id, ok := c.q.pop(lag)
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
		c.watchFile(context.Background(), f, true)
		c.Release(f)
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
