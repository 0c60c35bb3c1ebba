package backup

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"

	"github.com/nah-app/nah"
)

// What one watched file costs, measured under this project's SQLite
// settings (../shared/notes/litestream-nah.md): Litestream keeps its own
// connection, a raw descriptor, a long read transaction and an LTX encoder
// per file: ~384 KiB settled, ~404 KiB at peak, 2 goroutines (its monitors
// are off: syncLoop) and 5 descriptors (TestReplicationMemoryPerFile). store/sqlite.go adds it to the open-file arithmetic; the
// watched set is bounded by Config.MaxFiles.
const PerFileBytes = 404 << 10

// Timing of the replication of one file.
const (
	// syncEvery is how often the syncers ship the watched files written
	// since their last sync (and the directory): a moment reaches the
	// replica within about a second of its post when nothing waits.
	syncEvery = time.Second
	// syncers is how many files are shipped at once. Litestream's own
	// per-file monitors (two goroutines ticking every second for each
	// watched file, 9 % of the server's CPU under 16 writers,
	// bench/THRESHOLDS.md) are off: a file is synced only when written.
	syncers = 2
	// l0CheckInterval: Litestream lists every watched file's level 0 and 1
	// on the replica at this interval (upstream issue 1468), LIST calls that
	// cost money on S3 and find nothing new on an idle file.
	l0CheckInterval = 30 * time.Minute
	// unwatchTimeout bounds the final sync of a file that leaves the
	// watched set: the next open of that file waits for it, so a target
	// that is down must not hold it longer. A file whose last sync failed
	// is brought back later (Backups.catchUp).
	unwatchTimeout = 5 * time.Second
	// watchTimeout bounds the first sync of a file entering the watched
	// set, which a replicator (and a reopen of a file it takes up while
	// closed) waits for: Litestream checks the target there (a LIST), and
	// with S3 away its client retries for about seven seconds.
	watchTimeout = 2 * time.Second
	// downUnwatchTimeout bounds the last sync of a file leaving the watched
	// set while the target is failing: enough for the local part (the WAL
	// into Litestream's own files), none for retries a reopen would wait for.
	downUnwatchTimeout = 250 * time.Millisecond
)

// Config is what replication needs from the server's configuration.
type Config struct {
	Target  *Target
	DataDir string // the data directory the replicated files live in
	// MetaDir keeps Litestream's local state (LTX files not yet shipped),
	// one folder per database; outside the people/ folders so exports and
	// deletes of a person never meet it.
	MetaDir string
	Logger  *slog.Logger
	// Retention is how far back a restore to a time can go
	// (DefaultRetention when zero): retention.go.
	Retention time.Duration
}

// Replicator watches files and ships their changes to the target.
type Replicator struct {
	cfg Config
	ls  *litestream.Store
	log *slog.Logger

	started time.Time

	mu    sync.Mutex
	files map[string]*fileState // by path relative to the data directory
	// down is the target's failure as the last call that waited on it saw
	// it (nil: working). While it is set no post waits on the target: files
	// entering the watched set wait outside it, and files leaving it get no
	// retries. Probe, which the catch-up loop calls, clears it.
	down error
	// marked: the target's mark (wiped.go) was there or written in this
	// run; afresh is the files still to be started afresh since it was
	// found gone (bounded by the databases).
	marked  bool
	afresh  map[string]bool
	emptied time.Time // when it was found gone, until every file is in step again
	// dirty is the watched files written since their last sync began, with
	// the time of the oldest such write: what the syncers ship next, and
	// the lag they owe. Bounded by the watched set.
	dirty map[string]time.Time

	stop      chan struct{}
	closeOnce sync.Once
	stopped   sync.WaitGroup

	// The retention policy (retention.go): retainMu is held by a visit of
	// one file and by Forget, so that a snapshot never brings back a
	// history being deleted; retainDue is when each file is next looked at
	// (bounded by the files on the target).
	policy      retention
	retainMu    sync.Mutex
	retainDueMu sync.Mutex
	retainDue   map[string]time.Time
	// retainListed: every file on the target was made due once in this run.
	retainListed bool
	// Counted for the metrics: LTX files the policy deleted, snapshots it
	// wrote, visits that failed.
	retained, snapshots, retainErrs atomic.Int64
}

