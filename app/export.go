package app

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// A person's export: GET /api/v1/me/export for the person, and
// the console's "Export" on their page for an operator. The store makes
// the tar (store/lifecycle_export.go); this file only bounds it and answers.

const (
	// exportsPerPerson in exportWindow: an export copies the whole
	// person file, where a feed reads a page of it.
	exportsPerPerson = 1
	exportWindow     = time.Minute
	// exportCost is what an export in flight holds besides its request's
	// base cost: its 32 KiB copy buffer, tar's header blocks, the sha256
	// state and net/http's write buffer, rounded up. The copy of the
	// database is on disk, and SQLite's pages during the backup are under
	// its own soft heap limit.
	exportCost = 64 << 10
	// exportSQLite is the SQLite memory an export holds while its tar
	// streams, outside the Go heap and not in store.SQLiteMemoryBound:
	// about 380 KB, a read connection to the file and one to the copy,
	// which reads its media rows (measured in TestExportMeasure).
	exportSQLite = 384 << 10
)

// takeExport reserves an export's memory. Exports in flight are bounded
// by the memory budget, not by a count: each takes exportCost +
// exportSQLite (448 KiB) of its bulk share, and all of them at most a
// quarter of the budget: 35 exports of the server's default 62 MiB. A slow
// reader's export may last hours (2 GiB at 45 KB/s: 13 h) and a person has
// one at a time (exportTurn), so holding them all takes 35 accounts where
// 4 took the 4 slots there were, and the other three quarters stay for
// feeds, posts and the full backup, which has a slot of its own.
func (a *App) takeExport() (give func(), err error) {
	const n = exportCost + exportSQLite
	if a.exportsHeld.Add(n) > a.mem.limit/4 {
		a.exportsHeld.Add(-n)
		a.mem.shed.Add(1)
		return nil, errOverloaded()
	}
	if !a.mem.takeBulk(n) {
		a.exportsHeld.Add(-n)
		return nil, errOverloaded()
	}
	return func() {
		a.mem.give(n)
		a.exportsHeld.Add(-n)
	}, nil
}

// errExportInFlight answers a second export of one person while the
// first is still being sent.
func errExportInFlight() error {
	e := nah.Errorf(nah.RateLimited, "export_in_flight", "an export of this person is still being sent: wait for it to finish")
	e.RetryAfter = exportWindow
	return e
}

// exportTurn is person id's slot for an export: one in flight at a time,
// and with l (the API's) at most exportsPerPerson a window. The limiter's
// count goes to *at, for the caller to give back if nothing is sent.
func (a *App) exportTurn(id string, l *limiter, at *attempt) taker {
	return func() (func(), error) {
		a.exportMu.Lock()
		_, busy := a.exporting[id]
		if !busy {
			a.exporting[id] = struct{}{}
		}
		a.exportMu.Unlock()
		if busy {
			return nil, errExportInFlight()
		}
		give := func() {
			a.exportMu.Lock()
			delete(a.exporting, id)
			a.exportMu.Unlock()
		}
		var err error
		if *at, err = l.take(id); err != nil {
			give()
			return nil, err
		}
		return give, nil
	}
}

// pacedWriter paces a download of any size (an export, the full backup, a
// nightly copy) on its total bytes, as a media download is: the write that
// brings the total to n must be taken by Transfer.deadline(start, n), 30 s
// + n/16 KiB/s by default. A client that keeps the minimum rate on average
// is never cut off, however much the kernel buffers and however long one
// write waits for its room (a deadline per write expired at 20,000 B/s
// after 3.3 MB: the kernel let a write on only once a megabyte had drained).
// The kernel's unsent bytes are bounded (limitUnsent), so that what was
// written is what the client took, give or take 64 KiB and its receive
// buffer: a client that stops reading is cut off within about Grace.
type pacedWriter struct {
	w     io.Writer
	rc    *http.ResponseController
	t     Transfer
	start time.Time
	n     int64
}

func newPacedWriter(w http.ResponseWriter, r *http.Request, t Transfer) *pacedWriter {
	limitUnsent(r)
	return &pacedWriter{w: w, rc: http.NewResponseController(w), t: t, start: time.Now()}
}

func (p *pacedWriter) Write(b []byte) (int, error) {
	if err := p.rc.SetWriteDeadline(p.t.deadline(p.start, p.n+int64(len(b)))); err != nil {
		return 0, err
	}
	n, err := p.w.Write(b)
	p.n += int64(n)
	return n, err
}

// handleExport streams the signed-in person's export.
func (a *App) handleExport(w http.ResponseWriter, r *http.Request) {
	a.serveExport(w, r, sessionOf(r).person.ID, a.exportByPerson, a.writeError)
}

// handlePersonExport is the console's "Export": the same tar, for an
// operator. It is not counted against the person's limit (an operator's
// download must not cost the person theirs); the memory budget still
// bounds how many run at once.
func (a *App) handlePersonExport(w http.ResponseWriter, r *http.Request) {
	a.serveExport(w, r, chi.URLParam(r, "id"), nil, func(w http.ResponseWriter, r *http.Request, err error) {
		a.consoleError(w, r, page(r, "Person", "people"), err)
	})
}

// serveExport answers with person id's export. Every error before the
// first byte goes to fail, the caller's one error path; after it, the
// status is sent and a failure can only abort the connection, so that
// the client sees a broken download rather than a truncated tar that
// looks whole. A HEAD gets the headers without the work.
func (a *App) serveExport(w http.ResponseWriter, r *http.Request, id string, l *limiter,
	fail func(http.ResponseWriter, *http.Request, error)) {
	if r.Method == http.MethodHead {
		p, err := a.store.FindPersonByID(r.Context(), id)
		if err != nil {
			fail(w, r, err)
			return
		}
		setExportHeaders(w, store.ExportFilename(p.Handle, a.now()))
		w.WriteHeader(http.StatusOK)
		return
	}
	var at attempt
	done, err := admitTransfer(a.exportTurn(id, l, &at), a.takeExport)
	if err != nil {
		at.giveBack() // refused: not an export (a zero attempt gives nothing back)
		fail(w, r, err)
		return
	}
	defer done()
	e, err := a.store.ExportPerson(r.Context(), id, a.cfg.Version)
	if err != nil {
		at.giveBack() // nothing was sent: trying again is not another export
		fail(w, r, err)
		return
	}
	defer e.Close()
	setExportHeaders(w, e.Filename())
	w.WriteHeader(http.StatusOK)
	if _, err := e.WriteTo(newPacedWriter(w, r, a.cfg.Transfer)); err != nil {
		if !errors.Is(r.Context().Err(), context.Canceled) {
			a.log.Error("export: streaming failed", "person", id, "err", err)
		}
		panic(http.ErrAbortHandler)
	}
}

// setExportHeaders sets what a download of an export carries. The name
// needs no escaping in quotes: handles are a-z, 0-9, '.', '_' and '-'.
func setExportHeaders(w http.ResponseWriter, filename string) {
	h := w.Header()
	h.Set("Content-Type", "application/x-tar")
	h.Set("Content-Disposition", `attachment; filename="`+filename+`"`)
	h.Set("Cache-Control", "no-store")
}
