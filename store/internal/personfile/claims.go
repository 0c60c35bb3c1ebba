package personfile

import (
	"context"
	"os"
	"sync"
)

// claimClosedLocked returns a placeholder standing in the closing set for
// person id's file if nobody has it open (nor is opening, closing or
// hiding it), nil otherwise. Until the placeholder is released (syncClosed,
// releaseClaim), a reopen waits, as for any file being closed, so that
// Litestream never lets go of a file the app has open, and nothing else
// claims the file.
func (c *Cache) claimClosedLocked(id string) *File {
	if c.byID[id] != nil || c.closing[id] != nil || c.hidden[id] != nil {
		return nil
	}
	ph := &File{ID: id, closed: make(chan struct{})}
	c.closing[id] = ph
	return ph
}

// releaseClaim ends a claim of claimClosedLocked.
func (c *Cache) releaseClaim(ph *File) {
	close(ph.closed)
	c.mu.Lock()
	if c.closing[ph.ID] == ph {
		delete(c.closing, ph.ID)
	}
	c.mu.Unlock()
}

// WithClosed runs fn on the path of person id's file while nobody has it
// open and the file is claimed (claimClosedLocked), and says whether it
// did: when the file is open, or about to be, it does nothing. fn must
// leave the WAL as it found it (its connection closed without a
// checkpoint: one would move frames the queued ship has not read); a
// WAL left is emptied at shutdown.
func (c *Cache) WithClosed(id string, fn func(path string)) bool {
	p, err := c.cfg.Path(id)
	if err != nil {
		return false
	}
	c.mu.Lock()
	ph := c.claimClosedLocked(id)
	c.mu.Unlock()
	if ph == nil {
		return false
	}
	defer c.releaseClaim(ph)
	fn(p)
	if walSize(p) > 0 {
		c.wal.set(p, true)
	}
	return true
}

// syncClosed has replication take up and let go of the file of ph, a
// claim of claimClosedLocked, which it releases, and empties the WAL
// Litestream leaves: the shutdown's drain of the queue. It says whether
// the replica has the whole file (or the file is gone).
func (c *Cache) syncClosed(ph *File) bool {
	defer c.releaseClaim(ph)
	p, err := c.cfg.Path(ph.ID)
	if err != nil {
		return true
	}
	if _, err := os.Stat(p); err != nil {
		return true // gone: deleted (a restore watches it again) or purged
	}
	ok := true
	c.takeUps.Add(1)
	if err := c.repl.Watch(context.Background(), p); err != nil {
		c.log.Warn("replication: watch", "path", p, "err", err)
	}
	if err := c.repl.Unwatch(p); err != nil {
		c.log.Warn("replication: last sync", "path", p, "err", err)
		ok = false
	}
	c.leftWAL(p, true)
	return ok
}

// walSet is the files closed with their WAL left for later (watched ones
// and evicted ones, keptWAL), by path: emptied at shutdown.
type walSet struct {
	mu sync.Mutex
	m  map[string]bool
}

func (w *walSet) set(p string, left bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if left {
		w.m[p] = true
	} else {
		delete(w.m, p)
	}
}

func (w *walSet) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for p := range w.m {
		out = append(out, p)
	}
	w.m = make(map[string]bool)
	return out
}

// bigWAL is the size past which a watched file's WAL is checkpointed as
// soon as replication lets go of it, with the mark that lets the next ship
// carry on (Replicator.Checkpoint). Litestream checkpoints a watched file
// without truncating its WAL, which stays as large as a second of writes
// made it: past backup's shipWALBound (256 KiB) it is emptied here. A small
// one is left for the next open (an open reads every frame of its WAL,
// ../shared/notes/litestream-nah.md). At shutdown every WAL is emptied.
const bigWAL = 256 << 10

// leftWAL deals with the WAL of watched file p once replication let go of
// it: a large one, or any at shutdown (final), is emptied now, a small one
// is left for the next open (and emptied at shutdown).
func (c *Cache) leftWAL(p string, final bool) {
	left := !final && walSize(p) <= bigWAL
	if !left {
		if err := c.checkpointClosed(p); err != nil {
			c.log.Warn("checkpoint after replication", "path", p, "err", err)
		}
	}
	c.wal.set(p, left)
}

// checkpointOpen empties the WAL of f, open and not watched, through
// replication before its close; the close checkpoints whatever is left.
func (c *Cache) checkpointOpen(f *File) {
	if c.repl == nil || walSize(f.Path) == 0 {
		return
	}
	if err := c.repl.Checkpoint(context.Background(), f.Path, f.DB); err != nil {
		c.log.Warn("replication: checkpoint before the close", "path", f.Path, "err", err)
	}
}

// checkpointClosed empties the WAL of file p, which nobody in this
// process has open, through replication if it can, else as the store does.
func (c *Cache) checkpointClosed(p string) error {
	if c.repl != nil && walSize(p) > 0 {
		err := c.repl.Checkpoint(context.Background(), p, nil)
		if err == nil {
			return nil
		}
		c.log.Warn("replication: checkpoint", "path", p, "err", err)
	}
	return c.cfg.Checkpoint(p)
}

func walSize(p string) int64 {
	st, err := os.Stat(p + "-wal")
	if err != nil {
		return 0
	}
	return st.Size()
}
