package backup

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/nah-app/nah"
)

// Syncing the watched files: the store's queue has each written person
// file synced (Sync) at most once a second; the loop here syncs what the
// store writes without telling (the directory); and a sync on demand.

// syncLoop ships, every syncEvery, each watched file that is not a
// person's (the directory, which the store writes without telling),
// syncers at a time. While the target is failing it waits: the catch-up
// loop probes it and catches the files up.
func (r *Replicator) syncLoop() {
	t := time.NewTicker(syncEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		if r.TargetErr() != nil {
			continue
		}
		var batch []string
		for _, db := range r.ls.DBs() {
			if rel, err := r.rel(db.Path()); err == nil && !nah.InPeopleRel(rel) {
				batch = append(batch, rel)
			}
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, syncers)
		for _, rel := range batch {
			select {
			case <-r.stop:
				wg.Wait()
				return
			case sem <- struct{}{}:
			}
			wg.Go(func() {
				defer func() { <-sem }()
				ctx, cancel := context.WithTimeout(context.Background(), unwatchTimeout)
				defer cancel()
				if err := r.syncRel(ctx, rel); err != nil {
					r.log.Warn("replication: sync", "path", rel, "err", err)
				}
			})
		}
		wg.Wait()
	}
}

// syncRel ships watched file rel's changes and waits for the target; a
// file not watched has nothing to ship.
func (r *Replicator) syncRel(ctx context.Context, rel string) error {
	path := filepath.Join(r.cfg.DataDir, filepath.FromSlash(rel))
	r.mu.Lock()
	st := r.files[rel]
	r.mu.Unlock()
	if st == nil {
		return nil
	}
	st.op.Lock()
	defer st.op.Unlock()
	if r.ls.FindDB(path) == nil {
		return nil // let go of after a last sync, which shipped the writes
	}
	_, err := r.ls.SyncDB(ctx, path, true)
	if err != nil {
		r.setDown(err)
		return r.failed(rel, err)
	}
	r.mu.Lock()
	st.Err = ""
	r.mu.Unlock()
	r.historyGrew(rel)
	return nil
}

// SyncAll ships every watched file's changes now and waits for the target.
// The first file the target fails stops it: Litestream's client retries
// for seconds, and a target that is down would otherwise hold the caller
// that long for every file.
func (r *Replicator) SyncAll(ctx context.Context) error {
	dbs := r.ls.DBs()
	for i, db := range dbs {
		rel, err := r.rel(db.Path())
		if err != nil {
			continue
		}
		if err := r.syncRel(ctx, rel); err != nil {
			if left := len(dbs) - i - 1; left > 0 {
				return fmt.Errorf("%w (%d more files not tried)", err, left)
			}
			return err
		}
	}
	r.setDown(nil) // every file reached the target
	return nil
}

// Sync ships one watched file's changes now and waits for the target, at
// most unwatchTimeout: the store's queue asks it of each written file
// (store.Replicator). While the target is failing it fails at once, so
// that the queue keeps the write, with its time, and waits for the
// catch-up loop's probe rather than for Litestream's retries.
func (r *Replicator) Sync(ctx context.Context, path string) error {
	if down := r.TargetErr(); down != nil {
		return fmt.Errorf("replication: target failing: %w", down)
	}
	ctx, cancel := context.WithTimeout(ctx, unwatchTimeout)
	defer cancel()
	err := r.syncPath(ctx, path)
	if err != nil {
		r.log.Warn("replication: sync", "path", path, "err", err)
	}
	return err
}

// syncSource is syncPath of file rel, telling files (if any) once it
// succeeded, so that the store's queue lets go of the writes it shipped.
func (r *Replicator) syncSource(ctx context.Context, files Files, rel string) error {
	began := time.Now()
	err := r.syncPath(ctx, r.path(rel))
	if err == nil && files != nil {
		files.ReplicationSynced(rel, began)
	}
	return err
}

// syncPath ships one watched file's changes now and waits for the target,
// failing or not: the catch-up loop, "Sync now" and the drill; a file not
// watched has nothing waiting.
func (r *Replicator) syncPath(ctx context.Context, path string) error {
	rel, err := r.rel(path)
	if err != nil {
		return err
	}
	return r.syncRel(ctx, rel)
}
