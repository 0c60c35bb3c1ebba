package app

import (
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
	"github.com/nah-app/nah/ui"
)

// The console's "Import a person": an operator uploads
// a person's export from another server, and the store recreates them
// (store/import.go). The upload is streamed from the request into the
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
)

// handlePersonImport streams an uploaded export into store.ImportPerson and
// shows the one-time link once, with the former connections present here.
// One import runs at a time: it is bound by the disk, and a second
// operator gets "busy" rather than halving the first one's speed.
func (a *App) handlePersonImport(w http.ResponseWriter, r *http.Request) {
	pg := page(r, "Import a person", "people")
	fail := func(err error) { a.consoleError(w, r, pg, err) }
	select {
	case a.imports <- struct{}{}:
		defer func() { <-a.imports }()
	default:
		fail(errOverloaded())
		return
	}
	if err := a.takeOrOverloaded(importCost); err != nil {
		fail(err)
		return
	}
	defer a.mem.give(importCost)
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
	var handle string
	for {
		part, err := mr.NextPart()
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
		case importFileField:
			a.importFrom(w, r, pg, part, handle)
			return
		}
		part.Close()
	}
}

func (a *App) importFrom(w http.ResponseWriter, r *http.Request, pg ui.Page, part *multipart.Part, handle string) {
	res, err := a.store.ImportPerson(r.Context(), part, store.ImportOptions{Handle: handle, MaxBytes: importMaxBytes, MaxMomentBytes: a.cfg.MaxMomentBytes, MaxMediaBytes: a.cfg.MaxMediaBytes, QuotaBytes: a.cfg.QuotaBytes})
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

// uploadErr says that an upload over the limit is too large, whatever
// layer (multipart, tar) noticed.
func uploadErr(err error) error {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return nah.Errorf(nah.TooLarge, "", "the upload is over the limit of %d bytes", mb.Limit)
	}
	return err
}
