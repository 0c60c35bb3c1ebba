package backup

import (
	"github.com/nah-app/nah"

	"context"
	"fmt"
	"log/slog"
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

	// Source is the live data (the store): its databases, and its queue
	// of written files waiting for replication, which "Sync now" empties
	// and health counts as behind (nil: only the files replication has).
	// Files brings files whose last sync failed back into the watched set,
	// so that they catch up, and takes up the queued ones for "Sync now".
	Source Source
	Files  Files
	Log    *slog.Logger
	// CatchUpEvery is how often files left behind are caught up
	// (catchUpEvery when zero).
	CatchUpEvery time.Duration
	// Drill is the restore drill (drill.go), nil when there is none.
	Drill *Drill
	// SyncPace is a pause after each file "Sync now" sends (none when
	// zero): tests slow it with it so that its progress can be seen.
	SyncPace time.Duration

	// Disk measures what the replica, replication's state and the data
	// take (disk.go), in its own loop; nil: not measured.
	Disk *Disk

	// Media mirrors a person's new media soon after they land
	// (mediamirror.go), in its own loop; nil: only the sweep does.
	Media *MediaMirror

	mu        sync.Mutex
	nextSweep time.Time
	syncErr   string       // the last "sync now"'s failure
	syncing   SyncProgress // the "sync now" running, or the last one
	runCtx    context.Context
	jobs      sync.WaitGroup // the "sync now" running
}

// catchUpEvery is how often files left behind are caught up.
const catchUpEvery = 30 * time.Second

// probeTimeout bounds the catch-up loop's check of the target.
const probeTimeout = 10 * time.Second

// Run runs the sweep and the catch-up loop until ctx ends.
func (b *Backups) Run(ctx context.Context) {
	b.mu.Lock()
	b.runCtx = ctx
	b.mu.Unlock()
	defer b.jobs.Wait() // a "sync now" ends with ctx
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

// catchUp catches up the files left behind while the target failed, or
// emptied under the server (CheckTarget, every round). It first checks
// the target (which also tells health why it is behind);
// then each watched file behind syncs now, past Litestream's own backoff
// of up to five minutes, and files whose last sync failed come back into
// the watched set, a few at a time.
func (b *Backups) catchUp(ctx context.Context) {
	var databases func(context.Context) ([]string, error)
	if b.Source != nil {
		databases = b.Source.Databases
	}
	if _, err := b.Repl.CheckTarget(ctx, databases); err != nil && ctx.Err() == nil {
		b.Log.Warn("replication: check the target's mark", "err", err)
	}
	var behind []FileStatus
	for _, f := range b.Status() {
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
			err := b.Repl.syncSource(sctx, b.Files, f.Path)
			cancel()
			if err != nil {
				b.Log.Warn("replication: catch up", "path", f.Path, "err", err)
			}
			continue
		}
		if b.Files == nil || n >= 8 || tried >= 32 {
			continue
		}
		// Eight brought back a round; a file that cannot be (its person was
		// deleted meanwhile, or it cannot be read) does not take their
		// place, so a few of those never starve the rest.
		tried++
		err := b.Files.Rewatch(ctx, f.Path)
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

// syncJobTimeout bounds one "Sync now": a file takes ~10 ms (a take-up
// and its sync, on a local folder), so 10,000 people queued at once fit
// with room; a target that fails stops it at its first file.
const syncJobTimeout = 10 * time.Minute

// SyncProgress is the "Sync now" running, or the last one.
type SyncProgress struct {
	Running bool
	Started time.Time
	Took    time.Duration // once ended
	Done    int           // files on the target so far
	Total   int           // files to send: 0 until they are listed
	Err     string        // why it failed, once ended
}

// StartSync starts "Sync now" in the background (SyncNow), one at a time:
// false while one runs. It ends with the context Run was given, when Run
// runs.
func (b *Backups) StartSync() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.syncing.Running {
		return false
	}
	base := b.runCtx
	if base == nil {
		base = context.Background()
	}
	b.syncing = SyncProgress{Running: true, Started: time.Now()}
	b.jobs.Go(func() {
		ctx, cancel := context.WithTimeout(base, syncJobTimeout)
		defer cancel()
		if err := b.syncNow(ctx); err != nil {
			b.Log.Warn("backups: sync now", "err", err)
		}
	})
	return true
}

// SyncState is the "Sync now" running or the last one; false: none since
// the server started.
func (b *Backups) SyncState() (SyncProgress, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.syncing, !b.syncing.Started.IsZero()
}

// SyncNow brings every file behind to the target and waits for it: the
// watched ones, those whose last sync failed, and the people's files in
// the store's replication queue (taken up first, so that none waits for
// a replicator). A target that fails stops it at that file.
func (b *Backups) SyncNow(ctx context.Context) error {
	b.mu.Lock()
	if !b.syncing.Running {
		b.syncing = SyncProgress{Running: true, Started: time.Now()}
	}
	b.mu.Unlock()
	return b.syncNow(ctx)
}

func (b *Backups) syncNow(ctx context.Context) (err error) {
	defer func() {
		b.mu.Lock()
		b.syncing.Running, b.syncing.Took, b.syncing.Err = false, time.Since(b.syncing.Started), ""
		b.syncErr = ""
		if err != nil {
			b.syncing.Err, b.syncErr = err.Error(), err.Error()
		}
		b.mu.Unlock()
	}()
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	err = b.Repl.Probe(pctx)
	cancel()
	if err != nil {
		return err
	}
	todo, err := b.syncList(ctx)
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.syncing.Total = len(todo)
	b.mu.Unlock()
	for i, f := range todo {
		if err := b.syncOne(ctx, f); err != nil {
			if left := len(todo) - i - 1; left > 0 {
				return fmt.Errorf("%w (%d more files not tried)", err, left)
			}
			return err
		}
		b.mu.Lock()
		b.syncing.Done++
		b.mu.Unlock()
		if b.SyncPace > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(b.SyncPace):
			}
		}
	}
	// A file taken up may have been let go of again (the watched set is
	// bounded) before its sync: its last sync then had to reach the target.
	sent := make(map[string]bool, len(todo))
	for _, f := range todo {
		sent[f.rel] = true
	}
	var still []string
	for _, f := range b.Repl.Status() {
		if f.Err != "" && sent[f.Path] {
			still = append(still, f.Path)
		}
	}
	if len(still) > 0 {
		return fmt.Errorf("%d of %d files still behind (%s first): %s", len(still), len(todo), still[0], b.Repl.fileErr(still[0]))
	}
	b.Repl.setDown(nil) // every file reached the target
	return nil
}

