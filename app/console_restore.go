package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/ui"
)

// A person's restore to a time, asked for on the Backups page, and its
// undo: what is asked, the confirmation, the restore (backup's
// RestorePerson) and what its failure tells the operator. The ticket and
// the progress are console_restore_ticket.go's and
// console_restore_progress.go's.

// restoreTimeout bounds a person's restore: the download of their history
// or copy, the integrity check and the swap.
const restoreTimeout = 5 * time.Minute

// restoreRequest reads the person (an id, or a handle typed on the
// Backups page) and the time of a restore.
func (a *App) restoreRequest(r *http.Request, who, at string) (nah.Person, time.Time, error) {
	if a.cfg.Backups == nil {
		return nah.Person{}, time.Time{}, backupsOff()
	}
	who = strings.TrimSpace(who)
	p, err := a.store.FindPersonByID(r.Context(), who)
	if nah.ErrorCode(err) == nah.NotFound {
		p, _, err = a.store.FindPersonByHandle(r.Context(), strings.ToLower(who))
	}
	if err != nil {
		return p, time.Time{}, err
	}
	t, err := parseRestoreTime(at)
	if err != nil {
		return p, t, err
	}
	if t.After(time.Now()) {
		return p, t, nah.Errorf(nah.Invalid, "", "%s is in the future: choose a past time", ui.WhenT(t))
	}
	if joined := time.UnixMilli(p.CreatedAt); t.Before(joined) {
		return p, t, nah.Errorf(nah.Invalid, "", "%s is before %s joined (%s): there is no file of theirs to restore; choose a time since then", ui.WhenT(t), p.Handle, ui.WhenT(joined))
	}
	return p, t, nil
}

// restoreReach is the earliest time a restore of p reaches through the
// replica's history: their sign-up, or the start of the retention window
// (NAH_RETENTION) if later; joined says which.
func (a *App) restoreReach(p nah.Person) (earliest time.Time, joined bool) {
	joinedAt := time.UnixMilli(p.CreatedAt)
	window := time.Now().Add(-a.cfg.Backups.Repl.Retention())
	if joinedAt.After(window) {
		return joinedAt, true
	}
	return window, false
}

// parseRestoreTime reads a restore's time: RFC 3339 with its offset, as
// console.js sends the browser's local time, or a datetime-local input's
// value (with or without seconds) in UTC, as its label says without
// JavaScript.
func parseRestoreTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, nah.Errorf(nah.Invalid, "", "the time %q is not a date and time such as 2026-01-31T18:00:00", s)
}

// handleRestoreConfirm is the confirmation step of a person's restore: what
// will happen, and the button that does it. It changes nothing.
func (a *App) handleRestoreConfirm(w http.ResponseWriter, r *http.Request) {
	pg := page(r, "Restore a person", "backups")
	q := r.URL.Query()
	p, at, err := a.restoreRequest(r, q.Get("person"), q.Get("at"))
	if err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	n, err := a.store.MomentCount(r.Context(), p.ID)
	if err != nil && nah.ErrorCode(err) != nah.Unavailable { // an unreadable file is what a restore mends
		a.consoleError(w, r, pg, err)
		return
	}
	pg.Title = "Restore " + p.Handle
	v := ui.RestorePerson{Page: pg, PersonID: p.ID, Handle: p.Handle, At: at, Moments: n, Grace: a.store.DeleteGrace()}
	v.Earliest, v.Joined = a.restoreReach(p)
	if until, ok := a.store.ReplacedUntil(p.ID); ok {
		v.Pending, v.UndoUntil = until.Add(-v.Grace), until
	}
	v.Ticket = a.tickets.issue(p.ID, at, time.Now())
	a.render(w, r, http.StatusOK, ui.RestorePersonPage(v))
}

// handleRestore restores one person's file to a time while everyone else
// goes on (backup's RestorePerson), spending the confirmation's ticket;
// any failure leaves the old file. The result is its own page, which the
// answer redirects to: a reload shows it again, and restores nothing.
func (a *App) handleRestore(w http.ResponseWriter, r *http.Request) {
	pg := page(r, "Restore a person", "backups")
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	if a.cfg.Backups == nil {
		a.consoleError(w, r, pg, backupsOff())
		return
	}
	ticket := r.PostFormValue("ticket")
	tk, ok := a.tickets.spend(ticket, time.Now())
	if !ok && tk.spent {
		a.consoleError(w, r, pg, nah.Errorf(nah.Conflict, "", "This confirmation was already used once, and a restore runs once per confirmation: nothing more was changed. To restore again, choose the time again on the person's page."))
		return
	} else if !ok {
		a.consoleError(w, r, pg, nah.Errorf(nah.Conflict, "", "This confirmation is no longer valid (it is over an hour old, or the server restarted since): nothing was changed. Choose the time again on the person's page."))
		return
	}
	p, err := a.store.FindPersonByID(r.Context(), tk.person)
	if err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	at := tk.at
	run := a.startRestore(p, false)
	if run == nil {
		a.consoleError(w, r, pg, errRestoreRunning(p))
		return
	}
	defer a.restoring.Delete(p.ID)
	a.extendWrite(w, restoreTimeout)
	ctx, cancel := context.WithTimeout(r.Context(), restoreTimeout)
	defer cancel()
	start := time.Now()
	source, err := a.cfg.Backups.Repl.RestorePerson(ctx, a.store, p.ID, at, run.steps)
	if err != nil {
		a.consoleError(w, r, pg, restoreError(p, at, source, err))
		return
	}
	took := time.Since(start)
	n, err := a.store.MomentCount(r.Context(), p.ID)
	if err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	a.log.Info("person restored to a time", "person", p.ID, "at", at, "source", source.String(), "moments", n, "took", took.Round(time.Millisecond))
	pg.Title = "Restored " + p.Handle
	v := ui.RestorePerson{Page: pg, PersonID: p.ID, Handle: p.Handle, At: at, Moments: n, Done: true, Source: source.String(), Took: took}
	if until, ok := a.store.ReplacedUntil(p.ID); ok {
		v.Pending, v.UndoUntil = until.Add(-a.store.DeleteGrace()), until
	}
	a.tickets.done(ticket, v)
	http.Redirect(w, r, "/console/backups/restore/"+ticket, http.StatusSeeOther)
}

