package backup

import (
	"github.com/nah-app/nah"

	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"time"
)

// Backups is everything the serving process runs for backups: the
// replicator, the daily sweep and the loop that catches files up after the
// target was away. The console and health read it.
type Backups struct {
	Repl   *Replicator
	Sweep  *Sweeper
	Every  time.Duration // between sweeps; 0: no sweep
	At     time.Duration // the sweep's time of day (UTC) when Every is a day
	Behind time.Duration // a file further behind than this is "behind" for health

	// Source brings files whose last sync failed back into the watched
	// set (Rewatch), so that they catch up: the store.
	Source Source
	Log    *slog.Logger
	// CatchUpEvery is how often files left behind are caught up
	// (catchUpEvery when zero).
	CatchUpEvery time.Duration
	// Drill is the restore drill (drill.go), nil when there is none.
	Drill *Drill
	// Queue, if set, is how many written files wait for replication to
	// take them up and how long the oldest has waited (the store's queue):
	// behind, though not yet watched.
	Queue func() (n int, oldest time.Duration)

	mu        sync.Mutex
	nextSweep time.Time
	syncErr   string // the last "sync now"'s failure
}

// catchUpEvery is how often files left behind are caught up.
const catchUpEvery = 30 * time.Second

// probeTimeout bounds the catch-up loop's check of the target.
const probeTimeout = 10 * time.Second

// Run runs the sweep and the catch-up loop until ctx ends.
func (b *Backups) Run(ctx context.Context) {
	every := b.CatchUpEvery
	if every <= 0 {
		every = catchUpEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var sweepC <-chan time.Time
	var sweepT *time.Timer
	arm := func() {
		if b.Every <= 0 || b.Sweep == nil {
			return
		}
		next := NextSweep(time.Now(), b.Every, b.At)
		b.mu.Lock()
		b.nextSweep = next
		b.mu.Unlock()
		if sweepT == nil {
			sweepT = time.NewTimer(time.Until(next))
		} else {
			sweepT.Reset(time.Until(next))
		}
		sweepC = sweepT.C
	}
	arm()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b.catchUp(ctx)
		case <-b.Sweep.asks():
			b.sweep(ctx)
		case <-sweepC:
			b.sweep(ctx)
			arm()
		}
	}
}

// sweep runs one sweep (the nightly one, or one asked for) and logs it.
func (b *Backups) sweep(ctx context.Context) {
	res, err := b.Sweep.Run(ctx, time.Now())
	switch {
	case ctx.Err() != nil:
		b.Log.Info("backup sweep stopped by the shutdown; the next start's sweep makes a whole one", "files", res.Files)
	case err != nil:
		b.Log.Error("backup sweep", "err", err, "files", res.Files)
	default:
		b.Log.Info("backup sweep", "files", res.Files, "bytes", res.Bytes, "failed", len(res.Failed), "took", res.Duration.Round(time.Millisecond))
	}
}

// catchUp catches up the files left behind while the target failed. It
// first checks the target (which also tells health why it is behind);
// then each watched file behind syncs now, past Litestream's own backoff
// of up to five minutes, and files whose last sync failed come back into
// the watched set, a few at a time.
func (b *Backups) catchUp(ctx context.Context) {
	var behind []FileStatus
	for _, f := range b.Repl.Status() {
		if f.Behind() {
			behind = append(behind, f)
		}
	}
	if len(behind) == 0 && b.Repl.TargetErr() == nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	err := b.Repl.Probe(pctx)
	cancel()
	if err != nil {
		b.Log.Warn("replication: the target is failing", "behind", len(behind), "err", err)
		return
	}
	n, tried := 0, 0
	for _, f := range behind {
		if f.Watched {
			sctx, cancel := context.WithTimeout(ctx, probeTimeout)
			err := b.Repl.Sync(sctx, filepath.Join(b.Repl.cfg.DataDir, filepath.FromSlash(f.Path)))
			cancel()
			if err != nil {
				b.Log.Warn("replication: catch up", "path", f.Path, "err", err)
			}
			continue
		}
		if b.Source == nil || n >= 8 || tried >= 32 {
			continue
		}
		// Eight brought back a round; a file that cannot be (its person was
		// deleted meanwhile, or it cannot be read) does not take their
		// place, so a few of those never starve the rest.
		tried++
		err := b.Source.Rewatch(ctx, f.Path)
		switch {
		case err == nil:
			n++
		case nah.ErrorCode(err) == nah.NotFound:
			b.Repl.drop(f.Path) // deleted: its purge forgets the rest
		default:
			b.Log.Warn("replication: catch up", "path", f.Path, "err", err)
		}
	}
}

// NextSweepAt is when the next sweep runs (zero: none planned).
func (b *Backups) NextSweepAt() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nextSweep
}

// SyncNow ships every watched file's changes and waits for the target.
func (b *Backups) SyncNow(ctx context.Context) error {
	err := b.Repl.SyncAll(ctx)
	b.mu.Lock()
	b.syncErr = ""
	if err != nil {
		b.syncErr = err.Error()
	}
	b.mu.Unlock()
	return err
}

// Health sums replication up for the overview and /healthz.
type Health struct {
	Target  string
	Files   int           // files replicated this run
	Watched int           // watched now
	Behind  int           // files behind the target
	Worst   time.Duration // the largest lag of a file replication has
	// Queued files wait to be taken up (counted in Behind); Lag is the age
	// of the oldest acknowledged write the target lacks, queued ones
	// included: the replica's promise.
	Queued   int
	Lag      time.Duration
	LastErr  string    // an error of a file behind, if any
	Ok       bool      // nothing behind by more than Backups.Behind
	LastSync time.Time // the newest sync that reached the target
	Sweep    SweepResult
	Sweeping bool
}

// Health is replication's state now.
func (b *Backups) Health() Health {
	now := time.Now()
	st := b.Repl.Status()
	h := Health{Target: b.Repl.Target().Redacted(), Files: len(st), Watched: b.Repl.Watched(), Ok: true}
	for _, f := range st {
		if f.LastSync.After(h.LastSync) {
			h.LastSync = f.LastSync
		}
		if !f.Behind() {
			continue
		}
		h.Behind++
		lag := f.Lag(now)
		h.Worst = max(h.Worst, lag)
		if h.LastErr == "" && f.Err != "" {
			h.LastErr = f.Err
		}
		if f.Err != "" || lag > b.Behind {
			h.Ok = false
		}
	}
	h.Lag = h.Worst
	if b.Queue != nil {
		n, oldest := b.Queue()
		h.Queued, h.Behind = n, h.Behind+n
		h.Lag = max(h.Lag, oldest)
		if oldest > b.Behind {
			h.Ok = false
		}
	}
	targetErr := b.Repl.TargetErr()
	if targetErr != nil {
		h.Ok = false
		h.LastErr = "target: " + targetErr.Error()
	}
	b.mu.Lock()
	switch {
	case b.syncErr == "":
	case h.Behind == 0 && targetErr == nil:
		// Every file is in step and the target answers (the catch-up
		// loop caught up since): a failed "sync now" is over.
		b.syncErr = ""
	default:
		h.Ok = false
		if h.LastErr == "" {
			h.LastErr = b.syncErr
		}
	}
	b.mu.Unlock()
	if b.Sweep != nil {
		h.Sweep, h.Sweeping = b.Sweep.Last()
	}
	return h
}
