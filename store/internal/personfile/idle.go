package personfile

import (
	"context"
	"time"
)

// DefaultWALIdle is Config.WALIdle when zero: as Litestream's own
// CheckpointInterval for the files it watches.
const DefaultWALIdle = time.Minute

// emptyIdleWALs empties, every idle/4, the WAL of each open file that
// replication does not watch, written last idle ago or more and shipped
// since (Replicator.CheckpointShipped): a file written once and left
// open kept its WAL until its close. A WAL holding a write still queued is
// left to its ship. Stops with the queue (Close).
func (c *Cache) emptyIdleWALs(idle time.Duration) {
	t := time.NewTicker(idle / 4)
	defer t.Stop()
	for {
		select {
		case <-c.q.done:
			return
		case <-t.C:
		}
		cutoff := time.Now().Add(-idle).UnixNano()
		type held struct {
			f     *File
			wrote int64
		}
		var fs []held
		c.mu.Lock()
		for e := c.lru.Front(); e != nil; e = e.Next() {
			f := e.Value.(*File)
			w := f.wrote.Load()
			if w == 0 || w > cutoff {
				continue
			}
			select {
			case <-f.ready:
			default:
				continue // still opening
			}
			if f.err != nil {
				continue
			}
			f.refs++ // held: not closed under the checkpoint
			fs = append(fs, held{f, w})
		}
		c.mu.Unlock()
		for _, h := range fs {
			f := h.f
			var err error
			if f.watching() == nil && !c.Queued(f.ID) && walSize(f.Path) > 0 {
				if _, err = c.repl.CheckpointShipped(context.Background(), f.Path, f.DB); err != nil {
					c.log.Warn("replication: checkpoint an idle file", "path", f.Path, "err", err)
				}
			}
			if err == nil {
				f.wrote.CompareAndSwap(h.wrote, 0) // unless written again meanwhile
			}
			c.Release(f)
		}
	}
}
