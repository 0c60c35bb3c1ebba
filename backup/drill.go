package backup

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/benbjohnson/litestream"

	"github.com/nah-app/nah"
)

// The restore drill, every NAH_DRILL_EVERY: the directory and a rotating
// sample of person files are restored (RestoreFile) and compared by Checksum
// with the live file, summed before and after so a file written meanwhile is
// retried, not failed. Sweep copies and mirrored media are checked too.

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
// directory (21 MB, 150,000 connection rows, its largest file) was restored
// and summed, and the fixed cost of three SQLite connections at once
// (Litestream's integrity check and the drill's two, ~75 KB each).
const DrillBytes = 4 << 20

// drillRecheck are the pauses before a file whose check did not settle (it
// was written meanwhile, waits for replication, or differs) is checked
// again: a take-up waits at most a few seconds (watchTimeout), and a busy
// directory is written every second or so.
var drillRecheck = []time.Duration{time.Second, 3 * time.Second, 10 * time.Second}

// Drill runs restore drills. The funcs are the live side's (the store's in
// the server, a data directory's for nah restore -check).
type Drill struct {
	Target *Target
	// Repl, when set, is the replication of the live files: a watched file
	// is synced before its replica is restored, and a file behind is not
	// yet comparable. Nil for a data directory nobody serves.
	Repl *Replicator
	// DataDir is the live data directory (for Repl's paths).
	DataDir string
	// List lists every database of the live side (paths under the data
	// directory).
	List func(ctx context.Context) ([]string, error)
	// Live runs fn in a read transaction on the live database rel; Read on
	// a restored copy at path; Check runs SQLite's integrity check.
	Live  func(ctx context.Context, rel string, fn func(tx *sql.Tx) error) error
	Read  func(ctx context.Context, path string, fn func(tx *sql.Tx) error) error
	Check func(ctx context.Context, path string) error
	// Queued says whether rel waits in the replication queue; LastWrite is
	// when rel last changed; Name names the person of rel in messages.
	// Each may be nil.
	Queued    func(rel string) bool
	LastWrite func(rel string) time.Time
	Name      func(ctx context.Context, rel string) string
	// OpenMedia opens a live media file (as MediaFiles names it) to compare
	// with its mirror. Nil: no media check.
	OpenMedia func(rel string) (*os.File, error)

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

// DrillReport is one drill's result.
type DrillReport struct {
	Started   time.Time      `json:"started"`
	Took      time.Duration  `json:"took"`
	People    int            `json:"people"`    // person files restored
	Equal     int            `json:"equal"`     // of them, sound and equal to the live file
	Directory string         `json:"directory"` // the directory's outcome: equal, failed, deferred, or "" (not checked)
	Deferred  []string       `json:"deferred,omitempty"`
	Failures  []DrillFailure `json:"failures,omitempty"`
	Sweep     string         `json:"sweep,omitempty"` // the sweep whose copies were checked
	SweepOK   int            `json:"sweep_ok"`
	Media     int            `json:"media"` // media files compared, and equal
	MediaOK   int            `json:"media_ok"`
	Err       string         `json:"err,omitempty"` // the drill could not run at all
}

// DrillFailure is one file that did not restore to its live state.
type DrillFailure struct {
	Rel      string `json:"rel"`
	Who      string `json:"who"`  // "alice (people/<id>/person.db)" or "the directory"
	What     string `json:"what"` // one sentence
	Evidence string `json:"evidence,omitempty"`
}

// Files is how many databases the drill restored.
func (r DrillReport) Files() int {
	n := r.People
	if r.Directory != "" {
		n++
	}
	return n
}

// Passed says whether the drill ran and found nothing wrong.
func (r DrillReport) Passed() bool { return r.Err == "" && len(r.Failures) == 0 }

// Summary is the drill in a line: "37 of 37 people restored and equal,
// took 4 s".
func (r DrillReport) Summary() string {
	if r.Err != "" {
		return "the drill could not run: " + r.Err
	}
	s := fmt.Sprintf("%d of %d %s restored and equal", r.Equal, r.People, plural(int64(r.People), "person", "people"))
	switch r.Directory {
	case "equal":
		s += ", the directory too"
	case "failed":
		s += ", the directory not"
	case "deferred":
		s += ", the directory written throughout (compared next time)"
	}
	if r.Sweep != "" {
		s += fmt.Sprintf(", %d sweep %s sound", r.SweepOK, plural(int64(r.SweepOK), "copy", "copies"))
	}
	if r.Media > 0 {
		s += fmt.Sprintf(", %d of %d media equal", r.MediaOK, r.Media)
	}
	if n := len(r.Deferred); n > 0 {
		s += fmt.Sprintf(", %d still being written or replicated (compared next time)", n)
	}
	if n := len(r.Failures); n > 0 {
		s += fmt.Sprintf(", %d %s", n, plural(int64(n), "failure", "failures"))
	}
	return s + ", took " + roundTook(r.Took)
}

func roundTook(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%d s", int(d.Round(time.Second).Seconds()))
}

// drillState is state.json: the rotation and the last results, kept
// across restarts so that a server restarted often still drills everyone
// weekly and a failure stays reported until a drill passes. Bounded by the
// number of databases.
type drillState struct {
	Checked    map[string]time.Time `json:"checked"` // when each file last restored equal
	Failing    []string             `json:"failing,omitempty"`
	Last       *DrillReport         `json:"last,omitempty"`
	LastPassed time.Time            `json:"last_passed,omitzero"`
}

func (d *Drill) statePath() string { return filepath.Join(d.Dir, "state.json") }

// load reads state.json once; under d.mu.
func (d *Drill) load() {
	if d.loaded {
		return
	}
	d.loaded = true
	d.st = drillState{}
	if b, err := os.ReadFile(d.statePath()); err == nil {
		if err := json.Unmarshal(b, &d.st); err != nil && d.Log != nil {
			d.Log.Warn("restore drill: state.json unreadable, starting the rotation afresh", "err", err)
		}
	}
	if d.st.Checked == nil {
		d.st.Checked = map[string]time.Time{}
	}
}

func (d *Drill) save() error {
	b, err := json.Marshal(d.st)
	if err != nil {
		return err
	}
	tmp := d.statePath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, d.statePath())
}

