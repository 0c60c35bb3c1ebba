package app

import (
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"time"

	"github.com/a-h/templ"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
	"github.com/nah-app/nah/ui"
)

// The console's "Import a person": an operator uploads
// a person's export from another server, and the store recreates them
// (store/lifecycle_import.go). The upload is streamed from the request into the
// store's temporary folder, never held in memory.

const (
	// importMaxBytes bounds the export's person.db, as the store's
	// default does; importMaxBody adds room for the manifest, the tar's
	// blocks and the multipart framing.
	importMaxBytes = store.DefaultImportMaxBytes
	importMaxBody  = importMaxBytes + 2<<20
	// importTimeout replaces the server's read and write timeouts for an
	// import: 30 minutes is 1 GiB at about 600 KB/s, an upload from a
	// home connection.
	importTimeout = 30 * time.Minute
	// importCost is what an import holds besides its request's base cost:
	// the 32 KiB copy buffer, multipart's 4 KiB reader and part headers,
	// the tar reader's blocks, the sha256 state, the manifest (at most
	// 1 MiB, read whole) and one moment's body at a time while the moments
	// are copied, at most NAH_MAX_MOMENT_BYTES (64 KiB by default: larger
	// ones are refused; SQLite's pages are under its own soft heap limit).
	// Rounded up to 2 MiB, a sliver of the budget, taken once since one
	// import runs at a time.
	importCost = 2 << 20
	// importHandleField and importFileField are the form's fields, in
	// the order the browser sends them: the handle must come first, since
	// the import starts as soon as the file's part begins.
	importHandleField = "handle"
	importFileField   = "export"
	// importTicketField names an export kept after its handle was
	// taken (store.HoldImport): the form sends it, and a new handle,
	// instead of the file.
	importTicketField = "ticket"
)

// handlePersonImport streams an uploaded export into store.ImportPerson and
// shows the one-time link once, with the former connections present here.
// One import runs at a time: it is bound by the disk, and a second
// operator gets "busy" rather than halving the first one's speed.
func (a *App) handlePersonImport(w http.ResponseWriter, r *http.Request) {
	pg := page(r, "Import a person", "people")
	fail := func(err error) { a.consoleError(w, r, pg, err) }
	done, err := admitTransfer(a.imports.take, a.charge(importCost))
	if err != nil {
		fail(err)
		return
	}
	defer done()
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(importTimeout)
	if err := errors.Join(rc.SetReadDeadline(deadline), rc.SetWriteDeadline(deadline)); err != nil {
		a.log.Warn("import: cannot extend the deadlines", "err", err)
	}
	r.Body = http.MaxBytesReader(w, r.Body, importMaxBody)
	mr, err := r.MultipartReader()
	if err != nil {
		fail(nah.Errorf(nah.Invalid, "", "send the export as a file of a multipart form"))
		return
	}
	var handle, ticket string
	for {
		part, err := mr.NextPart()
		if err == io.EOF && ticket != "" {
			a.importHeld(w, r, pg, ticket, handle)
			return
		}
		if err == io.EOF {
			fail(nah.Errorf(nah.Invalid, "", "choose the export file (.tar) to import"))
			return
		}
		if err != nil {
			fail(uploadErr(err))
			return
		}
		switch part.FormName() {
		case importHandleField:
			b, err := io.ReadAll(io.LimitReader(part, nah.HandleMaxLen+1))
			if err != nil {
				fail(uploadErr(err))
				return
			}
			handle = strings.ToLower(strings.TrimSpace(string(b)))
		case importTicketField:
			b, err := io.ReadAll(io.LimitReader(part, 64)) // a ticket is 32
			if err != nil {
				fail(uploadErr(err))
				return
			}
			ticket = string(b)
		case importFileField:
			a.importFrom(w, r, pg, part, handle)
			return
		}
		part.Close()
	}
}

