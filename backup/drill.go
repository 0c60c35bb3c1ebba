package backup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/nah-app/nah"
)

// The restore drill, every NAH_DRILL_EVERY: the directory and a rotating
// sample of person files are restored (RestoreFile) and compared by Checksum
// with the live file, summed before and after so a file written meanwhile is
// retried, not failed. Sweep copies and mirrored media are checked too.
// This file schedules drills and picks the sample; drillcompare.go restores
// and compares a file, drillevidence.go keeps what failed, drillsweep.go
// and drillmedia.go check the sweep's copies and the mirrored media,
// drillreport.go and drillstate.go hold the report and the saved state.

const (
	// drillWeek: every person is restored at least once a week.
	drillWeek = 7 * 24 * time.Hour
	// drillMinSample: a family server (50 people or fewer) restores
	// everyone at every drill, a few seconds of one core.
	drillMinSample = 50
	// drillMediaSample bounds the media files checked per drill, and
	// drillMediaBytes their bytes (a video is up to NAH_MAX_MEDIA_BYTES).
	drillMediaSample = 16
	drillMediaBytes  = 256 << 20
	// drillKeepEvidence bounds the failed copies kept under failed/, and
	// drillEvidenceBytes the size of one kept copy.
	drillKeepEvidence  = 8
	drillEvidenceBytes = 256 << 20
	// drillMinPace is the least pause between two files.
	drillMinPace = 20 * time.Millisecond
)

// DrillBytes is what a drill holds at its peak beyond SQLite's shared
// page cache (whose soft limit its connections live under), which the
// memory plan sets apart: 3.5 MiB of Go heap measured while people-1k's
// directory, its largest file, was restored and summed, and the fixed cost of three SQLite connections at once
// (Litestream's integrity check and the drill's two, ~75 KB each).
const DrillBytes = 4 << 20

// drillRecheck are the pauses before a file whose check did not settle (it
// was written meanwhile, waits for replication, or differs) is checked
// again: a take-up waits at most a few seconds (watchTimeout), and a busy
// directory is written every second or so.
var drillRecheck = []time.Duration{time.Second, 3 * time.Second, 10 * time.Second}

// Drill runs restore drills. Source is the live side: the store in the
// server, a data directory at rest for nah restore -check.
type Drill struct {
	Target *Target
	// Repl, when set, is the replication of the live files: a watched file
	// is synced before its replica is restored, and a file behind is not
	// yet comparable. Nil for a data directory nobody serves.
	Repl *Replicator
	// DataDir is the live data directory (for Repl's paths).
	DataDir string
	// Source is the live side: its databases and media, read where they
	// are, whether a file waits for replication, and the reads of a
	// restored copy.
	Source Source
	// Files, with Repl, is told of the syncs the drill makes, so that the
	// replication queue lets go of the writes they shipped.
	Files Files

	// Dir is the drill's own folder: scratch copies, the rotation's state
	// (state.json) and the evidence of failures (failed/).
	Dir   string
	Every time.Duration // between drills; 0: only when asked
	// All restores every person file rather than a sample.
	All bool
	// Recheck overrides drillRecheck (tests).
	Recheck []time.Duration
	Log     *slog.Logger

	mu      sync.Mutex
	running bool
	asked   bool // Start asked for a drill that has not begun yet
	st      drillState
	loaded  bool
	kick    chan struct{}
}

// Start asks Run for a drill now; false when one is running or asked.
func (d *Drill) Start() bool {
	d.mu.Lock()
	if d.running || d.asked {
		d.mu.Unlock()
		return false
	}
	d.asked = true
	d.mu.Unlock()
	select {
	case d.kicks() <- struct{}{}:
		return true
	default: // a tick's drill took the place of an earlier ask
		d.mu.Lock()
		d.asked = false
		d.mu.Unlock()
		return false
	}
}

func (d *Drill) kicks() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.kick == nil {
		d.kick = make(chan struct{}, 1)
	}
	return d.kick
}

// Run runs a drill every Every (the first one Every after the last one
// recorded, at least a minute after the start) and whenever Start asks,
// until ctx ends.
func (d *Drill) Run(ctx context.Context) {
	kick := d.kicks()
	var timer *time.Timer
	var tick <-chan time.Time
	arm := func() {
		if d.Every <= 0 {
			return
		}
		last, _, _ := d.Last()
		wait := d.Every
		if last != nil {
			wait = max(time.Until(last.Started.Add(d.Every)), time.Minute)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		tick = timer.C
	}
	arm()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-kick:
			if timer != nil && !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		r, err := d.Once(ctx)
		if ctx.Err() != nil {
			return
		}
		if d.Log != nil {
			switch {
			case err != nil:
				d.Log.Warn("restore drill", "err", err)
			case !r.Passed():
				for _, f := range r.Failures {
					d.Log.Error("restore drill: a file does not restore to its live state", "file", f.Rel, "what", f.What, "evidence", f.Evidence)
				}
				d.Log.Error("restore drill failed", "summary", r.Summary())
			default:
				d.Log.Info("restore drill", "summary", r.Summary())
			}
		}
		arm()
	}
}

// ErrDrillRunning is Once's answer while another drill runs.
var ErrDrillRunning = errors.New("a restore drill is already running")

