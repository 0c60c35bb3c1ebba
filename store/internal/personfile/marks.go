package personfile

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/nah-app/nah"
)

// marks is which people's files may hold writes the replica lacks, kept
// on disk so that a start after a kill replicates them: one journal in the
// queue's folder, a line a change ("+id" marked, "-id" let go), replayed
// at start. A change is one append; an empty file a person was a create
// and an unlink, a visible share of the server's CPU under people-10k's
// burst (bench/THRESHOLDS.md). Nothing is synced: a power cut may lose a mark,
// and that file then waits for its next write or the nightly sweep.
type marks struct {
	dir string
	log *slog.Logger
	set map[string]bool

	f       *os.File // the journal, written at its end; nil until needed, or after a failed write
	lines   int      // in the journal
	failing bool     // the last change could not be written (said once)
	buf     []byte
}

// marksFile is the journal's name in the queue's folder: no person id.
// It is written afresh with the live marks alone once it has more than
// twice their lines and marksSlack more, so it stays a few kilobytes.
const (
	marksFile  = "marks"
	marksSlack = 1024
)

func (m *marks) add(id string) {
	if m.set[id] {
		return
	}
	m.set[id] = true
	m.write('+', id)
}

func (m *marks) remove(id string) {
	if !m.set[id] {
		return
	}
	delete(m.set, id)
	m.write('-', id)
}

// write appends one change, or writes the journal afresh when it is long
// or its last write failed (a torn line would spoil the next).
func (m *marks) write(op byte, id string) {
	var err error
	if m.f == nil || m.lines >= 2*len(m.set)+marksSlack {
		err = m.rewrite()
	} else {
		m.buf = append(append(append(m.buf[:0], op), id...), '\n')
		_, err = m.f.Write(m.buf)
		m.lines++
	}
	if err != nil && !m.failing {
		m.log.Warn("replication: cannot keep the queue on disk (said once until it works again)", "err", err)
	}
	m.failing = err != nil
	if err != nil && m.f != nil {
		m.f.Close()
		m.f = nil
	}
}

// rewrite replaces the journal with one that holds the live marks alone:
// written beside it and renamed over it, so a kill leaves one or the other.
func (m *marks) rewrite() error {
	if m.f != nil {
		m.f.Close()
		m.f = nil
	}
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(m.dir, marksFile+".new")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	b := m.buf[:0]
	for id := range m.set {
		b = append(append(append(b, '+'), id...), '\n')
	}
	if _, err = f.Write(b); err == nil {
		err = os.Rename(tmp, filepath.Join(m.dir, marksFile))
	}
	if cap(b) <= 64<<10 {
		m.buf = b
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	m.f, m.lines = f, len(m.set) // the file renamed is the journal, at its end
	return nil
}

// close writes the journal afresh, for a clean stop: what it holds then
// is the files a stop could not replicate.
func (m *marks) close() {
	if err := m.rewrite(); err != nil {
		m.log.Warn("replication: queue on disk", "err", err)
	}
	if m.f != nil {
		m.f.Close()
		m.f = nil
	}
}

// load takes up the marks a previous run left, oldest first, each with
// when it was marked (the journal's time for its lines), and writes them
// as a journal of their own. The empty file a person that a run before
// the journal left counts as a mark, and goes once the journal holds it.
func (m *marks) load() (ids []string, at map[string]time.Time, err error) {
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return nil, nil, err
	}
	set, at, old, err := readMarks(m.dir)
	for id := range set {
		m.set[id] = true
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return at[ids[i]].Before(at[ids[j]]) })
	if werr := m.rewrite(); werr != nil {
		return ids, at, errors.Join(err, werr) // the old files stay: the next start reads them
	}
	for _, id := range old {
		if rerr := os.Remove(filepath.Join(m.dir, id)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return ids, at, err
}

// Marked is the set of people the queue in dir has marked on disk: what
// a start after a kill would replicate.
func Marked(dir string) (map[string]bool, error) {
	set, _, _, err := readMarks(dir)
	return set, err
}

// readMarks replays dir's journal and adds the files named after a person
// (old, the earlier layout's marks). Lines that are not a change of a
// valid person id (one torn by a power cut) are skipped.
func readMarks(dir string) (set map[string]bool, at map[string]time.Time, old []string, err error) {
	set, at = make(map[string]bool), make(map[string]time.Time)
	es, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		return set, at, nil, err
	}
	oldAt := make(map[string]time.Time)
	for _, e := range es {
		name := e.Name()
		info, ierr := e.Info()
		if ierr != nil {
			continue
		}
		switch {
		case name == marksFile:
			b, rerr := os.ReadFile(filepath.Join(dir, name))
			if rerr != nil {
				err = errors.Join(err, rerr)
				continue
			}
			for line := range bytes.SplitSeq(b, []byte{'\n'}) {
				if len(line) < 2 || !nah.ValidPersonID(string(line[1:])) {
					continue
				}
				id := string(line[1:])
				switch line[0] {
				case '+':
					if !set[id] {
						set[id], at[id] = true, info.ModTime()
					}
				case '-':
					delete(set, id)
					delete(at, id)
				}
			}
		case nah.ValidPersonID(name):
			old = append(old, name)
			oldAt[name] = info.ModTime()
		}
	}
	for _, id := range old {
		if !set[id] {
			set[id], at[id] = true, oldAt[id]
		}
	}
	return set, at, old, err
}