// importFrom imports the uploaded export in part, and keeps a copy of it
// as it goes by (store.HoldImport): refused for a taken handle, the copy is
// kept, and the form asks for another handle instead of another upload.
// Writing the copy never fails the import: a copy that could not be
// written whole is dropped, and the form asks for the file again.
func (a *App) importFrom(w http.ResponseWriter, r *http.Request, pg ui.Page, part *multipart.Part, handle string) {
	held, err := a.store.HeldImports().Hold()
	if err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	kept := &keepWriter{w: held}
	res, err := a.store.ImportPerson(r.Context(), io.TeeReader(part, kept), a.importOptions(handle))
	if handleTaken(err) {
		// The tar's end blocks, which the import did not need to read.
		if _, cerr := io.Copy(kept, part); cerr == nil && kept.err == nil {
			if ticket, kerr := held.Keep(); kerr == nil {
				a.importAgain(w, r, err, res.Person.Handle, ticket)
				return
			}
		}
	}
	held.Drop()
	a.imported(w, r, pg, res, err)
}

// importHeld imports the export kept under ticket as handle. A handle
// taken again keeps it (under a new ticket: each works once), so does a
// handle that is no handle; anything else drops it.
func (a *App) importHeld(w http.ResponseWriter, r *http.Request, pg ui.Page, ticket, handle string) {
	if err := nah.CheckHandle(handle); err != nil {
		a.importAgain(w, r, err, "", ticket)
		return
	}
	f, next, err := a.store.HeldImports().Take(r.Context(), ticket)
	if err != nil {
		a.importAgain(w, r, err, "", "")
		return
	}
	res, err := a.store.ImportPerson(r.Context(), f, a.importOptions(handle))
	f.Close()
	if handleTaken(err) {
		a.importAgain(w, r, err, res.Person.Handle, next)
		return
	}
	a.store.HeldImports().Drop(next)
	a.imported(w, r, pg, res, err)
}

func (a *App) importOptions(handle string) store.ImportOptions {
	return store.ImportOptions{Handle: handle, MaxBytes: importMaxBytes, MaxMomentBytes: a.cfg.MaxMomentBytes, MaxMediaBytes: a.cfg.MaxMediaBytes, QuotaBytes: a.cfg.QuotaBytes}
}

func handleTaken(err error) bool {
	var e *nah.Error
	return errors.As(err, &e) && e.Reason == "handle_taken"
}

// importAgain answers a refused import with the People page, its import
// form open with the refusal: with ticket, the form asks only for a new
// handle (a free one like taken filled in); without, for the file again.
func (a *App) importAgain(w http.ResponseWriter, r *http.Request, err error, taken, ticket string) {
	v, verr := a.peopleView(r)
	if verr != nil {
		a.consoleError(w, r, v.Page, verr)
		return
	}
	v.ImportTicket = ticket
	if taken != "" {
		v.ImportHandle = a.store.SuggestHandle(r.Context(), taken)
	}
	a.respondError(w, r, err, func(e *nah.Error) templ.Component {
		v.ImportError = refusalText(e)
		return ui.PeoplePage(v)
	})
}

// imported answers an import that is done, or failed for good.
func (a *App) imported(w http.ResponseWriter, r *http.Request, pg ui.Page, res store.ImportResult, err error) {
	if err != nil {
		a.consoleError(w, r, pg, uploadErr(err))
		return
	}
	a.log.Info("imported a person", "person", res.Person.ID, "handle", res.Person.Handle, "moments", res.Moments)
	pg.Secret = ResetLink(a.cfg.PublicURL, res.Link)
	pg.SecretWarning = a.linkWarning()
	a.render(w, r, http.StatusCreated, ui.ImportedPage(ui.Imported{
		Page: pg, Person: toRow(res.Person), Moments: res.Moments, FormerConnections: res.Connections,
	}))
}

// keepWriter writes the held copy of an upload; its first error stops
// it, and is kept for later, so that the import reading beside it goes on.
type keepWriter struct {
	w   io.Writer
	err error
}

func (k *keepWriter) Write(p []byte) (int, error) {
	if k.err == nil {
		_, k.err = k.w.Write(p)
	}
	return len(p), nil
}

// uploadErr says that an upload over the limit is too large, whatever
// layer (multipart, tar) noticed.
func uploadErr(err error) error {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return nah.Errorf(nah.TooLarge, "", "the upload is over the limit of %d bytes", mb.Limit)
	}
	return err
}
