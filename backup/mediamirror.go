package backup

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nah-app/nah"
)

// A person's media reach the target soon after they land, not only at the
// sweep: the store tells MediaMirror of a person whose media folder gained
// files, and once that person has been quiet for Quiet (or waited MaxWait)
// the sweep's own mirrorPerson copies what the target lacks, one person at
// a time. The people waiting are also marks on disk, so that a kill leaves
// none behind: the next start mirrors them first.

// Media mirror timings (cmd/nah uses these): a phone sends a burst one
// photo after the other, each 1-3 s on a home uplink (3 MB at 10-20
// Mbit/s), so 10 s without a new one ends a burst of 20 as one mirror; a
// steady stream is mirrored at least once a minute.
const (
	MediaMirrorQuiet   = 10 * time.Second
	MediaMirrorMaxWait = time.Minute
)

// mediaMirrorMax bounds the people waiting: 133 bytes each (the map's
// entry 101, measured with runtime.MemStats over 10,000, and the id 32),
// so 1.3 MB; one more waits for the sweep. The ids are the store's own
// (validated here again), never a client's.
const mediaMirrorMax = 10_000

// mediaMirrorAtStop bounds the mirror of the people still waiting at a
// clean stop; those it does not reach keep their marks for the next start.
const mediaMirrorAtStop = 30 * time.Second

// MediaMirror mirrors the media of people queued by Queue (Run).
type MediaMirror struct {
	Target  *Target
	Source  Source // set before Run
	DataDir string // a person is mirrored while people/<id>/person.db is there
	// Dir keeps a mark (an empty file named by the id) for each person
	// waiting; "" keeps none.
	Dir     string
	Quiet   time.Duration // MediaMirrorQuiet when zero
	MaxWait time.Duration // MediaMirrorMaxWait when zero
	Pace    time.Duration // pause between two people, as the sweep's
	Log     *slog.Logger

	mu      sync.Mutex
	waiting map[string]mediaWait
	full    bool // a person was left to the sweep: logged once
	wake    chan struct{}
}

// mediaWait is when a person waiting was first and last queued.
type mediaWait struct{ first, last time.Time }

// init makes the queue; m.mu is held.
func (m *MediaMirror) init() {
	if m.waiting == nil {
		m.waiting = map[string]mediaWait{}
		m.wake = make(chan struct{}, 1)
	}
}

// Queue asks for person id's media to be mirrored soon. It never blocks
// on the target; it writes the person's mark when they were not waiting.
func (m *MediaMirror) Queue(id string) {
	if m == nil || !nah.ValidPersonID(id) {
		return
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	w, ok := m.waiting[id]
	if !ok {
		if len(m.waiting) >= mediaMirrorMax {
			if !m.full {
				m.log().Warn("media mirror: too many people waiting; the next sweep mirrors the rest", "waiting", len(m.waiting))
			}
			m.full = true
			return
		}
		w.first = now
		m.mark(id)
	}
	w.last = now
	m.waiting[id] = w
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Waiting is how many people wait for their media's mirror and how long
// the first of them has waited.
func (m *MediaMirror) Waiting() (n int, oldest time.Duration) {
	if m == nil {
		return 0, 0
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.waiting {
		if !w.first.IsZero() {
			oldest = max(oldest, now.Sub(w.first))
		}
	}
	return len(m.waiting), oldest
}

func (m *MediaMirror) log() *slog.Logger {
	if m.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return m.Log
}

func (m *MediaMirror) mark(id string) {
	if m.Dir == "" {
		return
	}
	err := os.WriteFile(filepath.Join(m.Dir, id), nil, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(m.Dir, 0o700); err == nil {
			err = os.WriteFile(filepath.Join(m.Dir, id), nil, 0o600)
		}
	}
	if err != nil {
		m.log().Warn("media mirror: mark a person waiting", "person", id, "err", err)
	}
}

// Run mirrors the people waiting, those marked by the last run first,
// until ctx ends; then the people still waiting, for mediaMirrorAtStop
// at most.
func (m *MediaMirror) Run(ctx context.Context) {
	m.mu.Lock()
	m.init()
	wake := m.wake
	m.mu.Unlock()
	m.load()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var pause time.Time // a mirror failed as a whole (the target, say): none before
	for {
		var due []string
		next := time.Until(pause)
		if next <= 0 {
			due, next = m.due(time.Now(), false)
		}
		for _, id := range due {
			if ctx.Err() != nil {
				break
			}
			if err := m.mirror(ctx, id); err != nil && ctx.Err() == nil {
				pause = time.Now().Add(m.maxWait())
				break
			}
			if m.Pace > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(m.Pace):
				}
			}
		}
		if ctx.Err() != nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mediaMirrorAtStop)
			due, _ := m.due(time.Now(), true)
			for _, id := range due {
				if sctx.Err() != nil {
					break
				}
				m.mirror(sctx, id)
			}
			cancel()
			return
		}
		if len(due) > 0 {
			continue
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-t.C:
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
	}
}