// Last is the newest drill's report (nil before the first), when a drill
// last passed, and whether one runs now or Start asked for one (so that a
// page shown just after Start waits for its result).
func (d *Drill) Last() (last *DrillReport, passed time.Time, running bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.load()
	if d.st.Last != nil {
		r := *d.st.Last
		last = &r
	}
	return last, d.st.LastPassed, d.running || d.asked
}

// Failing says whether the newest drill found a file that does not restore
// (health is degraded until a drill passes).
func (d *Drill) Failing() bool {
	last, _, _ := d.Last()
	return last != nil && !last.Passed()
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
	all, err := d.List(ctx)
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
		case d.LastWrite != nil && d.LastWrite(rel).After(last):
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

type drillOutcome int

const (
	drillEqual drillOutcome = iota
	drillDeferred
	drillFailed
	drillGone // the live file went (a person deleted meanwhile)
)

// checkFile restores rel into out and compares it with the live file.
func (d *Drill) checkFile(ctx context.Context, rel, out string) (_ drillOutcome, what, evidence string) {
	defer removeScratch(out)
	pauses := d.Recheck
	if pauses == nil {
		pauses = drillRecheck
	}
	var why string
	for try := 0; ; try++ {
		if try > 0 {
			if try > len(pauses) {
				break
			}
			t := time.NewTimer(pauses[try-1])
			select {
			case <-ctx.Done():
				t.Stop()
				return drillDeferred, "stopped", ""
			case <-t.C:
			}
			removeScratch(out)
		}
		before, err := d.liveChecksum(ctx, rel)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), nah.ErrNoPerson().Message) {
				return drillGone, "", ""
			}
			why = "the live file cannot be read: " + err.Error()
			continue
		}
		if d.Repl != nil {
			// A watched file ships what it holds now; one not watched has
			// nothing waiting (or is queued, which pending says).
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := d.Repl.Sync(sctx, filepath.Join(d.DataDir, filepath.FromSlash(rel)))
			cancel()
			if err != nil {
				why = "its replication could not sync: " + err.Error()
				continue
			}
		}
		res, rerr := d.restore(ctx, rel, out, drillBudget(d.liveBytes(ctx, rel)))
		src := res.String()
		if ctx.Err() != nil {
			return drillDeferred, "stopped", ""
		}
		// RestoreFile checked the copy whole with SQLite's integrity check
		// (3 s of the 11 s a drill spends on people-1k's 21 MB directory),
		// and gives back no copy that fails it.
		var restored Checksum
		var derr error
		if rerr == nil {
			derr = d.Read(ctx, out, func(tx *sql.Tx) error {
				var err error
				restored, err = ChecksumTx(ctx, tx)
				return err
			})
		}
		after, err := d.liveChecksum(ctx, rel)
		if err != nil {
			why = "the live file cannot be read: " + err.Error()
			continue
		}
		if !before.Equal(after) {
			why = "written during every try"
			continue
		}
		if rerr == nil && derr == nil && restored.Equal(after) {
			if res.From == FromHistory {
				return drillEqual, "", ""
			}
			// Equal, but from a sweep: its history is missing or failed,
			// and its writes since that sweep are not protected.
			if res.HistoryErr == nil {
				what := fmt.Sprintf("its Litestream history is missing from the replica; only the %s copy holds it, so its next writes are not protected until it is taken up again", src)
				return drillFailed, what, d.keep(rel, "", what)
			}
			what := fmt.Sprintf("its Litestream history does not restore (%s); nah restore falls back to the %s copy", shortErr(res.HistoryErr), src)
			return drillFailed, what, d.keep(rel, "", what)
		}
		if d.pending(rel) {
			why = "still waiting for replication"
			continue
		}
		switch {
		case rerr != nil:
			why = "does not restore: " + rerr.Error()
		case derr != nil:
			why = "restores to a database that cannot be read (" + shortErr(derr) + ")"
		default:
			why = after.Diff(restored)
			switch {
			case res.HistoryErr != nil:
				why += "; nah restore fell back to the " + src + " copy, its history not restoring (" + shortErr(res.HistoryErr) + ")"
			case res.From == FromSweep:
				why += "; nah restore fell back to the " + src + " copy, its history being missing"
			}
		}
		why = "differs from the live file: " + why
		if rerr != nil || derr != nil {
			why = strings.TrimPrefix(why, "differs from the live file: ")
		}
	}
	if why == "written during every try" || why == "still waiting for replication" {
		return drillDeferred, why, ""
	}
	pos := d.position(ctx, rel)
	return drillFailed, why + pos, d.keep(rel, out, why+pos)
}

