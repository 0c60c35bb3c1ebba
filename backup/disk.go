package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Disk measures what the backups take, so that an operator sees the
// replica grow before the disk fills: the replica (a listing of the whole
// target), replication's local state (the data directory's replication
// folder) and the live data. It samples in the background, never on a
// request: pages, /healthz and the metrics read the last sample. A small
// ring of samples, kept in MetaDir/disk.json, gives the growth per day
// across restarts.
type Disk struct {
	Target *Target
	// DataDir is the live data: every file under it but MetaDir's (and a
	// target folder's inside it, if someone put one there).
	DataDir string
	MetaDir string // replication's local state, and disk.json
	// Budget is what the replica may hold (NAH_REPLICA_BUDGET): past it
	// the page, /healthz and the metrics warn. 0: no budget.
	Budget int64
	// Every is the pause between samples (diskEvery when zero), First the
	// wait before a run's first (diskFirstAfter when zero), MaxFiles the
	// files one listing counts at most (diskMaxFiles when zero).
	Every, First time.Duration
	MaxFiles     int
	Log          *slog.Logger

	mu     sync.Mutex
	loaded bool
	ring   []DiskSample // oldest first, diskRing at most
	err    string       // the last sample's failure, until one succeeds
	errAt  time.Time
}

const (
	// diskEvery is the pause between samples. A sample lists the whole
	// target, then its nightly copies: a family's 3,400 files are 4 + 1
	// LIST calls on S3, 1,440 a day (under a cent at AWS's $0.005 per 1,000).
	diskEvery = 5 * time.Minute
	// diskFirstAfter is the wait before a run's first sample: after the
	// directory's first snapshot (1 s after start), the start's main CPU.
	diskFirstAfter = 3 * time.Second
	// diskPace: the next sample waits at least this many times the last
	// one took, so that listing a slow or huge target takes at most 1% of
	// the time.
	diskPace = 100
	// diskMaxFiles bounds one listing: 250,000 keys are 250 LIST calls on
	// S3, and a walk of 250,000 local files in 1,000 folders took 1.2-1.3 s
	// here (warm cache). Past it the counts are lower bounds, and no growth.
	diskMaxFiles = 250_000
	// diskTimeout bounds one sample (its four listings).
	diskTimeout = 5 * time.Minute

	// diskRing samples are kept, one per diskKeepEvery at most (the
	// newest is always the last sample): 64 x 45 min covers two days, so
	// that a sample a day old is always there for the growth per day.
	diskRing      = 64
	diskKeepEvery = 45 * time.Minute
	// diskMinSpan is the shortest span a growth per day is computed over,
	// so that the first minutes' noise is not multiplied by 288.
	diskMinSpan = time.Hour
	// diskSlack: the replica "outgrows" the data only when its history
	// grew over the last day by this much more than the data did (1 MiB),
	// so that a quiet day's few KiB of Litestream bookkeeping do not warn.
	diskSlack = 1 << 20
	// diskStateMax bounds what is read of disk.json: 64 samples are 14 KB.
	diskStateMax = 1 << 20
)

// DiskSample is one measurement. Counts are of files (keys on S3).
type DiskSample struct {
	At           time.Time `json:"at"`
	ReplicaBytes int64     `json:"replica_bytes"` // the whole target
	ReplicaFiles int       `json:"replica_files"`
	// SweepBytes are the nightly copies, part of the replica: bounded by
	// NAH_SWEEP_KEEP, and in a server's first week they grow by a whole
	// copy a night by design, so the growth warning leaves them out.
	SweepBytes int64 `json:"sweep_bytes"`
	StateBytes int64 `json:"state_bytes"` // replication's local state
	StateFiles int   `json:"state_files"`
	DataBytes  int64 `json:"data_bytes"` // the live data, media included
	DataFiles  int   `json:"data_files"`
	// Partial: a listing stopped at MaxFiles, so the counts are lower
	// bounds.
	Partial bool          `json:"partial,omitempty"`
	Took    time.Duration `json:"took"`
}