func (m *MediaMirror) maxWait() time.Duration {
	if m.MaxWait <= 0 {
		return MediaMirrorMaxWait
	}
	return m.MaxWait
}

// due lists the people whose mirror is due at now (all of them when all),
// and how long until the next one is due.
func (m *MediaMirror) due(now time.Time, all bool) (ids []string, next time.Duration) {
	quiet, most := m.Quiet, m.maxWait()
	if quiet <= 0 {
		quiet = MediaMirrorQuiet
	}
	next = time.Hour
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, w := range m.waiting {
		at := w.last.Add(quiet)
		if limit := w.first.Add(most); limit.Before(at) {
			at = limit
		}
		if all || !at.After(now) {
			ids = append(ids, id)
		} else {
			next = min(next, at.Sub(now))
		}
	}
	return ids, next
}

// mirror mirrors person id's media with the sweep's mirrorPerson. They are
// taken off the queue first, so that media landing meanwhile queue them
// again; their mark goes once they are mirrored and not queued again. A
// person whose file is gone (deleted, purged) is left to the sweep, whose
// rule for them is theirs. A failure queues them again, due in MaxWait,
// and one of the mirror as a whole (the target's listing, their folder's
// read) is returned: Run then pauses, so that a target that is down is
// not asked for every person in turn.
func (m *MediaMirror) mirror(ctx context.Context, id string) (whole error) {
	m.mu.Lock()
	delete(m.waiting, id)
	m.mu.Unlock()
	_, err := os.Stat(filepath.Join(m.DataDir, filepath.FromSlash(nah.PersonRel(id))))
	switch {
	case err == nil:
		sw := Sweeper{Target: m.Target, Source: m.Source}
		start := time.Now()
		n, bytes, failed, merr := sw.mirrorPerson(ctx, m.Target.store(), id)
		if whole, err = merr, merr; err == nil && len(failed) > 0 {
			err = errors.New(failed[0])
		}
		m.log().Debug("media mirrored", "person", id, "copied", n, "bytes", bytes, "failed", len(failed), "took", time.Since(start).Round(time.Millisecond))
	case errors.Is(err, fs.ErrNotExist):
		err = nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, again := m.waiting[id]
	switch {
	case err != nil && !again:
		if ctx.Err() == nil {
			m.log().Warn("media mirror", "person", id, "err", err)
		}
		now := time.Now()
		m.waiting[id] = mediaWait{first: now, last: now.Add(m.maxWait())}
	case err == nil && !again && m.Dir != "":
		if err := os.Remove(filepath.Join(m.Dir, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log().Warn("media mirror: unmark a person", "person", id, "err", err)
		}
	}
	return whole
}

// load queues the people marked by the last run, due at once, 256 names a
// read and mediaMirrorMax at most (the rest wait for the next start or the
// sweep); a name that is no person id is removed.
func (m *MediaMirror) load() {
	if m.Dir == "" {
		return
	}
	if err := os.MkdirAll(m.Dir, 0o700); err != nil {
		m.log().Warn("media mirror: the marks' folder", "err", err)
		return
	}
	d, err := os.Open(m.Dir)
	if err != nil {
		m.log().Warn("media mirror: the marks' folder", "err", err)
		return
	}
	defer d.Close()
	for {
		es, rerr := d.ReadDir(256)
		m.mu.Lock()
		for _, e := range es {
			if !nah.ValidPersonID(e.Name()) || !e.Type().IsRegular() {
				os.RemoveAll(filepath.Join(m.Dir, e.Name()))
				continue
			}
			if len(m.waiting) < mediaMirrorMax {
				m.waiting[e.Name()] = mediaWait{} // due now
			}
		}
		m.mu.Unlock()
		if rerr != nil {
			if rerr != io.EOF {
				m.log().Warn("media mirror: the marks' folder", "err", rerr)
			}
			return
		}
	}
}