// restore is the drill's one call to nah restore's own code.
func (d *Drill) restore(ctx context.Context, rel, out string, limit int64) (Restored, error) {
	return RestoreFileWithin(ctx, d.Target, rel, out, time.Time{}, limit)
}

// drillBudget is the most the drill writes of a copy of a live file of
// live bytes, and of the LTX files it restores from: its scratch folder
// holds at most twice it (one file at a time). A replica a little behind
// may be larger than a file that shrank since, never twice as large and
// 64 MiB besides. An LTX file whose header claims more is refused before
// anything of the copy is written (one of 4.5 MB that claimed 256 TiB grew
// the scratch folder to 736 MB before the restore failed).
func drillBudget(live int64) int64 { return 2*live + 64<<20 }

// liveBytes is the size of the live database rel as its read
// transaction sees it; 0 when it cannot be read (the checksum says why).
func (d *Drill) liveBytes(ctx context.Context, rel string) int64 {
	var pages, size int64
	d.Live(ctx, rel, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, "PRAGMA page_size").Scan(&size)
	})
	return pages * size
}

func (d *Drill) liveChecksum(ctx context.Context, rel string) (Checksum, error) {
	var sum Checksum
	err := d.Live(ctx, rel, func(tx *sql.Tx) error {
		var err error
		sum, err = ChecksumTx(ctx, tx)
		return err
	})
	return sum, err
}

// pending says whether rel's replica may rightly be behind: it waits in
// the queue, replication says it is behind, or the target is failing.
func (d *Drill) pending(rel string) bool {
	if d.Queued != nil && d.Queued(rel) {
		return true
	}
	if d.Repl == nil {
		return false
	}
	if d.Repl.TargetErr() != nil {
		return true
	}
	f, ok := d.Repl.StatusOf(rel)
	return ok && f.Behind()
}

