package store

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/nah-app/nah"
)

// Faults of the disk. An unreadable person file harms only its owner: they
// get storage_unavailable (errUnreadable), Feed skips them, FileProblems lists
// them, and the handle leaves the cache so a repaired file heals by itself.
// A full disk refuses writes (InsufficientStorage); reads go on, through a
// snapshot if need be (openSnapshot), and Stats.DiskFull says so.

// unreadableLogEvery is how often one unreadable file is logged: every feed
// of its owner's connections meets it, and one line per feed would drown
// the log.
const unreadableLogEvery = 10 * time.Minute

// maxFileProblems bounds the list of unreadable files. It only ever holds
// files of people who exist, so it is bounded by the number of people
// anyway; past this many something is wrong with the whole disk, and the
// rest are logged, not listed.
const maxFileProblems = 10_000

// diskFullFor is how long after a write refused for lack of space the disk
// is reported full, unless a write goes through first. The file system's
// own figure (lowOnSpace) is checked as well: a disk can be full while
// nobody writes.
const diskFullFor = time.Minute

// lowSpace is the free space under which the disk counts as full: a moment
// of 64 KiB takes about 70 KB of WAL, and a file opened needs 32 KB of
// shared-memory index, so below 1 MiB writes start failing.
const lowSpace = 1 << 20

// faultKind is what an error says about the disk.
type faultKind int

const (
	noFault    faultKind = iota // not the disk's doing: passed on as it is
	noSpace                     // the disk is full
	unreadable                  // the file cannot be read
)

// errNoSchema is the error of an existing person file without a schema: it
// was emptied or truncated to nothing, which SQLite would otherwise take
// for a new, empty database and silently start again.
var errNoSchema = errors.New("the person file has no schema: it was emptied or replaced")

// kindOf classifies err from opening or using a file.
func (s *Store) kindOf(err error) faultKind {
	var ne *nah.Error
	switch {
	case err == nil, errors.As(err, &ne), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return noFault
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return noSpace
	case errors.Is(err, ErrTooNew), errors.Is(err, errNoSchema):
		return unreadable
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // the primary code of an extended one
		case sqlite3.SQLITE_FULL:
			return noSpace
		case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN:
			// SQLite reports some writes that found no space as I/O
			// errors (growing the shared-memory index, say): the file
			// system tells which it was.
			if lowOnSpace(s.dir) {
				return noSpace
			}
			return unreadable
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM:
			return unreadable
		}
		return noFault // busy, interrupted, a constraint: not the file's fault
	}
	var pe *fs.PathError
	if errors.As(err, &pe) { // the OS would not stat or open the file
		return unreadable
	}
	return noFault
}

// fault is a disk fault as the caller sees it: an *nah.Error for the
// client (errors.As finds it), with its cause kept for errors.Is and the
// log, and the person whose file it is ("" for the directory).
type fault struct {
	e      *nah.Error
	person string
	cause  error
}

func (f *fault) Error() string   { return f.e.Error() + ": " + f.cause.Error() }
func (f *fault) Unwrap() []error { return []error{f.e, f.cause} }

// retryUnreadable is the Retry-After of a file that cannot be read: it
// takes an operator to repair it, so clients need not ask every second.
const retryUnreadable = time.Minute

func errUnreadable(person string, cause error) error {
	return &fault{person: person, cause: cause, e: &nah.Error{
		Code: nah.Unavailable, Reason: "storage_unavailable", RetryAfter: retryUnreadable,
		Message: "these moments cannot be read or written right now: the server's operator has to repair the file that holds them",
	}}
}

// retryRestoring is the Retry-After of a person whose file is being
// restored to a time: the swap itself takes a second or two
// (TestBackupRestorePersonToTime), the restore from the replica before it
// a few seconds more.
const retryRestoring = 3 * time.Second