// syncFile is one file "Sync now" sends; watched says replication has it.
type syncFile struct {
	rel     string
	watched bool
}

// syncList is what "Sync now" sends, bounded by the databases: every
// watched file, every file replication has behind, then every person's
// file waiting in the store's queue.
func (b *Backups) syncList(ctx context.Context) ([]syncFile, error) {
	var out []syncFile
	seen := map[string]bool{}
	for _, f := range b.Status() {
		if f.Watched || f.Behind() {
			out = append(out, syncFile{rel: f.Path, watched: f.Watched})
			seen[f.Path] = true
		}
	}
	if b.Source == nil || b.Files == nil {
		return out, nil
	}
	rels, err := b.Source.Databases(ctx)
	if err != nil {
		return nil, err
	}
	for _, rel := range rels {
		if !seen[rel] && b.Source.ReplicationQueued(rel) {
			out = append(out, syncFile{rel: rel})
		}
	}
	return out, nil
}

// syncOne sends file f: a person's file is taken up first (a person
// deleted meanwhile has nothing to send), then synced. The watched set is
// bounded, so a file may be let go of between the two (another take-up
// needed the room) before its first sync reached the target: it is then
// taken up again, syncTries times at most.
func (b *Backups) syncOne(ctx context.Context, f syncFile) error {
	for try := 1; ; try++ {
		if nah.PersonOfRel(f.rel) != "" && b.Files != nil {
			err := b.Files.WatchNow(ctx, f.rel)
			switch {
			case nah.ErrorCode(err) == nah.NotFound:
				b.Repl.drop(f.rel)
				return nil
			case err != nil:
				return fmt.Errorf("replicate %s: take up: %w", f.rel, err)
			}
		}
		sctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := b.Repl.syncSource(sctx, b.Files, f.rel)
		cancel()
		if err != nil {
			return err
		}
		e := b.Repl.fileErr(f.rel)
		if e == "" {
			return nil
		}
		if try == syncTries {
			return fmt.Errorf("replicate %s: still behind after %d tries: %s", f.rel, try, e)
		}
	}
}

// syncTries bounds the take-ups of one file in one "Sync now".
const syncTries = 3

// Status is Repl.Status with each file's Pending, since when it waits in
// the store's queue: the Backups page's list, worst first.
func (b *Backups) Status() []FileStatus {
	if b.Source == nil {
		return b.Repl.Status()
	}
	return b.Repl.status(b.Source.ReplicationSince)
}

// Health sums replication up for the overview and /healthz.
type Health struct {
	Target  string
	Files   int           // files replicated this run
	Watched int           // watched now
	Behind  int           // files behind the target
	Worst   time.Duration // the largest lag of a file replication has
	// Queued files wait in the store's queue, watched or not (counted in
	// Behind, once); Lag is the age of the oldest acknowledged write the
	// target lacks, queued ones included: the replica's promise.
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
	h := Health{Target: b.Repl.Target().Redacted(), Watched: b.Repl.Watched(), Ok: true}
	var errOf FileStatus // the failing file in step longest ago, as Status orders them
	counted := 0         // files queued in the store, counted here
	b.Repl.EachStatus(func(f FileStatus) {
		if b.Source != nil {
			var queued bool
			if f.Pending, queued = b.Source.ReplicationSince(f.Path); queued {
				counted++
			}
		}
		h.Files++
		if f.LastSync.After(h.LastSync) {
			h.LastSync = f.LastSync
		}
		if !f.Behind() {
			return
		}
		h.Behind++
		lag := f.Lag(now)
		h.Worst = max(h.Worst, lag)
		if f.Err != "" && (errOf.Err == "" || f.LastSync.Before(errOf.LastSync) || f.LastSync.Equal(errOf.LastSync) && f.Path < errOf.Path) {
			errOf = f
		}
		if f.Err != "" || lag > b.Behind {
			h.Ok = false
		}
	})
	h.LastErr = errOf.Err
	h.Lag = h.Worst
	if b.Source != nil {
		// Each queued file once: those replication has were counted above.
		n, oldest := b.Source.ReplicationQueue()
		h.Queued, h.Behind = n, h.Behind+max(0, n-counted)
		h.Lag = max(h.Lag, oldest)
		if oldest > b.Behind {
			h.Ok = false
		}
	}
	targetErr := b.Repl.TargetErr()
	if targetErr != nil {
		h.Ok = false
		h.LastErr = "target: " + targetErr.Error()
	} else if at := b.Repl.Emptied(); !at.IsZero() {
		h.Ok = false
		h.LastErr = "target: emptied under the server at " + at.UTC().Format(time.RFC3339) + "; every file is being replicated afresh"
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