// position is where rel's history ends on the target, for the evidence.
func (d *Drill) position(ctx context.Context, rel string) string {
	c, err := d.Target.restoreClient(rel)
	if err != nil {
		return ""
	}
	plan, err := litestream.CalcRestorePlan(ctx, c, 0, time.Time{}, slog.New(slog.DiscardHandler))
	if err != nil || len(plan) == 0 {
		return ""
	}
	return fmt.Sprintf("; its history ends at TXID %s (%d LTX files)", plan[len(plan)-1].MaxTXID, len(plan))
}

// who names rel for people: the person's handle and file.
func (d *Drill) who(ctx context.Context, rel string) string {
	if rel == DirectoryRel {
		return "the directory (" + rel + ")"
	}
	if d.Name != nil {
		if n := d.Name(ctx, rel); n != "" {
			return n + " (" + rel + ")"
		}
	}
	return rel
}

// keep moves the scratch copy of a failed file (if any, and not larger
// than drillEvidenceBytes) with a note of what failed to failed/, keeping
// the newest drillKeepEvidence, and says where.
func (d *Drill) keep(rel, copyPath, what string) string {
	dir := filepath.Join(d.Dir, "failed")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ""
	}
	base := time.Now().UTC().Format(stampFormat) + "-" + strings.NewReplacer("/", "_", ".db", "").Replace(rel)
	note := rel + ": " + what + "\n"
	if copyPath != "" {
		if st, err := os.Stat(copyPath); err == nil && st.Size() <= drillEvidenceBytes {
			if os.Rename(copyPath, filepath.Join(dir, base+".db")) == nil {
				note += "restored copy: " + base + ".db\n"
			}
		}
	}
	os.WriteFile(filepath.Join(dir, base+".txt"), []byte(note), 0o600)
	es, _ := os.ReadDir(dir)
	var notes []string
	for _, e := range es {
		if strings.HasSuffix(e.Name(), ".txt") {
			notes = append(notes, strings.TrimSuffix(e.Name(), ".txt"))
		}
	}
	sort.Strings(notes)
	for len(notes) > drillKeepEvidence {
		os.Remove(filepath.Join(dir, notes[0]+".txt"))
		os.Remove(filepath.Join(dir, notes[0]+".db"))
		notes = notes[1:]
	}
	return filepath.Join(dir, base+".txt")
}

func removeScratch(p string) {
	for _, s := range []string{"", "-wal", "-shm", "-txid", ".tmp"} {
		os.Remove(p + s)
	}
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// checkSweep checks the newest complete sweep's copies of the sample
// against the sizes and SHA-256 its manifest recorded, and that each opens
// sound: nah restore falls back to them. databases is how many there are
// live, which bounds the manifest.
func (d *Drill) checkSweep(ctx context.Context, r *DrillReport, sample []string, databases int, scratch string) {
	blobs := d.Target.store()
	sweeps, err := listSweeps(ctx, blobs)
	if err != nil {
		return // the files' restores already said why the target fails
	}
	var stamp string
	for i := len(sweeps) - 1; i >= 0; i-- {
		if sweeps[i].complete {
			stamp = sweeps[i].stamp
			break
		}
	}
	if stamp == "" {
		return
	}
	m, err := readManifest(ctx, blobs, stamp, databases)
	if err != nil {
		r.Failures = append(r.Failures, DrillFailure{Rel: path.Join(sweepPrefix, stamp), Who: "sweep " + stamp, What: "its manifest cannot be read: " + err.Error()})
		return
	}
	if len(m.Sums) == 0 {
		return // made before sweeps recorded sums
	}
	r.Sweep = stamp
	for _, rel := range sample {
		want, ok := m.Sums[rel]
		if !ok || ctx.Err() != nil {
			continue
		}
		t0 := time.Now()
		out := filepath.Join(scratch, "sweep.db")
		removeScratch(out)
		what := ""
		if err := copyTo(ctx, blobs, path.Join(sweepPrefix, stamp, rel), out, min(want.Size, drillBudget(d.liveBytes(ctx, rel)))); err != nil {
			what = "cannot be read: " + err.Error()
		} else if got, err := sumPath(out); err != nil {
			what = "cannot be read: " + err.Error()
		} else if got != want {
			what = fmt.Sprintf("is not the copy the sweep made: %d bytes with SHA-256 %.12s…, its manifest says %d bytes with %.12s…", got.Size, got.SHA256, want.Size, want.SHA256)
		} else if err := d.Check(ctx, out); err != nil {
			what = "fails SQLite's integrity check (" + shortErr(err) + ")"
		}
		if what != "" {
			what = "its copy in sweep " + stamp + " " + what
			r.Failures = append(r.Failures, DrillFailure{Rel: rel, Who: d.who(ctx, rel), What: what, Evidence: d.keep(rel, out, what)})
		} else {
			r.SweepOK++
		}
		removeScratch(out)
		d.pace(ctx, time.Since(t0))
	}
}

// manifestBase and manifestPerFile bound a sweep's manifest.json before
// it is read, by the number of databases: a database takes ~200 bytes of
// it (its path in files, its size and SHA-256 in sums), a failed one its
// path and error. Decoded, the worst JSON for its size (empty strings, 3
// bytes for a 16-byte string header, and the slice's growth) holds ~11
// times its bytes: 11 KiB a database (a 60 MB manifest of empty strings
// took a drill from 28 to 1,236 MB).
const (
	manifestBase    = 64 << 10
	manifestPerFile = 1 << 10
)

// readManifest reads sweep stamp's manifest, refused unread when larger
// than a manifest of databases databases can be.
func readManifest(ctx context.Context, blobs blobStore, stamp string, databases int) (SweepManifest, error) {
	var m SweepManifest
	key := path.Join(sweepPrefix, stamp, "manifest.json")
	rc, size, err := blobs.open(ctx, key)
	if err != nil {
		return m, err
	}
	defer rc.Close()
	limit := manifestBase + int64(databases)*manifestPerFile
	tooLarge := func(size int64) error {
		return fmt.Errorf("%s is %d bytes, more than a manifest of %d databases takes (%d)", key, size, databases, limit)
	}
	if size > limit {
		return m, tooLarge(size)
	}
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return m, err
	}
	if int64(len(b)) > limit {
		return m, tooLarge(int64(len(b)))
	}
	err = json.Unmarshal(b, &m)
	return m, err
}

