package personfile

// How a file's close goes. Three questions decide it, each asked once:
//
//   - leaving: the file leaves for good and replication does not watch it
//     (evicted, or closed by the shutdown). Its queued writes are shipped
//     first, and its WAL is emptied through replication before the close,
//     unless kept.
//   - keepWAL: a leaving file evicted while the server runs, with a small
//     WAL (keptWAL), is closed without a checkpoint; the next open reads
//     the WAL back.
//   - watched: replication watches it, and lets go of it after the close
//     (letGo); its WAL is dealt with then (leftWAL).
//
// A file dropped, hidden or forgotten while not watched is neither: its
// close checkpoints as SQLite's last close does.

// keptWAL is the largest WAL an evicted file's close leaves as it is,
// with its -shm, for the next open to read back (walIndexRecover reads
// every frame), rather than checkpoint and unlink both and have the next
// open make them again. 128 KiB is ~32 frames, about eight posts. A kept
// WAL also lets a ship carry on from its frames instead of a take-up.
// Larger ones, and every one at shutdown, are checkpointed.
const keptWAL = 128 << 10

// closeFile closes f's database and then tells replication: see above. A
// watched file's WAL cannot be checkpointed by our close (Litestream holds
// a read transaction on it) and outlives Litestream's close. A WAL left is
// emptied at shutdown.
func (c *Cache) closeFile(f *File) {
	c.closes.Add(1)
	final := c.Closed()
	watched := f.watching()
	leaving := (f.evicted || final) && watched == nil
	if leaving {
		c.shipClosing(f)
	}
	keepWAL := leaving && !final && c.keepsWAL(f)
	if leaving && !keepWAL {
		// Emptied by replication rather than by the close, so that the
		// next ship carries on from the next WAL (Replicator.Checkpoint).
		c.checkpointOpen(f)
	}
	c.closeDB(f, keepWAL)
	if watched != nil {
		c.letGo(f, watched, final)
	} else {
		// Left for the shutdown, or our close was the last and SQLite
		// checkpointed it.
		c.wal.set(f.Path, keepWAL)
	}
	c.doneClosing(f)
}

// shipClosing ships f, leaving and about to close, if it waits for a
// replicator: now, while it is open, so that the close's checkpoint finds
// its WAL shipped (checkpointOpen); the shutdown's drain would take it up.
// A replicator would open it again, and once more files waited than the
// cache holds every ship did and the queue grew without end (people-10k's
// burst, bench/THRESHOLDS.md).
func (c *Cache) shipClosing(f *File) {
	at, queued := c.q.claim(f.ID)
	if !queued {
		return
	}
	if c.ship(f) {
		c.q.unmark(f.ID)
	} else {
		c.q.putBack(f.ID, at) // to be taken up
	}
}

// keepsWAL says whether f's WAL is small enough to be kept by its close
// (keptWAL), when the store can close a handle without a checkpoint.
func (c *Cache) keepsWAL(f *File) bool {
	return c.cfg.CloseKeepingWAL != nil && walSize(f.Path) <= keptWAL
}

// closeDB closes f's handle: keepWAL without the checkpoint of its last
// close, else with it (unless replication holds the WAL).
func (c *Cache) closeDB(f *File, keepWAL bool) {
	var err error
	if keepWAL {
		err = c.cfg.CloseKeepingWAL(f.DB)
	} else {
		err = f.DB.Close()
	}
	if err != nil {
		// The data is safe in the WAL; the next open recovers it.
		c.log.Error("close person file", "path", f.Path, "err", err)
	}
}

// letGo has replication let go of f, watched and just closed, once its
// watch is done (a file let go before Litestream set it up gets no last
// sync), after a last sync: its WAL is emptied if large or the cache is
// closing (final; leftWAL), it leaves the queue, and its mark goes if the
// sync succeeded.
func (c *Cache) letGo(f *File, watched <-chan struct{}, final bool) {
	<-watched
	synced := true
	if err := c.repl.Unwatch(f.Path); err != nil {
		c.log.Warn("replication: last sync", "path", f.Path, "err", err)
		synced = false
	}
	c.leftWAL(f.Path, final)
	// Its writes queued went with the last sync, or are behind with its
	// error: the catch-up loop brings it back, and its mark stays.
	c.q.claim(f.ID)
	if synced {
		c.q.unmark(f.ID)
	}
}

// doneClosing ends f's close: reopens of the file waiting for it go on.
func (c *Cache) doneClosing(f *File) {
	if c.cfg.AfterClose != nil {
		c.cfg.AfterClose(f.Path)
	}
	close(f.closed)
	c.mu.Lock()
	if c.closing[f.ID] == f {
		delete(c.closing, f.ID)
	}
	c.mu.Unlock()
}
