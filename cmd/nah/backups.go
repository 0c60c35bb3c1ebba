package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
)

// sweepAt is the time of day (UTC) of the daily sweep: at night in Europe
// and the Americas, when families post least.
const sweepAt = 3 * time.Hour

// sweepPace is the pause between two files of a sweep: 1,000 people take
// about a minute more, and the backup copies never crowd requests off the
// two cores.
const sweepPace = 20 * time.Millisecond

// directoryWatchAfter is how long after start the directory is handed to
// replication, and directoryWatchAtStop bounds its first snapshot when the
// server is stopped before that.
const (
	directoryWatchAfter  = time.Second
	directoryWatchAtStop = 30 * time.Second
)

// behindAfter is how far behind a file may be before health says so: a
// write reaches the target within about two seconds when all is well.
const behindAfter = time.Minute

// startReplication checks the replica target (a wrong key, a missing bucket
// or a directory that cannot be made stops the start, naming the variable)
// and starts the replicator, which the store then feeds. nil when
// NAH_REPLICA_URL is off.
func startReplication(ctx context.Context, cfg *config, log *slog.Logger) (*backup.Replicator, *backup.MediaMirror, error) {
	t := cfg.ReplicaTarget
	if t == nil {
		log.Warn("NAH_REPLICA_URL is off: no backups are made")
		return nil, nil, nil
	}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := t.Init(ictx); err != nil {
		return nil, nil, usageError{fmt.Sprintf("NAH_REPLICA_URL=%q: %v", cfg.ReplicaURL, err)}
	}
	meta := filepath.Join(cfg.Store.Dir, nah.ReplicationRel)
	if err := os.MkdirAll(meta, 0o700); err != nil {
		return nil, nil, err
	}
	r, err := backup.Open(ctx, backup.Config{Target: t, DataDir: cfg.Store.Dir, MetaDir: meta, Logger: log, Retention: cfg.Retention})
	if err != nil {
		return nil, nil, err
	}
	cfg.Store.Replicator = r
	cfg.Store.MaxWatched = cfg.ReplicaMaxFiles
	// Files written and waiting for replication are listed here, so that a
	// kill does not leave them behind until their next write.
	cfg.Store.QueueDir = filepath.Join(cfg.Store.Dir, filepath.FromSlash(nah.QueueRel))
	// A person's new media are mirrored soon after they land, not only by
	// the sweep; the people waiting are marked on disk, so that a kill
	// leaves none behind. The store is its source once open.
	m := &backup.MediaMirror{
		Target: t, DataDir: cfg.Store.Dir, Dir: filepath.Join(cfg.Store.Dir, filepath.FromSlash(nah.MediaQueueRel)),
		Pace: sweepPace, Log: log,
	}
	cfg.Store.MediaAdded = m.Queue
	return r, m, nil
}

// markMediaWaiting marks person id's media as waiting for the server's
// media mirror, which mirrors them at its next start (a command that
// changed the data directory beside it, such as person import).
func markMediaWaiting(cfg config, id string) {
	if cfg.ReplicaTarget == nil {
		return
	}
	m := &backup.MediaMirror{Dir: filepath.Join(cfg.Store.Dir, filepath.FromSlash(nah.MediaQueueRel))}
	m.Queue(id)
}

// startBackups watches the directory (always: it holds every account) and
// starts the sweep and catch-up loop, which stops with ctx; stopped is
// closed once it has.
func startBackups(ctx context.Context, cfg config, s *store.Store, r *backup.Replicator, media *backup.MediaMirror, log *slog.Logger) (_ *backup.Backups, stopped chan struct{}, _ error) {
	b := &backup.Backups{
		Media:  media,
		Repl:   r,
		Every:  cfg.SweepEvery,
		At:     sweepAt,
		Behind: behindAfter,
		Source: s,
		Files:  s,
		Log:    log,
	}
	if cfg.SweepEvery > 0 {
		b.Sweep = &backup.Sweeper{Target: cfg.ReplicaTarget, Keep: cfg.SweepKeep, Pace: sweepPace, Source: s}
	}
	b.Drill = newDrill(cfg, s, r, log)
	media.Source = s
	// What the replica, replication's state and the data take, measured
	// in the background for the Backups page, /healthz and the metrics.
	b.Disk = &backup.Disk{
		Target: cfg.ReplicaTarget, DataDir: cfg.Store.Dir, MetaDir: filepath.Join(cfg.Store.Dir, nah.ReplicationRel),
		Budget: cfg.ReplicaBudget, Log: log,
	}
	stopped = make(chan struct{})
	go func() {
		defer close(stopped)
		// The drill reads the store's files: it ends before the store closes.
		drilled := make(chan struct{})
		go func() { defer close(drilled); b.Drill.Run(ctx) }()
		defer func() { <-drilled }()
		// The sizes' samples write replication/disk.json: done before the
		// data directory is let go of.
		measured := make(chan struct{})
		go func() { defer close(measured); b.Disk.Run(ctx) }()
		defer func() { <-measured }()
		// The media mirror reads the store's files too, and mirrors the
		// people still waiting at a stop before the store closes.
		mirrored := make(chan struct{})
		go func() { defer close(mirrored); b.Media.Run(ctx) }()
		defer func() { <-mirrored }()
		// In the background and a moment after start: the directory's first
		// snapshot was the largest share of the CPU from exec to the first
		// feed (perf on people-1k, bench/THRESHOLDS.md). Nothing is lost
		// meanwhile: the snapshot holds what was written before it, a stop
		// within the wait still makes it, and the directory is let go of
		// only at shutdown, after this goroutine ends.
		wait := time.NewTimer(directoryWatchAfter)
		wctx := ctx
		select {
		case <-wait.C:
		case <-ctx.Done():
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), directoryWatchAtStop)
			defer cancel()
		}
		wait.Stop()
		if err := r.Watch(wctx, s.Path(nah.DirectoryRel)); err != nil {
			log.Warn("replication: the directory", "err", err)
		}
		b.Run(ctx)
	}()
	return b, stopped, nil
}
