package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"
)

// The sweep is the second, independent copy: every database, written
// recently or not for months, copied whole with SQLite's online backup API
// to <target>/sweeps/<stamp>/<path under the data directory>, with a
// manifest written last (a sweep without one was cut short and is never
// restored from). It needs no Litestream history, so a corrupt or pruned
// history still leaves plain .db files to fall back on.

// sweepPrefix is where sweeps live on the target.
const sweepPrefix = "sweeps"

// stampFormat names a sweep by its start, sortable as text.
const stampFormat = "20060102T150405Z"

// SweepManifest is sweeps/<stamp>/manifest.json.
type SweepManifest struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Files    []string  `json:"files"` // paths under the data directory
	Bytes    int64     `json:"bytes"`
	Failed   []string  `json:"failed,omitempty"` // "path: error"
	// Sums are each copy's size and SHA-256 as the sweep wrote it, so that
	// the restore drill can tell a copy that changed on the target since.
	Sums map[string]FileSum `json:"sums,omitempty"`
}

// FileSum is one sweep copy's size and SHA-256 (hex).
type FileSum struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// SweepResult is the last sweep as the Backups page shows it.
type SweepResult struct {
	Stamp    string
	Started  time.Time
	Duration time.Duration
	Files    int
	Bytes    int64
	Failed   []string
	Err      string // the sweep as a whole failed (target unreachable)

	MediaCopied int   // media files new since the last sweep, copied
	MediaBytes  int64 // their bytes
}

// Sweeper runs sweeps of Source's databases and media. Media files never
// change once written: they are mirrored once to <target>/media/<path
// under the data directory> rather than copied into every sweep, and a
// mirrored file whose original is gone (media deleted, person purged)
// goes from the target too.
type Sweeper struct {
	Target *Target
	Keep   int           // sweeps kept on the target (7)
	Pace   time.Duration // pause between files, so the sweep never crowds requests
	Source Source

	mu      sync.Mutex
	last    SweepResult
	running bool
	now     SweepProgress // the sweep running now
	asked   bool          // Ask's sweep has not started yet
	kick    chan struct{}
	copies  map[string]NightlyCopy // Copies' cache, by stamp
}

// SweepProgress is how far the sweep running now has come.
type SweepProgress struct {
	Asked   bool // asked for and about to start
	Stamp   string
	Started time.Time
	Done    int // databases copied or failed so far
	Total   int // databases to copy
	Bytes   int64
	Media   bool // the databases are done; the media mirror runs
}

// Last is the newest sweep's result (zero before the first), and whether
// one runs now or is asked for.
func (s *Sweeper) Last() (SweepResult, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.running || s.asked
}

// Progress is the sweep running now or asked for (false: none).
func (s *Sweeper) Progress() (SweepProgress, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.asked && !s.running {
		return SweepProgress{Asked: true}, true
	}
	return s.now, s.running
}

// Ask asks Backups.Run for a sweep now: false while one runs or is
// already asked for, so that two clicks never make two.
func (s *Sweeper) Ask() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running || s.asked {
		return false
	}
	if s.kick == nil {
		s.kick = make(chan struct{}, 1)
	}
	select {
	case s.kick <- struct{}{}:
		s.asked = true
		return true
	default:
		return false
	}
}

// asks is the channel Ask signals on.
func (s *Sweeper) asks() <-chan struct{} {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kick == nil {
		s.kick = make(chan struct{}, 1)
	}
	return s.kick
}

// Run sweeps once, then prunes old sweeps.
func (s *Sweeper) Run(ctx context.Context, now time.Time) (SweepResult, error) {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return SweepResult{}, errors.New("a sweep is already running")
	}
	if now.UTC().Format(stampFormat) == s.last.Stamp {
		now = now.Add(time.Second) // one stamp, one sweep: two in a second would share a folder
	}
	s.running, s.asked = true, false
	s.now = SweepProgress{Stamp: now.UTC().Format(stampFormat), Started: now}
	select {
	case <-s.kick: // an ask made before this sweep started is this sweep
	default:
	}
	s.mu.Unlock()
	res, err := s.run(ctx, now)
	if err != nil {
		res.Err = err.Error()
	}
	s.mu.Lock()
	s.running, s.last, s.now = false, res, SweepProgress{}
	s.mu.Unlock()
	return res, err
}