// errRestoring refuses person's requests while their file is replaced.
// It is a fault of that person: everyone else's feed leaves them out.
func errRestoring(person string) error {
	return &fault{person: person, cause: errors.New("the file is being restored"), e: &nah.Error{
		Code: nah.Unavailable, Reason: "storage_unavailable", RetryAfter: retryRestoring,
		Message: "these moments are being restored by the server's operator: try again in a few seconds",
	}}
}

func errDiskFull(person string, cause error) error {
	return &fault{person: person, cause: cause, e: &nah.Error{
		Code: nah.InsufficientStorage, Reason: "insufficient_storage",
		Message: "the server's disk is full, so nothing was saved; reading goes on, and writing works again once there is space",
	}}
}

// faultPerson returns the person whose file could not be used, when err
// is a disk fault of a person file, or "".
func faultPerson(err error) string {
	var f *fault
	if errors.As(err, &f) {
		return f.person
	}
	return ""
}

// spaceErr turns a full disk into InsufficientStorage, noting it for
// Stats; any other error is returned as it is. For the directory, and for
// a person file that does not exist yet.
func (s *Store) spaceErr(err error) error {
	if s.kindOf(err) == noSpace {
		s.noteFull(err)
		return errDiskFull("", err)
	}
	return err
}

// fileErr is spaceErr for an existing person's file, which may also turn
// out unreadable: it is then listed, logged and Unavailable.
func (s *Store) fileErr(id string, err error) error {
	switch s.kindOf(err) {
	case noSpace:
		s.noteFull(err)
		return errDiskFull(id, err)
	case unreadable:
		s.noteUnreadable(id, err)
		return errUnreadable(id, err)
	}
	return err
}

// noteFull records a write refused for lack of space, and logs it at most
// once per unreadableLogEvery.
func (s *Store) noteFull(err error) {
	now := max(s.now().UnixMilli(), 1)
	s.fullAt.Store(now)
	if last := s.fullLogged.Load(); now-last >= unreadableLogEvery.Milliseconds() && s.fullLogged.CompareAndSwap(last, now) {
		s.log.Error("disk full: writes are refused until there is space; reads go on", "dir", s.dir, "err", err)
	}
}