// handleRestoreResult is the page of a restore's result, held in memory
// for an hour (restoreTickets).
func (a *App) handleRestoreResult(w http.ResponseWriter, r *http.Request) {
	v, ok := a.tickets.result(chi.URLParam(r, "ticket"), time.Now())
	if !ok {
		a.consoleError(w, r, page(r, "Restore a person", "backups"), nah.Errorf(nah.NotFound, "", "This restore's result is no longer held (results are kept for an hour, and until a restart): the person's page shows their file as it is now."))
		return
	}
	v.Page = page(r, v.Title, "backups")
	a.render(w, r, http.StatusOK, ui.RestorePersonPage(v))
}

// undoRequest reads the person whose last restore to a time is to be
// undone, and until when its replaced file is kept.
func (a *App) undoRequest(r *http.Request) (nah.Person, time.Time, error) {
	if a.cfg.Backups == nil {
		return nah.Person{}, time.Time{}, backupsOff()
	}
	p, err := a.store.FindPersonByID(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		return p, time.Time{}, err
	}
	until, ok := a.store.ReplacedUntil(p.ID)
	if !ok {
		return p, until, nah.Errorf(nah.NotFound, "", "There is no restore of %s to undo: the file a restore replaces is kept for the delete grace (%s) after it.", p.Handle, graceText(a.store.DeleteGrace()))
	}
	return p, until, nil
}

// handleUndoRestoreConfirm is the confirmation step of undoing a person's
// last restore to a time. It changes nothing.
func (a *App) handleUndoRestoreConfirm(w http.ResponseWriter, r *http.Request) {
	pg := page(r, "Undo a restore", "people")
	p, until, err := a.undoRequest(r)
	if err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	n, err := a.store.MomentCount(r.Context(), p.ID)
	if err != nil && nah.ErrorCode(err) != nah.Unavailable {
		a.consoleError(w, r, pg, err)
		return
	}
	pg.Title = "Undo the restore of " + p.Handle
	a.render(w, r, http.StatusOK, ui.UndoRestorePage(ui.UndoRestore{Page: pg, PersonID: p.ID, Handle: p.Handle, Moments: n, Until: until, Since: until.Add(-a.store.DeleteGrace())}))
}

// handleUndoRestore swaps back the file a person's last restore replaced
// (backup's UndoRestore), then shows their page.
func (a *App) handleUndoRestore(w http.ResponseWriter, r *http.Request) {
	pg := page(r, "Undo a restore", "people")
	p, _, err := a.undoRequest(r)
	if err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	run := a.startRestore(p, true)
	if run == nil {
		a.consoleError(w, r, pg, errRestoreRunning(p))
		return
	}
	defer a.restoring.Delete(p.ID)
	a.extendWrite(w, restoreTimeout)
	ctx, cancel := context.WithTimeout(r.Context(), restoreTimeout)
	defer cancel()
	start := time.Now()
	if err := a.cfg.Backups.Repl.UndoRestore(ctx, a.store, p.ID, run.steps); err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	a.log.Info("restore of a person undone", "person", p.ID, "took", time.Since(start).Round(time.Millisecond))
	http.Redirect(w, r, "/console/people/"+p.ID+"?m=undone", http.StatusSeeOther)
}

func errRestoreRunning(p nah.Person) error {
	return nah.Errorf(nah.Conflict, "", "A restore of %s is already under way, and one runs at a time: %s's page shows the result once it is done. Nothing more was changed.", p.Handle, p.Handle)
}

// restoreError is a failed restore of p to at as the operator reads it:
// what failed, and that nothing was changed. A broken history says what
// the nightly copy it did not use would have cost.
func restoreError(p nah.Person, at time.Time, source backup.Restored, err error) error {
	switch {
	case !errors.Is(err, backup.ErrReplica):
		return err // the store's: no such person, a copy not of this server, the swap
	case errors.Is(err, backup.ErrUnsoundHistory):
		msg := fmt.Sprintf("The replica's history of %s's file does not restore to a sound database as at %s (%v), so nothing was changed: %s's file is as it was.", p.Handle, ui.WhenT(at), source.HistoryErr, p.Handle)
		switch {
		case source.Fallback() && source.Behind() > 0:
			msg += fmt.Sprintf(" The nightly copy of %s is sound but %s older than that history's newest position (%s); it was not used.", ui.WhenT(source.SweepAt), ui.Duration(source.Behind()), ui.WhenT(source.HistoryAt))
		case source.Fallback():
			msg += fmt.Sprintf(" The nightly copy of %s is sound; it was not used.", ui.WhenT(source.SweepAt))
		default:
			msg += " No sound nightly copy of it exists either."
		}
		return nah.Errorf(nah.Unavailable, "", "%s", msg)
	case errors.Is(err, backup.ErrNothing):
		return nah.Errorf(nah.NotFound, "", "The replica holds no copy of %s's file as at %s: nothing was changed.", p.Handle, ui.WhenT(at))
	}
	why := strings.TrimPrefix(err.Error(), backup.ErrReplica.Error()+": ")
	return nah.Errorf(nah.Unavailable, "", "The replica could not give back %s's file as at %s: %s. Nothing was changed.", p.Handle, ui.WhenT(at), why)
}
