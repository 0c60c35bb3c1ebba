package app

import (
	"context"
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/ui"
)

// The nightly copies on the Backups page: each listed with its date and
// size and downloadable as a data directory, and "Make a copy now", the
// sweep on demand, one at a time (backup.Sweeper.Ask).

// copiesView fills the Backups page's list of nightly copies and the one
// being made. A target that does not answer leaves the list empty with
// its error, not the page failed.
func (a *App) copiesView(ctx context.Context, v *ui.Backups) {
	s := a.cfg.Backups.Sweep
	if s == nil {
		return
	}
	if p, ok := s.Progress(); ok {
		v.Copying = &ui.CopyProgress{Asked: p.Asked, Started: p.Started, Done: p.Done, Total: p.Total, Bytes: p.Bytes, Media: p.Media}
	}
	cs, err := s.Copies(ctx)
	if err != nil {
		a.log.Warn("backups: listing the nightly copies", "err", err)
		v.CopiesError = replicationProblem(err.Error(), a.cfg.Backups.Repl.Target().IsS3())
		return
	}
	for _, c := range cs {
		v.Copies = append(v.Copies, ui.CopyRow{Stamp: c.Stamp, Started: c.Started, Files: c.Files, Bytes: c.Bytes, Failed: c.Failed, Complete: c.Complete, Running: c.Running})
	}
}

// handleCopyNow is "Make a copy now": the sweep asked of the backup loop,
// which runs one at a time; the Backups page then says it started, or
// that one is already running.
func (a *App) handleCopyNow(w http.ResponseWriter, r *http.Request) {
	b := a.cfg.Backups
	if b == nil {
		a.consoleError(w, r, page(r, "Backups", "backups"), backupsOff())
		return
	}
	if b.Sweep == nil {
		a.consoleError(w, r, page(r, "Backups", "backups"), nah.Errorf(nah.NotFound, "", "Nightly copies are off (NAH_SWEEP_EVERY=off): set it in the environment file, then restart."))
		return
	}
	m := "copying"
	if !b.Sweep.Ask() {
		m = "copy-running"
	}
	http.Redirect(w, r, "/console/backups?m="+m+"#copies-title", http.StatusSeeOther)
}

// handleCopyDownload streams nightly copy {stamp} as a .tar.gz laid out as
// a data directory, with the full backup's headers, slot and memory cost;
// an error before the first byte is a page, one after it cuts the
// connection (backup.WriteCopy checks each file against its manifest).
func (a *App) handleCopyDownload(w http.ResponseWriter, r *http.Request) {
	pg := page(r, "Backups", "backups")
	b := a.cfg.Backups
	if b == nil {
		a.consoleError(w, r, pg, backupsOff())
		return
	}
	stamp := chi.URLParam(r, "stamp")
	noCopy := nah.Errorf(nah.NotFound, "", "There is no complete nightly copy %q on the target: the list on Backups shows those there are.", stamp)
	if r.Method == http.MethodHead {
		if !backup.HasCopy(r.Context(), b.Repl.Target(), stamp, a.databaseCount(r.Context())) {
			a.consoleError(w, r, pg, noCopy)
			return
		}
		setDownloadHeaders(w, backup.CopyName(stamp))
		w.WriteHeader(http.StatusOK)
		return
	}
	done, err := admitTransfer(a.fullBackups.take, a.charge(backup.ArchiveBytes))
	if err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	defer done()
	out := &firstByte{w: w, paced: newPacedWriter(w, r, a.cfg.Transfer), name: backup.CopyName(stamp)}
	err = backup.WriteCopy(r.Context(), b.Repl.Target(), stamp, a.databaseCount(r.Context()), out)
	switch {
	case err == nil:
	case !out.started && errors.Is(err, backup.ErrNoCopy):
		a.consoleError(w, r, pg, noCopy)
	case !out.started:
		a.log.Error("nightly copy download", "stamp", stamp, "err", err)
		a.consoleError(w, r, pg, nah.Errorf(nah.Unavailable, "", "The nightly copy %s could not be read from the target: %s", stamp, replicationProblem(err.Error(), b.Repl.Target().IsS3())))
	default:
		if !errors.Is(r.Context().Err(), context.Canceled) {
			a.log.Error("nightly copy download: streaming failed", "stamp", stamp, "err", err)
		}
		panic(http.ErrAbortHandler)
	}
}

// firstByte sends a download's headers and 200 with its first byte, so
// that what fails before it is still answered with a page.
type firstByte struct {
	w       http.ResponseWriter
	paced   *pacedWriter
	name    string
	started bool
}

func (f *firstByte) Write(b []byte) (int, error) {
	if !f.started {
		f.started = true
		setDownloadHeaders(f.w, f.name)
		f.w.WriteHeader(http.StatusOK)
	}
	return f.paced.Write(b)
}

// databaseCount is how many databases there are live, which bounds what a
// nightly copy's manifest may take (0 when they cannot be listed: then
// only a small manifest is read).
func (a *App) databaseCount(ctx context.Context) int {
	dbs, err := a.store.Databases(ctx)
	if err != nil {
		a.log.Warn("backups: listing the databases", "err", err)
	}
	return len(dbs)
}
