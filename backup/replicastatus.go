package backup

import (
	"sort"
	"time"
)

// What the Backups page, health and the drill read of replication: each
// file's position, lag and last error.

// FileStatus is one database's replication as the Backups page shows it.
type FileStatus struct {
	Path       string // under the data directory, slash-separated
	Watched    bool
	TXID       uint64 // local transaction position
	Replicated uint64 // the target's
	LastSync   time.Time
	Since      time.Time // first watched in this run
	Err        string
	Pending    time.Time // since when it waits in the store's queue (zero: not queued); Backups.Status fills it
}

// Behind says whether the target lacks some of the file's transactions.
func (f FileStatus) Behind() bool {
	return f.Replicated < f.TXID || f.Err != "" || !f.Pending.IsZero()
}

// Lag is the age of the file's oldest write the target lacks when the
// store's queue knows it (Pending), else how long ago the file was last in step
// with the target (zero if it is in step now), or since it was first
// watched if it never was.
func (f FileStatus) Lag(now time.Time) time.Duration {
	switch {
	case !f.Behind():
		return 0
	case !f.Pending.IsZero():
		return now.Sub(f.Pending)
	case f.LastSync.IsZero():
		return now.Sub(f.Since)
	}
	return now.Sub(f.LastSync)
}

// Status is the state of every file this run has replicated, worst first:
// behind with an error, behind, then by oldest sync.
// Pending stays zero: Backups.Status has it.
func (r *Replicator) Status() []FileStatus { return r.status(nil) }

// status is Status, with each file's Pending from pending (nil: none).
func (r *Replicator) status(pending func(rel string) (time.Time, bool)) []FileStatus {
	var out []FileStatus
	r.EachStatus(func(f FileStatus) {
		if pending != nil {
			f.Pending, _ = pending(f.Path)
		}
		out = append(out, f)
	})
	rank := func(f FileStatus) int {
		switch {
		case f.Err != "":
			return 0
		case f.Behind():
			return 1
		}
		return 2
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		if !a.LastSync.Equal(b.LastSync) {
			return a.LastSync.Before(b.LastSync)
		}
		return a.Path < b.Path
	})
	return out
}

// EachStatus calls fn with the state of every file replication has, in
// no order and without a copy of the list: health asks for it on each
// /healthz and /metrics, and Status's list and sort of every file was a
// visible share of the server's CPU under the bench's polls (people-10k,
// bench/THRESHOLDS.md). fn runs
// under the replicator's lock and must not call back into it.
func (r *Replicator) EachStatus(fn func(FileStatus)) {
	r.recordWatched()
	r.mu.Lock()
	defer r.mu.Unlock()
	for rel, st := range r.files {
		fn(r.statusLocked(rel, st))
	}
}

// StatusOf is the state of file rel, and whether replication has it.
func (r *Replicator) StatusOf(rel string) (FileStatus, bool) {
	r.recordWatched()
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.files[rel]
	if st == nil {
		return FileStatus{}, false
	}
	return r.statusLocked(rel, st), true
}

func (r *Replicator) statusLocked(rel string, st *fileState) FileStatus {
	return FileStatus{Path: rel, Watched: st.Watched, TXID: st.TXID, Replicated: st.Replicated, LastSync: st.LastSync, Since: st.Since, Err: st.Err}
}

// recordWatched brings the watched files' state up to date from Litestream.
func (r *Replicator) recordWatched() {
	for _, db := range r.ls.DBs() {
		if rel, err := r.rel(db.Path()); err == nil {
			r.record(rel, db)
		}
	}
}

// Watched is the number of files watched now.
func (r *Replicator) Watched() int { return len(r.ls.DBs()) }