// HistoryBytes is the replica without its nightly copies: Litestream's
// histories and the media mirror, which grow with every write.
func (s DiskSample) HistoryBytes() int64 { return s.ReplicaBytes - s.SweepBytes }

// DiskReport is the last sample, the growth per day and the warnings.
type DiskReport struct {
	Last DiskSample // its At is zero before the first sample
	// Err is why the last sample failed (since the last that succeeded).
	Err   string
	ErrAt time.Time
	// Base is the sample the growth is measured from: the newest at least
	// a day before Last, else the oldest if at least diskMinSpan before
	// (its At is zero: no growth yet).
	Base                                                  DiskSample
	ReplicaPerDay, HistoryPerDay, StatePerDay, DataPerDay int64
	Budget                                                int64 // 0: none
	// OverBudget: the replica holds more than Budget. Outgrowing: over
	// the last day (a whole one), the replica without its nightly copies
	// grew by more than the live data did, by diskSlack at least.
	OverBudget, Outgrowing bool
}

// Span is the time the growth is measured over (0: none yet).
func (r DiskReport) Span() time.Duration {
	if r.Base.At.IsZero() {
		return 0
	}
	return r.Last.At.Sub(r.Base.At)
}

// Run samples every Every until ctx ends. After a restart the first
// sample waits for the rest of the interval since the last one kept.
func (d *Disk) Run(ctx context.Context) {
	every := orDefault(d.Every, diskEvery)
	wait := orDefault(d.First, diskFirstAfter)
	d.mu.Lock()
	d.load()
	if n := len(d.ring); n > 0 {
		wait = max(wait, min(every, every-time.Since(d.ring[n-1].At)))
	}
	d.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		if err := d.Sample(ctx); err != nil && ctx.Err() == nil && d.Log != nil {
			d.Log.Warn("backups: measuring the replica's size", "err", err)
		}
		t.Reset(max(every, diskPace*time.Since(start)))
	}
}

// orDefault is v, or def when v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Sample measures now, keeps the sample in the ring and saves the ring.
func (d *Disk) Sample(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, diskTimeout)
	defer cancel()
	s, err := d.measure(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.load()
	if err != nil {
		d.err, d.errAt = err.Error(), time.Now()
		return err
	}
	d.err, d.errAt = "", time.Time{}
	d.add(s)
	return d.save()
}

// measure lists the target, the state and the data, MaxFiles each at most.
func (d *Disk) measure(ctx context.Context) (DiskSample, error) {
	start := time.Now()
	s := DiskSample{At: start.UTC()}
	limit := orDefault(d.MaxFiles, diskMaxFiles)
	partial := func(err error) error {
		if errors.Is(err, errUsageLimit) {
			s.Partial = true
			return nil
		}
		return err
	}
	blobs := d.Target.store()
	if blobs == nil {
		return s, errors.New("the target is not initialised")
	}
	var err error
	s.ReplicaFiles, s.ReplicaBytes, err = blobs.usage(ctx, ".", limit)
	if err := partial(err); err != nil {
		return s, fmt.Errorf("the replica: %w", err)
	}
	_, s.SweepBytes, err = blobs.usage(ctx, sweepPrefix, limit)
	if err := partial(err); err != nil {
		return s, fmt.Errorf("the nightly copies: %w", err)
	}
	s.StateFiles, s.StateBytes, err = dirUsage(ctx, d.MetaDir, limit, nil)
	if err := partial(err); err != nil {
		return s, fmt.Errorf("replication's state: %w", err)
	}
	meta, target := filepath.Clean(d.MetaDir), ""
	if !d.Target.IsS3() {
		target = filepath.Clean(d.Target.Dir())
	}
	s.DataFiles, s.DataBytes, err = dirUsage(ctx, d.DataDir, limit, func(p string) bool {
		p = filepath.Clean(p)
		return p == meta || p == target
	})
	if err := partial(err); err != nil {
		return s, fmt.Errorf("the data: %w", err)
	}
	s.Took = time.Since(start)
	return s, nil
}