func sumPath(p string) (FileSum, error) {
	f, err := os.Open(p)
	if err != nil {
		return FileSum{}, err
	}
	defer f.Close()
	return sumFile(f)
}

// checkMedia compares mirrored media files of the sampled people with the
// live files, by size and SHA-256: at most drillMediaSample files and
// drillMediaBytes a drill. A file not mirrored yet waits for the next sweep.
func (d *Drill) checkMedia(ctx context.Context, r *DrillReport, sample []string) {
	if d.OpenMedia == nil {
		return
	}
	mirrored, err := MediaFiles(ctx, d.Target)
	if err != nil {
		return
	}
	people := map[string]bool{}
	for _, rel := range sample {
		people[nah.PersonOfRel(rel)] = true
	}
	var bytes int64
	for _, rel := range mirrored {
		if r.Media >= drillMediaSample || bytes >= drillMediaBytes || ctx.Err() != nil {
			return
		}
		owner, _ := nah.SplitMediaRel(rel)
		if owner == "" || !people[owner] {
			continue
		}
		f, err := d.OpenMedia(rel)
		if err != nil {
			continue // deleted since: the next sweep removes its mirror
		}
		live, err := sumFile(f)
		f.Close()
		if err != nil {
			continue
		}
		r.Media++
		bytes += live.Size
		what := ""
		rc, err := d.Target.store().get(ctx, path.Join(mediaPrefix, rel))
		if err != nil {
			what = "cannot be read from the mirror: " + err.Error()
		} else {
			h := sha256.New()
			n, err := io.Copy(h, io.LimitReader(rc, drillMediaBytes))
			rc.Close()
			got := FileSum{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
			switch {
			case err != nil:
				what = "cannot be read from the mirror: " + err.Error()
			case got != live:
				what = fmt.Sprintf("differs on the mirror: %d bytes with SHA-256 %.12s…, live %d bytes with %.12s…", got.Size, got.SHA256, live.Size, live.SHA256)
			}
		}
		if what != "" {
			pr := nah.PersonRel(owner)
			r.Failures = append(r.Failures, DrillFailure{Rel: rel, Who: d.who(ctx, pr), What: "media file " + path.Base(rel) + " " + what})
			continue
		}
		r.MediaOK++
	}
}

// DirectoryRel is the directory database's path under the data directory.
const DirectoryRel = nah.DirectoryRel
