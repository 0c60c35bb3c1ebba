package backup

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/nah-app/nah"
)

// Shipping the watched files: the writes the store reports (Wrote), the
// syncers that ship them every syncEvery, and a sync on demand.

// Wrote records that the database at path was just written: if it is
// watched, the syncers ship it within syncEvery (else the store's queue
// has it taken up, which ships it).
func (r *Replicator) Wrote(path string) {
	rel, err := r.rel(path)
	if err != nil {
		return
	}
	r.mu.Lock()
	if _, ok := r.dirty[rel]; !ok {
		r.dirty[rel] = time.Now()
	}
	r.mu.Unlock()
}

// syncLoop ships, every syncEvery, the watched files written since their
// last sync, oldest write first, syncers at a time; and the directory,
// which the store writes without telling. While the target is failing it
// waits: the catch-up loop probes it and catches the files up.
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
		type item struct {
			rel   string
			since time.Time
		}
		r.mu.Lock()
		batch := make([]item, 0, len(r.dirty)+1)
		for rel, since := range r.dirty {
			batch = append(batch, item{rel, since})
		}
		r.mu.Unlock()
		sort.Slice(batch, func(i, j int) bool { return batch[i].since.Before(batch[j].since) })
		for _, db := range r.ls.DBs() {
			if rel, err := r.rel(db.Path()); err == nil && !nah.InPeopleRel(rel) {
				batch = append(batch, item{rel: rel})
			}
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, syncers)
		for _, it := range batch {
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
				if err := r.syncRel(ctx, it.rel); err != nil {
					r.log.Warn("replication: sync", "path", it.rel, "err", err)
				}
			})
		}
		wg.Wait()
	}
}

// syncRel ships watched file rel's changes and waits for the target. The
// file's pending writes are taken out of dirty first, and put back (with
// the older time) if the sync fails; a file not watched has none.
func (r *Replicator) syncRel(ctx context.Context, rel string) error {
	path := filepath.Join(r.cfg.DataDir, filepath.FromSlash(rel))
	r.mu.Lock()
	st := r.files[rel]
	since, pending := r.dirty[rel]
	delete(r.dirty, rel)
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
		if pending {
			r.mu.Lock()
			if later, ok := r.dirty[rel]; !ok || since.Before(later) {
				r.dirty[rel] = since
			}
			r.mu.Unlock()
		}
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

// Sync ships one watched file's changes now and waits for the target; a
// file not watched has nothing waiting.
func (r *Replicator) Sync(ctx context.Context, path string) error {
	rel, err := r.rel(path)
	if err != nil {
		return err
	}
	return r.syncRel(ctx, rel)
}
