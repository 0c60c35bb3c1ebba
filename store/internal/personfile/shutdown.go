package personfile

import "sync"

// Close closes every file; called once at shutdown, after the HTTP server
// has finished its requests. Files still in use close with their last
// user. Then the files still queued are taken up and let go of at once,
// and every WAL left behind is emptied: none with anything in it stays
// after a clean stop.
func (c *Cache) Close() {
	c.mu.Lock()
	c.closed = true
	var idle []*File
	for e := c.lru.Front(); e != nil; e = e.Next() {
		f := e.Value.(*File)
		f.elem = nil
		// In use or not, it is closing: until its last user closes it, the
		// drain below must not let replication touch it.
		c.closing[f.ID] = f
		if f.refs == 0 {
			idle = append(idle, f)
		}
	}
	c.lru.Init()
	c.byID = make(map[string]*File)
	c.watched = 0
	c.mu.Unlock()
	c.q.close() // the replicators stop; what they left is replicated below
	// Each close checkpoints and fsyncs; a few at a time use both cores
	// without queueing a thousand fsyncs at once.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, f := range idle {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c.closeFile(f)
		})
	}
	wg.Wait()
	c.closers.Wait() // evictions still closing
	c.watchers.Wait()
	// Files written and still waiting for a replicator: every app handle is
	// closed now (or stays with a request cut off by the shutdown timeout,
	// which is skipped), so each is watched and let go of at once.
	for _, id := range c.q.take() {
		c.mu.Lock()
		ph := c.claimClosedLocked(id)
		c.mu.Unlock()
		if ph == nil {
			// In use by a request the shutdown cut off, or being deleted
			// or replaced: its marker stays for the next start.
			c.log.Warn("replication: a written file busy at shutdown is left for the next start", "person", id)
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if c.syncClosed(ph) {
				c.q.unmark(id)
			}
		})
	}
	wg.Wait()
	for _, p := range c.wal.take() {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := c.checkpointClosed(p); err != nil {
				c.log.Warn("checkpoint at shutdown", "path", p, "err", err)
			}
		})
	}
	wg.Wait()
	c.q.flush() // the journal holds what is left: files busy at the stop
}
