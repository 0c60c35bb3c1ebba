package backup

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/nah-app/nah"
)

// The watched set: a file taken up (Watch) and let go of after a last
// sync (Unwatch), and what replication records of each.

// Watch starts replicating the database at path, which was written (or
// is about to be) and which the caller has open or keeps anyone in this
// process from opening until Unwatch: every write before Watch returns is
// in its first sync, and every write after reaches the target. A failure is returned for the log; the write
// goes on locally, and the file's state says it is behind.
func (r *Replicator) Watch(ctx context.Context, path string) error {
	rel, err := r.rel(path)
	if err != nil {
		return err
	}
	r.mu.Lock()
	st := r.files[rel]
	if st == nil {
		st = &fileState{Since: time.Now()}
		r.files[rel] = st
	}
	wait := st.unwatchDone
	down := r.down
	r.mu.Unlock()
	if wait != nil {
		<-wait // its last final sync must end before it is registered again
	}
	st.op.Lock()
	defer st.op.Unlock()
	client, err := r.cfg.Target.client(rel)
	if err != nil {
		return r.failed(rel, err)
	}
	db := litestream.NewDB(path)
	db.SetMetaPath(filepath.Join(r.cfg.MetaDir, filepath.FromSlash(rel)))
	// No monitors: it is synced when written (Sync, from the store's
	// queue; syncLoop for the directory).
	db.MonitorInterval = 0
	db.BusyTimeout = 10 * time.Second
	if nah.InPeopleRel(rel) {
		// Its WAL bounded as a shipped file's (shipWALBound), not at 1,000
		// pages; the directory, one file written by every post, keeps
		// Litestream's default.
		db.MinCheckpointPageN = shipWALBound / (4096 + litestream.WALFrameHeaderSize)
	}
	rep := litestream.NewReplicaWithClient(db, &watchClient{ReplicaClient: client})
	rep.MonitorEnabled = false
	db.Replica = rep
	r.mu.Lock()
	st.shipBase = nil
	repaired := st.repaired
	r.mu.Unlock()
	// A ship's local file is written unsynced after the target's: a crash
	// may leave it torn or missing, which Litestream does not mend. With
	// the target away it is left to Litestream's own checks.
	if !repaired {
		if _, _, err := repairLocal(ctx, db.LTXLevelDir(0), client); err != nil {
			r.log.Warn("replication: repair the local state", "path", rel, "err", err)
		} else {
			r.mu.Lock()
			st.repaired = true
			r.mu.Unlock()
		}
	}
	if err := resumeCheck(ctx, db); err != nil {
		return r.failed(rel, err)
	}
	if err := r.ls.RegisterDB(db); err != nil {
		return r.failed(rel, err)
	}
	r.mu.Lock()
	st.Watched = true
	r.mu.Unlock()
	if down != nil {
		// No post waits on a failing target: the file is registered (all
		// local) without the first sync, which the catch-up loop makes once
		// the target answers. Until then it is behind.
		return r.failed(rel, fmt.Errorf("target failing: %w", down))
	}
	// Syncing now sets the file up (a snapshot if it changed while nobody
	// watched): a file written and let go of before would leave the write
	// out of the replica, no error said. The upload is the next Sync's
	// (the store queues the file for it), so that a take-up does not wait
	// for it.
	sctx, cancel := context.WithTimeout(ctx, watchTimeout)
	defer cancel()
	if _, err := r.ls.SyncDB(sctx, path, false); err != nil {
		r.setDown(err)
		return r.failed(rel, err)
	}
	r.mu.Lock()
	st.Watched, st.Err = true, ""
	r.mu.Unlock()
	return nil
}

func (r *Replicator) failed(rel string, err error) error {
	r.mu.Lock()
	if st := r.files[rel]; st != nil {
		st.Err, st.repaired = err.Error(), false
	}
	r.mu.Unlock()
	return fmt.Errorf("replicate %s: %w", rel, err)
}

// Unwatch stops replicating the database at path, after a last sync. The
// caller must have closed its own handles on the file first: Litestream's
// close drops the process's locks on it.
func (r *Replicator) Unwatch(path string) error {
	rel, err := r.rel(path)
	if err != nil {
		return err
	}
	db := r.ls.FindDB(path)
	if db == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if st := r.files[rel]; st != nil && st.Err != "" {
			// Its Watch failed before Litestream had it: nothing of what
			// was written since reached the target.
			return fmt.Errorf("replicate %s: never watched: %s", rel, st.Err)
		}
		return nil
	}
	done := make(chan struct{})
	r.mu.Lock()
	st := r.files[rel]
	if st == nil { // registered by someone else than Watch: keep its state from now
		st = &fileState{Since: time.Now()}
		r.files[rel] = st
	}
	st.unwatchDone = done
	r.mu.Unlock()
	defer close(done)
	st.op.Lock()
	defer st.op.Unlock()

	r.record(rel, db)
	timeout := unwatchTimeout
	if r.TargetErr() != nil {
		timeout = downUnwatchTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err = r.ls.UnregisterDB(ctx, path)
	if err != nil {
		r.setDown(err)
	}
	if db.Replica != nil {
		if c, ok := db.Replica.Client.(*watchClient); ok {
			c.letGo()
		}
	}
	r.mu.Lock()
	// Shipped by the last sync, or behind with its error: the catch-up
	// loop brings it back.
	st.Watched, st.Unwatched = false, time.Now()
	if db.Replica != nil {
		st.Replicated = uint64(db.Replica.Pos().TXID)
	}
	if err != nil {
		st.Err, st.repaired = err.Error(), false
	} else if st.Replicated >= st.TXID && !db.LastSuccessfulSyncAt().IsZero() {
		// A file registered while the target failed and closed before
		// Litestream set it up had no last sync at all: it stays behind
		// for the catch-up loop.
		st.Err = ""
		st.LastSync = time.Now()
	}
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("replicate %s: final sync: %w", rel, err)
	}
	if err := r.pruneLevel0(rel, st, 0); err != nil {
		r.log.Warn("replication: prune the local state", "path", rel, "err", err)
	}
	return nil
}

// drop forgets the state of a file that is not watched (its person was
// deleted): it leaves the Backups page and the catch-up loop.
func (r *Replicator) drop(rel string) {
	r.mu.Lock()
	if st := r.files[rel]; st != nil && !st.Watched {
		delete(r.files, rel)
	}
	r.mu.Unlock()
}

// record copies a watched file's positions into its state.
func (r *Replicator) record(rel string, db *litestream.DB) {
	pos, err := db.Pos()
	var rpos uint64
	if db.Replica != nil {
		rpos = uint64(db.Replica.Pos().TXID)
	}
	last := db.LastSuccessfulSyncAt()
	diag := db.SyncDiagnostic()
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.files[rel]
	if st == nil {
		return
	}
	if err == nil {
		st.TXID = uint64(pos.TXID)
	}
	st.Replicated = rpos
	if !last.IsZero() {
		st.LastSync = last
	}
	// A file Litestream has not set up yet (its first sync failed: the
	// target was away) has no position at all, which is not in step.
	if diag.Error != "" {
		st.Err, st.repaired = diag.Error, false
	} else if err == nil && pos.TXID > 0 && rpos >= st.TXID {
		st.Err = ""
	}
}
