package backup

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
	// syncEvery is how often the directory (written without telling) is
	// synced; a person's file is synced by the store's queue at most as
	// often (store.Replicator.Sync).
	syncEvery = time.Second
	// syncers is how many of those are shipped at once. Litestream's own
	// per-file monitors (two goroutines ticking every second for each
	// watched file, a visible share of the server's CPU under the bench's
	// writers, bench/THRESHOLDS.md) are off: a file is synced only when written.
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
	// emptied is shipBase when this run's own checkpoint emptied, through
	// the app's connection, a WAL that shipBase covered whole: the next
	// ship carries on from the WAL SQLite starts after it (shipNextWAL).
	// A new shipBase, or none, leaves it stale.
	emptied *ltx.Header
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
		stop: make(chan struct{}), policy: policy, retainDue: make(map[string]time.Time)}
	if _, err := r.CheckTarget(ctx, nil); err != nil {
		r.log.Warn("replication: mark the target", "err", err)
	}
	r.stopped.Go(r.syncLoop)
	r.stopped.Go(r.retainLoop)
	return r, nil
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
