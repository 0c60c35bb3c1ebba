package store

import (
	"context"
	"database/sql"
	"time"
)

// flushInterval is how often newest-moment times reach the directory. A post
// does not wait for it (one fsync per post is enough); the directory's value
// is only a hint loaded at start, and the file is re-read after StaleAfter.
const flushInterval = time.Second

// maxFlushWait bounds the backoff of a failing flush. A flush that fails (a
// full disk, say) is retried, and logged, 1, 2, 4... seconds later up to
// this, instead of every second; the times wait in memory meanwhile, and
// a write that goes through once there is space wakes the flush at once.
const maxFlushWait = 5 * time.Minute

func (s *Store) flushLoop() {
	defer close(s.stopped)
	wait, failures := flushInterval, 0
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.wake:
			if failures == 0 {
				continue // nothing is waiting on a retry; the timer still runs
			}
		case <-s.stop:
			return
		}
		if err := s.flushDirty(context.Background()); err != nil {
			failures++
			wait = min(2*wait, maxFlushWait)
			s.log.Error("flush newest times", "err", err, "failures", failures, "next_try_in", wait)
		} else {
			if failures > 0 {
				s.log.Info("flush newest times recovered", "failures", failures)
			}
			wait, failures = flushInterval, 0
		}
		t.Reset(wait)
	}
}

// dirtyPerson is what a person's directory row is owed: a newer newest
// time and a change in their moment count.
type dirtyPerson struct {
	newest int64
	delta  int64
}

func (s *Store) markDirty(id string, newest, delta int64) {
	s.dirtyMu.Lock()
	d := s.dirty[id]
	d.newest = max(d.newest, newest)
	d.delta += delta
	s.dirty[id] = d
	s.dirtyMu.Unlock()
}

// flushDirty writes pending newest times and count changes in one
// transaction; on failure they are kept for the next try.
func (s *Store) flushDirty(ctx context.Context) error {
	s.dirtyMu.Lock()
	batch := s.dirty
	if len(batch) == 0 {
		s.dirtyMu.Unlock()
		return nil
	}
	s.dirty = make(map[string]dirtyPerson)
	s.dirtyMu.Unlock()
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		// Prepared once a flush: under the 16-writer burst a flush updates a
		// row for each person who posted, and parsing the update for each
		// was most of the flush's CPU (bench/THRESHOLDS.md).
		stmt, err := tx.PrepareContext(ctx, `UPDATE people SET newest_at = max(newest_at, ?), moments = max(0, moments + ?) WHERE id = ?`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for id, d := range batch {
			if _, err := stmt.ExecContext(ctx, d.newest, d.delta, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		for id, d := range batch {
			s.markDirty(id, d.newest, d.delta)
		}
	}
	return err
}