// fileState is what the Backups page shows of one file. The map is bounded
// by the number of databases (people are made by the server, not named by
// clients).
type fileState struct {
	Watched     bool
	TXID        uint64 // local position
	Replicated  uint64 // position on the target
	LastSync    time.Time
	Err         string
	Since       time.Time // when it was first watched in this run
	Unwatched   time.Time
	unwatchDone chan struct{} // closed when the last Unwatch finished
	// op is held by whatever calls Litestream on the file (register, sync,
	// let go): a sync after Litestream closed the file would open it again.
	op    sync.Mutex
	ships int // shipped without a take-up (Ship), this run
	// shipBase is the header of the newest LTX file, shipped in this run
	// and not watched since: the next ship carries on from it unread.
	shipBase *ltx.Header
	// repaired: repairLocal has checked the local state in this run, and
	// nothing failed since: a crash (a run before) or a failed rename
	// leaves it torn or missing, and a target wiped while it was away
	// (the local state keeps only its newest file) leaves Litestream
	// nothing to send it again from.
	repaired bool
}

// Open starts replication; the target must be Init'ed. Nothing is watched
// until Watch.
func Open(ctx context.Context, cfg Config) (*Replicator, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	policy := newRetention(cfg.Retention)
	ls := litestream.NewStore(nil, policy.levels())
	ls.L0RetentionCheckInterval = l0CheckInterval
	// Litestream deletes only level-0 files compacted into level 1, as the
	// policy does, but for a history's first (watchClient, which Watch
	// gives it); its snapshots are kept (retention.go decides).
	ls.L0Retention = policy.l0Keep
	ls.SnapshotRetention = 100 * 365 * 24 * time.Hour
	// Litestream says something at INFO for every file it opens and every
	// compaction: under churn that is a line a post. Its warnings and
	// errors stay.
	quiet := slog.New(warnOnly{cfg.Logger.Handler()})
	// One try at the last sync of a file that leaves the watched set, within
	// unwatchTimeout: retrying for long would hold the next open of the file.
	ls.ShutdownSyncTimeout = 0
	ls.Logger = quiet.With("subsystem", "replication")
	if err := ls.Open(ctx); err != nil {
		return nil, fmt.Errorf("replication: %w", err)
	}
	r := &Replicator{cfg: cfg, ls: ls, log: ls.Logger, started: time.Now(), files: make(map[string]*fileState),
		dirty: make(map[string]time.Time), stop: make(chan struct{}), policy: policy, retainDue: make(map[string]time.Time)}
	if _, err := r.CheckTarget(ctx, nil); err != nil {
		r.log.Warn("replication: mark the target", "err", err)
	}
	r.stopped.Go(r.syncLoop)
	r.stopped.Go(r.retainLoop)
	return r, nil
}

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
			if rel, err := r.rel(db.Path()); err == nil && !strings.HasPrefix(rel, "people/") {
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

// rel is path's place under the data directory, slash-separated.
func (r *Replicator) rel(path string) (string, error) {
	rel, err := filepath.Rel(r.cfg.DataDir, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("replication: %s is outside the data directory", path)
	}
	return filepath.ToSlash(rel), nil
}

// path is rel's path on this machine.
func (r *Replicator) path(rel string) string {
	return filepath.Join(r.cfg.DataDir, filepath.FromSlash(rel))
}

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
	// No monitors: the syncers sync it when it is written (syncLoop).
	db.MonitorInterval = 0
	db.BusyTimeout = 10 * time.Second
	if strings.HasPrefix(rel, "people/") {
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
	// out of the replica, no error said. The upload is the syncers' (the
	// file is pending from now), so that a take-up does not wait for it.
	sctx, cancel := context.WithTimeout(ctx, watchTimeout)
	defer cancel()
	if _, err := r.ls.SyncDB(sctx, path, false); err != nil {
		r.setDown(err)
		return r.failed(rel, err)
	}
	r.mu.Lock()
	st.Watched, st.Err = true, ""
	if _, ok := r.dirty[rel]; !ok {
		r.dirty[rel] = time.Now()
	}
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
	delete(r.dirty, rel)
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

// setDown records that a call on the target failed.
func (r *Replicator) setDown(err error) {
	r.mu.Lock()
	r.down = err
	r.mu.Unlock()
}

// TargetErr is the target's failure while it is taken to be failing (a
// watch or a last sync failed, or Probe did), nil while it works.
func (r *Replicator) TargetErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down
}

// Probe checks that the target answers and can be written, and records
// what it found for Watch, Unwatch and TargetErr.
func (r *Replicator) Probe(ctx context.Context) error {
	err := r.cfg.Target.Check(ctx)
	r.setDown(err)
	return err
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

// FileStatus is one database's replication as the Backups page shows it.
type FileStatus struct {
	Path       string // under the data directory, slash-separated
	Watched    bool
	TXID       uint64 // local transaction position
	Replicated uint64 // the target's
	LastSync   time.Time
	Since      time.Time // first watched in this run
	Err        string
	Pending    time.Time // the oldest write the syncers have yet to ship (zero: none)
}

// Behind says whether the target lacks some of the file's transactions.
func (f FileStatus) Behind() bool {
	return f.Replicated < f.TXID || f.Err != "" || !f.Pending.IsZero()
}

// Lag is the age of the file's oldest write the target lacks when the
// syncers know it (Pending), else how long ago the file was last in step
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
func (r *Replicator) Status() []FileStatus {
	var out []FileStatus
	r.EachStatus(func(f FileStatus) { out = append(out, f) })
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
// /healthz and /metrics, and Status's list and sort of 10,000 files were
// 8-9 % of the server's CPU under the bench's polls (people-10k). fn runs
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
	return FileStatus{Path: rel, Watched: st.Watched, TXID: st.TXID, Replicated: st.Replicated, LastSync: st.LastSync, Since: st.Since, Err: st.Err, Pending: r.dirty[rel]}
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

// Retention is how far back a restore to a time reaches through the
// history (NAH_RETENTION): retention.go.
func (r *Replicator) Retention() time.Duration { return newRetention(r.cfg.Retention).window }

// Target is where the replicas go.
func (r *Replicator) Target() *Target { return r.cfg.Target }

// Close stops replication: every file still watched gets a last sync. The
// caller must have closed its own handles on them first.
func (r *Replicator) Close(ctx context.Context) error {
	r.closeOnce.Do(func() { close(r.stop) })
	r.stopped.Wait()
	for _, db := range r.ls.DBs() {
		if err := r.Unwatch(db.Path()); err != nil {
			r.log.Warn("replication: last sync", "err", err)
		}
	}
	return r.ls.Close(ctx)
}

// warnOnly passes on a handler's records of level Warn and above.
type warnOnly struct{ slog.Handler }

func (h warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

func (h warnOnly) WithAttrs(as []slog.Attr) slog.Handler { return warnOnly{h.Handler.WithAttrs(as)} }

func (h warnOnly) WithGroup(name string) slog.Handler { return warnOnly{h.Handler.WithGroup(name)} }

// Forget removes what replication holds of database rel, which was
// deleted for good (a purged person): its local state and its history on
// the target. The sweeps that hold it expire with them (NAH_SWEEP_KEEP).
// Only a database path of the layout is forgotten: nothing else is removed.
func (r *Replicator) Forget(ctx context.Context, rel string) error {
	if !nah.ValidDatabaseRel(rel) {
		return fmt.Errorf("replication: forget %q: not a database of nah", rel)
	}
	if r.ls.FindDB(r.path(rel)) != nil {
		return fmt.Errorf("replication: %s is still watched", rel)
	}
	r.retainMu.Lock()
	defer r.retainMu.Unlock()
	r.retainDueMu.Lock()
	delete(r.retainDue, rel)
	r.retainDueMu.Unlock()
	r.mu.Lock()
	delete(r.files, rel)
	r.mu.Unlock()
	if err := os.RemoveAll(r.metaPath(rel)); err != nil {
		return err
	}
	client, err := r.cfg.Target.client(rel)
	if err != nil {
		return err
	}
	if err := client.DeleteAll(ctx); err != nil {
		return err
	}
	id := nah.PersonOfRel(rel)
	if id == "" {
		return nil
	}
	// A person's folder goes whole: their media's mirror, and the folders
	// left empty, so that not even their id stays.
	os.Remove(r.metaPath(nah.PersonDirRel(id)))
	if err := r.cfg.Target.store().remove(ctx, mediaPrefix+"/"+nah.PersonDirRel(id)); err != nil {
		return err
	}
	if d := r.cfg.Target.Dir(); d != "" {
		os.Remove(filepath.Join(d, filepath.FromSlash(nah.PersonDirRel(id))))
	}
	return nil
}

// fileErr is file rel's last error, if any.
func (r *Replicator) fileErr(rel string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.files[rel]; st != nil {
		return st.Err
	}
	return ""
}
