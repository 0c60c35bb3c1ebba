package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nah-app/nah"
)

// A held import is an uploaded export kept under a one-time ticket after
// its import was refused for a taken handle, so that the console can
// import it under another handle without a second upload. Held files live
// in importHeldDir under the data directory, named by their ticket.
const (
	importHeldDir = "import-held"
	// MaxHeldImports bounds the files kept: holding one more removes the
	// oldest. An export is up to 1 GiB (DefaultImportMaxBytes), so held
	// files take 4 GiB of disk at the very worst, for an hour at most.
	MaxHeldImports = 4
	// HeldImportTTL is how long a held file is kept: removed by the next
	// hold or take after it, and by Open.
	HeldImportTTL   = time.Hour
	heldTicketBytes = 16
)

var errNoHeld = nah.Errorf(nah.NotFound, "",
	"that upload is no longer kept (an hour at most, and only the last %d): choose the export file again", MaxHeldImports)

func (s *Store) heldDir() string { return filepath.Join(s.dir, importHeldDir) }

// heldPath is the file of ticket, or "" when ticket is not one's shape (it
// comes from a form: never a path of the client's choosing).
func (s *Store) heldPath(ticket string) string {
	if len(ticket) != 2*heldTicketBytes || strings.Trim(ticket, "0123456789abcdef") != "" {
		return ""
	}
	return filepath.Join(s.heldDir(), ticket+".tar")
}

func newHeldTicket() string {
	b := make([]byte, heldTicketBytes)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// HeldUpload is an upload being written, to be kept (Keep) or not (Drop).
// Until then it lives in an import's temporary folder, locked as an
// import's is (lifecycle_import.go), so that a crash leaves nothing that
// the next Open does not remove.
type HeldUpload struct {
	s    *Store
	f    *os.File
	tmp  string
	lock *os.File
	done bool
}

// HeldImports are the exports the console keeps under a ticket after an
// import refused for a taken handle, until it is tried under another.
type HeldImports struct{ s *Store }

// HeldImports returns the store's held imports.
func (s *Store) HeldImports() HeldImports { return HeldImports{s} }

// Hold starts a held upload.
func (hi HeldImports) Hold() (*HeldUpload, error) {
	s := hi.s
	tmp, lock, err := makeImportTmp(s.dir)
	if err != nil {
		return nil, s.spaceErr(err)
	}
	f, err := os.OpenFile(filepath.Join(tmp, "held.tar"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, privateFile)
	if err != nil {
		removeImportTmp(tmp, lock)
		return nil, s.spaceErr(err)
	}
	return &HeldUpload{s: s, f: f, tmp: tmp, lock: lock}, nil
}

// Write writes the upload's next bytes.
func (h *HeldUpload) Write(p []byte) (int, error) { return h.f.Write(p) }

// Drop forgets the upload (after Keep, what Keep did not move).
func (h *HeldUpload) Drop() {
	if h.done {
		return
	}
	h.done = true
	h.f.Close()
	removeImportTmp(h.tmp, h.lock)
}

// Keep keeps the upload, written whole, under a new ticket for
// HeldImportTTL from now (by the store's clock, which removeOldHeld
// reads). Past HeldImportTTL held files are removed first and, when
// MaxHeldImports are held, the oldest.
func (h *HeldUpload) Keep() (string, error) {
	defer h.Drop()
	s := h.s
	if err := h.f.Close(); err != nil {
		return "", s.spaceErr(err)
	}
	if err := os.MkdirAll(s.heldDir(), privateDir); err != nil {
		return "", s.spaceErr(err)
	}
	held := removeOldHeld(s.heldDir(), s.now())
	for len(held) >= MaxHeldImports {
		os.Remove(held[0].path)
		held = held[1:]
	}
	ticket := newHeldTicket()
	now := s.now()
	if err := os.Chtimes(h.f.Name(), now, now); err != nil {
		return "", err
	}
	if err := os.Rename(h.f.Name(), s.heldPath(ticket)); err != nil {
		return "", s.spaceErr(err)
	}
	return ticket, nil
}

// Take opens the held file of ticket for reading under a new ticket, which
// it returns: ticket itself no longer works, so a form sent twice imports
// once. A ticket unknown, past HeldImportTTL or malformed is not_found,
// saying to choose the file again.
func (hi HeldImports) Take(ctx context.Context, ticket string) (*os.File, string, error) {
	s := hi.s
	removeOldHeld(s.heldDir(), s.now())
	p := s.heldPath(ticket)
	if p == "" {
		return nil, "", errNoHeld
	}
	next := newHeldTicket()
	if err := os.Rename(p, s.heldPath(next)); errors.Is(err, fs.ErrNotExist) {
		return nil, "", errNoHeld
	} else if err != nil {
		return nil, "", err
	}
	// The rename keeps the file's time: its hour counts from the upload.
	f, err := os.Open(s.heldPath(next))
	if err != nil {
		return nil, "", err
	}
	return f, next, nil
}

// Drop removes the held file of ticket, if any, and their folder once it is
// empty.
func (hi HeldImports) Drop(ticket string) {
	s := hi.s
	if p := s.heldPath(ticket); p != "" {
		os.Remove(p)
	}
	os.Remove(s.heldDir()) // only if empty
}

type heldFile struct {
	path string
	mod  time.Time
}

// removeOldHeld removes the held files in dir past HeldImportTTL (by the
// clock of now, so that a test's clock ages them) and returns the others,
// oldest first.
func removeOldHeld(dir string, now time.Time) []heldFile {
	es, _ := os.ReadDir(dir)
	var held []heldFile
	for _, e := range es {
		info, err := e.Info()
		if err != nil {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if now.Sub(info.ModTime()) >= HeldImportTTL {
			os.Remove(p)
			continue
		}
		held = append(held, heldFile{p, info.ModTime()})
	}
	slices.SortFunc(held, func(a, b heldFile) int { return a.mod.Compare(b.mod) })
	return held
}

// SuggestHandle is a handle like taken that nobody has here: taken with 2,
// 3, … 99 after it (shortened to fit), or "" when all are taken.
func (s *Store) SuggestHandle(ctx context.Context, taken string) string {
	for i := 2; i < 100; i++ {
		n := strconv.Itoa(i)
		h := taken
		if len(h)+len(n) > nah.HandleMaxLen {
			h = h[:nah.HandleMaxLen-len(n)]
		}
		h += n
		if nah.CheckHandle(h) != nil {
			continue
		}
		if _, _, err := s.FindPersonByHandle(ctx, h); nah.ErrorCode(err) == nah.NotFound {
			return h
		}
	}
	return ""
}