// noteWrote records a write that went through: the disk has space again.
// The flush of newest times, backing off after its own failures, is woken.
func (s *Store) noteWrote() {
	if s.fullAt.Load() == 0 || s.fullAt.Swap(0) == 0 {
		return
	}
	s.log.Info("disk has space again: writes go through")
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// DiskFull reports whether the disk counts as full: a write was refused for
// lack of space less than diskFullFor ago and none has gone through since,
// or the file system has less than lowSpace left.
func (s *Store) DiskFull() bool {
	if at := s.fullAt.Load(); at != 0 && s.now().UnixMilli()-at < diskFullFor.Milliseconds() {
		return true
	}
	return lowOnSpace(s.dir)
}

// FileProblem is a person file that cannot be read.
type FileProblem struct {
	PersonID string
	Since    int64  // unix ms (store clock) when it was first met
	Problem  string // what is wrong, a sentence for the operator
}

// problems is the list behind FileProblems.
type problems struct {
	mu       sync.Mutex
	byID     map[string]*problem
	n        atomic.Int64 // len(byID), read without the lock by every good use of a file
	overflow int64        // when the last file past maxFileProblems was logged

	// restoreFailed is the sentence of each person listed from the marker
	// of a failed restore (lifecycle_restorefailed.go): it says more than the
	// placeholder's "not a database", and stays until the file heals.
	restoreFailed map[string]string
}

type problem struct {
	FileProblem
	logged int64 // when it was last logged
}

// noteUnreadable lists person id's file as unreadable (or updates it),
// logging it if it was not logged in the last unreadableLogEvery, and drops
// the person's cached head: it is re-read when the file heals.
func (s *Store) noteUnreadable(id string, err error) {
	now := s.now().UnixMilli()
	every := unreadableLogEvery.Milliseconds()
	s.problems.mu.Lock()
	if s.problems.byID == nil {
		s.problems.byID = make(map[string]*problem)
	}
	p := s.problems.byID[id]
	log := false
	switch {
	case p != nil:
		log = now-p.logged >= every
	case len(s.problems.byID) < maxFileProblems:
		p = &problem{FileProblem: FileProblem{PersonID: id, Since: now}}
		s.problems.byID[id] = p
		s.problems.n.Add(1)
		log = true
	default:
		if now-s.problems.overflow >= every {
			s.problems.overflow = now
			s.log.Error("person file cannot be read (and more than can be listed)", "person", id, "listed", maxFileProblems, "err", err)
		}
	}
	if p != nil {
		p.Problem = describe(err)
		if why, ok := s.problems.restoreFailed[id]; ok {
			p.Problem = why
		}
		if log {
			p.logged = now
		}
	}
	s.problems.mu.Unlock()
	if log {
		s.log.Error("person file cannot be read: their connections' feeds skip them, they get 503",
			"person", id, "problem", p.Problem, "err", err)
	}
	if n := s.graph.node(id); n != nil {
		s.dropHead(n)
	}
}

// noteReadable takes person id's file off the list after a good use.
func (s *Store) noteReadable(id string) {
	if s.problems.n.Load() == 0 {
		return
	}
	s.problems.mu.Lock()
	_, ok := s.problems.byID[id]
	if ok {
		delete(s.problems.byID, id)
		s.problems.n.Add(-1)
	}
	_, marked := s.problems.restoreFailed[id]
	delete(s.problems.restoreFailed, id)
	s.problems.mu.Unlock()
	if marked {
		// The file was mended: its marker would list it again at the next start.
		if err := os.Remove(restoreFailedPath(s.dir, id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("remove the marker of a failed restore", "person", id, "err", err)
		}
	}
	if ok {
		s.log.Info("person file readable again", "person", id)
	}
}

// FileProblems lists the person files that cannot be read, the longest
// known first. A file is listed from the first time it fails until it is
// next read or written without error.
func (s *Store) FileProblems() []FileProblem {
	s.problems.mu.Lock()
	ps := make([]FileProblem, 0, len(s.problems.byID))
	for _, p := range s.problems.byID {
		ps = append(ps, p.FileProblem)
	}
	s.problems.mu.Unlock()
	slices.SortFunc(ps, func(a, b FileProblem) int {
		return cmp.Or(cmp.Compare(a.Since, b.Since), cmp.Compare(a.PersonID, b.PersonID))
	})
	return ps
}

// FileProblemOf returns the problem of person id's file, if it is listed.
func (s *Store) FileProblemOf(id string) (FileProblem, bool) {
	if s.problems.n.Load() == 0 {
		return FileProblem{}, false
	}
	s.problems.mu.Lock()
	defer s.problems.mu.Unlock()
	if p := s.problems.byID[id]; p != nil {
		return p.FileProblem, true
	}
	return FileProblem{}, false
}

// describe says what is wrong with a file in a fixed sentence for the
// operator: error texts hold paths and codes, not advice.
func describe(err error) string {
	switch {
	case errors.Is(err, ErrTooNew):
		return "it was written by a newer version of nah than this one"
	case errors.Is(err, errNoSchema):
		return "it is empty: it was emptied or truncated to nothing"
	case errors.Is(err, errRestoreFailed):
		return "nah restore could not restore it"
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_NOTADB:
			return "it is not a database: it was overwritten or replaced"
		case sqlite3.SQLITE_CORRUPT:
			return "it is damaged: part of it is missing or overwritten"
		case sqlite3.SQLITE_IOERR:
			return "the disk failed to read or write it"
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM, sqlite3.SQLITE_READONLY:
			return "it cannot be opened for reading and writing: check that it exists and that the server may write it"
		}
	}
	return "it cannot be opened: check that it exists and that the server may read it"
}