func (s *Sweeper) run(ctx context.Context, now time.Time) (SweepResult, error) {
	stamp := now.UTC().Format(stampFormat)
	res := SweepResult{Stamp: stamp, Started: now}
	blobs := s.Target.store()
	rels, err := s.Source.Databases(ctx)
	if err != nil {
		return res, err
	}
	m := SweepManifest{Started: now.UTC(), Sums: map[string]FileSum{}}
	s.progress(func(p *SweepProgress) { p.Total = len(rels) })
	for _, rel := range rels {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		sum, err := s.copyOne(ctx, blobs, stamp, rel)
		if err != nil {
			m.Failed = append(m.Failed, rel+": "+err.Error())
		} else {
			m.Files = append(m.Files, rel)
			m.Bytes += sum.Size
			m.Sums[rel] = sum
		}
		s.progress(func(p *SweepProgress) { p.Done, p.Bytes = p.Done+1, m.Bytes })
		if s.Pace > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(s.Pace):
			}
		}
	}
	s.progress(func(p *SweepProgress) { p.Media = true })
	n, bytes, failed, err := s.mirrorMedia(ctx, blobs, rels)
	if err != nil {
		m.Failed = append(m.Failed, "media: "+err.Error())
	}
	res.MediaCopied, res.MediaBytes = n, bytes
	m.Failed = append(m.Failed, failed...)
	m.Finished = time.Now().UTC()
	res.Duration, res.Files, res.Bytes, res.Failed = m.Finished.Sub(m.Started), len(m.Files), m.Bytes, m.Failed
	body, _ := json.MarshalIndent(m, "", "  ")
	if err := blobs.put(ctx, path.Join(sweepPrefix, stamp, "manifest.json"), strings.NewReader(string(body)), int64(len(body))); err != nil {
		return res, err
	}
	return res, s.prune(ctx, blobs)
}

func (s *Sweeper) progress(f func(*SweepProgress)) {
	s.mu.Lock()
	f(&s.now)
	s.mu.Unlock()
}

func (s *Sweeper) copyOne(ctx context.Context, blobs blobStore, stamp, rel string) (FileSum, error) {
	f, err := s.Source.Backup(ctx, rel)
	if err != nil {
		return FileSum{}, err
	}
	sum, err := sumFile(f)
	if err != nil {
		f.Close()
		return sum, err
	}
	_, err = putFile(ctx, blobs, path.Join(sweepPrefix, stamp, rel), f)
	return sum, err
}

// sumFile reads f whole for its size and SHA-256, then rewinds it.
func sumFile(f *os.File) (FileSum, error) {
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return FileSum{}, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return FileSum{}, err
	}
	return FileSum{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// putFile stores f under key and closes it, returning its size.
func putFile(ctx context.Context, blobs blobStore, key string, f *os.File) (int64, error) {
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), blobs.put(ctx, key, f, st.Size())
}

// prune keeps the newest Keep complete sweeps and removes older ones and
// any cut-short sweep older than the newest complete one.
func (s *Sweeper) prune(ctx context.Context, blobs blobStore) error {
	sweeps, err := listSweeps(ctx, blobs)
	if err != nil {
		return err
	}
	keep := max(s.Keep, 1)
	complete := 0
	var errs []error
	for i := len(sweeps) - 1; i >= 0; i-- {
		sw := sweeps[i]
		if sw.complete {
			complete++
		}
		if complete > keep || (!sw.complete && complete > 0) {
			if err := blobs.remove(ctx, path.Join(sweepPrefix, sw.stamp)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

type sweepInfo struct {
	stamp    string
	complete bool
	files    map[string]bool
}

// listSweeps lists the sweeps on the target, oldest first.
func listSweeps(ctx context.Context, blobs blobStore) ([]sweepInfo, error) {
	keys, err := blobs.list(ctx, sweepPrefix)
	if err != nil {
		return nil, err
	}
	by := map[string]*sweepInfo{}
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, sweepPrefix+"/")
		if !ok {
			continue
		}
		stamp, file, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		if _, err := time.Parse(stampFormat, stamp); err != nil {
			continue
		}
		sw := by[stamp]
		if sw == nil {
			sw = &sweepInfo{stamp: stamp, files: map[string]bool{}}
			by[stamp] = sw
		}
		if file == "manifest.json" {
			sw.complete = true
		} else {
			sw.files[file] = true
		}
	}
	out := make([]sweepInfo, 0, len(by))
	for _, sw := range by {
		out = append(out, *sw)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].stamp < out[j].stamp })
	return out, nil
}

// NextSweep is the next time the daily sweep runs: at hour:00 UTC every
// interval (a day by default), counted from midnight.
func NextSweep(now time.Time, every time.Duration, at time.Duration) time.Time {
	if every < 24*time.Hour {
		at = 0 // a shorter interval counts from midnight
	}
	day := now.UTC().Truncate(24 * time.Hour)
	t := day.Add(at)
	for !t.After(now) {
		t = t.Add(every)
	}
	return t
}

// copyTo copies a sweep object of at most limit bytes into a new file at
// out; a larger one is refused before it is copied (ErrTooLarge), or once
// past limit if the target said a smaller size.
func copyTo(ctx context.Context, blobs blobStore, key, out string, limit int64) error {
	r, size, err := blobs.open(ctx, key)
	if err != nil {
		return err
	}
	defer r.Close()
	if size > limit {
		return fmt.Errorf("%s is %d bytes, %w (%d bytes)", key, size, ErrTooLarge, limit)
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(r, limit+1))
	if err == nil && n > limit {
		err = fmt.Errorf("past %d bytes, %w", limit, ErrTooLarge)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("copy %s: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