// Once runs one drill now and records its report. A drill cut short by
// ctx records nothing.
func (d *Drill) Once(ctx context.Context) (DrillReport, error) {
	d.mu.Lock()
	if d.running {
		d.mu.Unlock()
		return DrillReport{}, ErrDrillRunning
	}
	d.running, d.asked = true, false
	d.load()
	checked := make(map[string]time.Time, len(d.st.Checked))
	for k, v := range d.st.Checked {
		checked[k] = v
	}
	failing := append([]string(nil), d.st.Failing...)
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.running = false
		d.mu.Unlock()
	}()

	r := d.run(ctx, checked, failing)
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.st.Checked = checked
	d.st.Failing = d.st.Failing[:0]
	for _, f := range r.Failures {
		d.st.Failing = append(d.st.Failing, f.Rel)
	}
	d.st.Last = &r
	if r.Passed() {
		d.st.LastPassed = r.Started.Add(r.Took)
	}
	if err := d.save(); err != nil {
		return r, fmt.Errorf("restore drill: state: %w", err)
	}
	return r, nil
}

// run is one drill; checked is updated with the files found equal.
func (d *Drill) run(ctx context.Context, checked map[string]time.Time, failing []string) (r DrillReport) {
	start := time.Now()
	r.Started = start
	defer func() { r.Took = time.Since(start) }()
	scratch := filepath.Join(d.Dir, "scratch")
	os.RemoveAll(scratch) // a killed drill's leftovers
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		r.Err = err.Error()
		return r
	}
	defer os.RemoveAll(scratch)
	all, err := d.Source.Databases(ctx)
	if err != nil {
		r.Err = "listing the live files: " + err.Error()
		return r
	}
	sample := d.sample(all, checked, failing, start)
	for k := range checked { // forget people who are gone
		if !contains(all, k) {
			delete(checked, k)
		}
	}
	for i, rel := range sample {
		if ctx.Err() != nil {
			return r
		}
		t0 := time.Now()
		out, what, evidence := d.checkFile(ctx, rel, filepath.Join(scratch, fmt.Sprintf("%04d.db", i)))
		if ctx.Err() != nil {
			return r
		}
		switch out {
		case drillEqual:
			checked[rel] = time.Now()
		case drillDeferred:
			r.Deferred = append(r.Deferred, rel+": "+what)
		case drillFailed:
			r.Failures = append(r.Failures, DrillFailure{Rel: rel, Who: d.who(ctx, rel), What: what, Evidence: evidence})
		}
		if rel == DirectoryRel {
			r.Directory = [...]string{"equal", "deferred", "failed", ""}[out]
		} else if out != drillGone {
			r.People++
			if out == drillEqual {
				r.Equal++
			}
		}
		d.pace(ctx, time.Since(t0))
	}
	d.checkSweep(ctx, &r, sample, len(all), scratch)
	d.checkMedia(ctx, &r, sample)
	return r
}

func contains(s []string, v string) bool {
	i := sort.SearchStrings(s, v)
	return i < len(s) && s[i] == v
}

// pace sleeps as long as the last file took (at least drillMinPace): the
// drill keeps to half of one core on average, one file at a time.
func (d *Drill) pace(ctx context.Context, took time.Duration) {
	t := time.NewTimer(max(took, drillMinPace))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// sample is what one drill restores: the directory, then the files that
// failed last time, then those that would go unchecked for a week if not
// checked now, then those written since their last check, then the ones
// checked longest ago; as many as make everyone checked weekly twice over
// (2 x people x Every / week), and everyone when there are 50 or fewer.
// The two "first" groups are bounded by the same share, so neither starves
// the weekly rotation.
func (d *Drill) sample(all []string, checked map[string]time.Time, failing []string, now time.Time) []string {
	sort.Strings(all)
	var people []string
	hasDir := false
	for _, rel := range all {
		if rel == DirectoryRel {
			hasDir = true
		} else {
			people = append(people, rel)
		}
	}
	n := len(people)
	k := n
	if !d.All && d.Every > 0 && n > drillMinSample {
		k = max(drillMinSample, int(math.Ceil(2*float64(n)*float64(d.Every)/float64(drillWeek))))
		k = min(k, n)
	}
	rank := func(rel string) int {
		last := checked[rel]
		switch {
		case contains(sortedCopy(failing), rel):
			return 0
		case now.Sub(last) > drillWeek-2*max(d.Every, time.Hour):
			return 1
		case d.Source != nil && d.Source.LastWrite(rel).After(last):
			return 2
		}
		return 3
	}
	ranks := make(map[string]int, n)
	for _, rel := range people {
		ranks[rel] = rank(rel)
	}
	sort.SliceStable(people, func(i, j int) bool {
		a, b := people[i], people[j]
		if ranks[a] != ranks[b] {
			return ranks[a] < ranks[b]
		}
		return checked[a].Before(checked[b])
	})
	out := make([]string, 0, k+1)
	if hasDir {
		out = append(out, DirectoryRel)
	}
	return append(out, people[:k]...)
}

func sortedCopy(s []string) []string {
	c := append([]string(nil), s...)
	sort.Strings(c)
	return c
}

// DirectoryRel is the directory database's path under the data directory.
const DirectoryRel = nah.DirectoryRel