// add puts s in the ring: it replaces the newest sample when that one is
// under diskKeepEvery after the one before, so that the ring keeps one
// sample per diskKeepEvery and always ends with the last. Under d.mu.
func (d *Disk) add(s DiskSample) {
	for n := len(d.ring); n > 0 && d.ring[n-1].At.After(s.At); n-- {
		d.ring = d.ring[:n-1] // the clock went back: forget its future
	}
	if n := len(d.ring); n >= 2 && s.At.Sub(d.ring[n-2].At) < diskKeepEvery {
		d.ring[n-1] = s
	} else {
		d.ring = append(d.ring, s)
	}
	if extra := len(d.ring) - diskRing; extra > 0 {
		d.ring = slices.Delete(d.ring, 0, extra)
	}
}

// diskState is disk.json.
type diskState struct {
	Samples []DiskSample `json:"samples"`
}

func (d *Disk) statePath() string { return filepath.Join(d.MetaDir, "disk.json") }

// load reads disk.json once, diskStateMax bytes and diskRing samples at
// most; an unreadable one starts afresh. Under d.mu.
func (d *Disk) load() {
	if d.loaded {
		return
	}
	d.loaded = true
	f, err := os.Open(d.statePath())
	if err != nil {
		return
	}
	defer f.Close()
	var st diskState
	b, err := io.ReadAll(io.LimitReader(f, diskStateMax+1))
	if err == nil && len(b) > diskStateMax {
		err = fmt.Errorf("over %d bytes", diskStateMax)
	}
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		if d.Log != nil {
			d.Log.Warn("backups: disk.json unreadable, the growth per day starts afresh", "err", err)
		}
		return
	}
	slices.SortFunc(st.Samples, func(a, b DiskSample) int { return a.At.Compare(b.At) })
	for _, s := range st.Samples {
		d.add(s)
	}
}

// save writes the ring to disk.json (a few KB), whole or not at all.
// Under d.mu.
func (d *Disk) save() error {
	b, err := json.Marshal(diskState{Samples: d.ring})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d.MetaDir, 0o700); err != nil {
		return err
	}
	tmp := d.statePath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, d.statePath())
}

// Report is the last sample, its growth per day and the warnings. It
// measures nothing.
func (d *Disk) Report() DiskReport {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.load()
	r := DiskReport{Err: d.err, ErrAt: d.errAt, Budget: d.Budget}
	n := len(d.ring)
	if n == 0 {
		return r
	}
	r.Last = d.ring[n-1]
	r.OverBudget = d.Budget > 0 && r.Last.ReplicaBytes > d.Budget
	base, ok := trendBase(d.ring)
	if !ok || base.Partial || r.Last.Partial {
		return r
	}
	r.Base = base
	span := r.Span()
	perDay := func(from, to int64) int64 {
		return int64(float64(to-from) * float64(24*time.Hour) / float64(span))
	}
	r.ReplicaPerDay = perDay(base.ReplicaBytes, r.Last.ReplicaBytes)
	r.HistoryPerDay = perDay(base.HistoryBytes(), r.Last.HistoryBytes())
	r.StatePerDay = perDay(base.StateBytes, r.Last.StateBytes)
	r.DataPerDay = perDay(base.DataBytes, r.Last.DataBytes)
	r.Outgrowing = span >= 24*time.Hour && r.HistoryPerDay > r.DataPerDay+diskSlack
	return r
}

// trendBase is the sample the growth is measured from: the newest at
// least a day before the last, else the oldest if at least diskMinSpan
// before it.
func trendBase(ring []DiskSample) (DiskSample, bool) {
	last := ring[len(ring)-1]
	for i := len(ring) - 2; i >= 0; i-- {
		if last.At.Sub(ring[i].At) >= 24*time.Hour {
			return ring[i], true
		}
	}
	if len(ring) >= 2 && last.At.Sub(ring[0].At) >= diskMinSpan {
		return ring[0], true
	}
	return DiskSample{}, false
}
