package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/ui"
)

// The console's Backups page: replication's health and each
// file's state, the last and next sweep, "sync now", a full backup to
// download, and a person's restore to a time. Replication itself is
// package backup's; this file only shows it and calls it.

const (
	// backupFilesPerPage bounds the file list: 10,000 people make 200
	// pages, never a 10,000-row one.
	backupFilesPerPage = 50
	// restoreTimeout bounds a person's restore: the download of their
	// history or copy, the integrity check and the swap.
	restoreTimeout = 5 * time.Minute
)

// backupsOff is the answer to a backup action when NAH_REPLICA_URL is off.
func backupsOff() error {
	return nah.Errorf(nah.NotFound, "", "backups are off (NAH_REPLICA_URL=off): there is no replica")
}

// backupHealth sums replication up for the Overview and the Backups page.
func (a *App) backupHealth() ui.BackupHealth {
	b := a.cfg.Backups
	if b == nil {
		return ui.BackupHealth{Off: true, Ok: true}
	}
	h := b.Health()
	t := b.Repl.Target()
	out := ui.BackupHealth{Ok: h.Ok, Target: t.Redacted(), LastSync: h.LastSync, Behind: h.Behind, Worst: h.Worst, Lag: h.Lag, Raw: h.LastErr}
	if !h.Ok {
		out.Problem = replicationProblem(h.LastErr, t.IsS3())
	}
	if !t.IsS3() {
		out.SameDisk = sameDisk(filepath.Dir(a.store.Path(nah.DirectoryRel)), t.Dir())
	}
	if b.Sweep != nil && b.Every > 0 {
		last, _ := b.Sweep.Last()
		out.SweepPlanned, out.NextSweep = true, b.NextSweepAt()
		if last.Stamp != "" && last.Err == "" {
			out.LastSweep, out.LastSweepBytes = last.Started, last.Bytes
		}
	}
	return out
}

// replicationProblem is a replication error as a sentence a family member
// can act on; the page folds the raw text (Litestream's, the target's)
// away beneath it.
func replicationProblem(raw string, s3 bool) string {
	where := "The backup folder"
	if s3 {
		where = "The backup bucket"
	}
	e := strings.ToLower(raw)
	has := func(subs ...string) bool {
		return slices.ContainsFunc(subs, func(s string) bool { return strings.Contains(e, s) })
	}
	switch {
	case raw == "":
		return "Some files are waiting longer than usual to be copied."
	case has("no space left", "quota exceeded"):
		return where + " is full: free some space there, or point NAH_REPLICA_URL elsewhere."
	case has("permission denied", "access denied", "accessdenied", "forbidden", "invalidaccesskeyid", "signaturedoesnotmatch"):
		return where + " cannot be written: permission denied."
	case has("read-only file system"):
		return where + " cannot be written: its disk is read-only."
	case has("not a directory"):
		return where + " cannot be written: a file stands where the folder should be."
	case has("no such file or directory", "nosuchbucket"):
		return where + " is missing (is its disk plugged in and mounted?)."
	case has("connection refused", "no such host", "timeout", "deadline exceeded", "network is unreachable", "connection reset"):
		return where + " does not answer: is the server or the network down?"
	}
	return where + " refused the last copy."
}

// handleBackups is the Backups page.
func (a *App) handleBackups(w http.ResponseWriter, r *http.Request) {
	v, err := a.backupsView(r)
	if err != nil {
		a.consoleError(w, r, v.Page, err)
		return
	}
	a.render(w, r, http.StatusOK, ui.BackupsPage(v))
}

// backupsView is the Backups page's content: page ?page= of the files.
func (a *App) backupsView(r *http.Request) (ui.Backups, error) {
	v := ui.Backups{Page: page(r, "Backups", "backups")}
	b := a.cfg.Backups
	if b == nil {
		v.Off = true
		return v, nil
	}
	t := b.Repl.Target()
	v.Target = t.Redacted()
	v.Health = a.backupHealth()
	v.Drill = a.drillView()
	v.Disk = a.backupDisk()
	from := t.Redacted()
	if t.IsS3() {
		from = t.URL // never holds a key: ParseTarget refuses one
	}
	v.RestoreCommand = "nah restore -from " + shellQuote(from) + " -to /path/to/new-data-dir"

	files := b.Repl.Status()
	// Files behind come first, worst first; those in step follow by path,
	// so that the pages do not shift between two clicks as syncs land.
	inStep := slices.IndexFunc(files, func(f backup.FileStatus) bool { return !f.Behind() })
	if inStep >= 0 {
		slices.SortFunc(files[inStep:], func(x, y backup.FileStatus) int { return strings.Compare(x.Path, y.Path) })
	}
	v.FilesTotal = len(files)
	v.PageCount = max(1, (len(files)+backupFilesPerPage-1)/backupFilesPerPage)
	v.PageNum, _ = strconv.Atoi(r.URL.Query().Get("page"))
	v.PageNum = min(max(v.PageNum, 1), v.PageCount)
	now := time.Now() // replication's clock is the wall clock, not a.now
	for _, f := range files[min((v.PageNum-1)*backupFilesPerPage, len(files)):min(v.PageNum*backupFilesPerPage, len(files))] {
		row := ui.BackupFile{Path: f.Path, Watched: f.Watched, Local: f.TXID, Replicated: f.Replicated, Lag: f.Lag(now), LastSync: f.LastSync, Err: f.Err}
		if id := nah.PersonOfRel(f.Path); id != "" {
			row.PersonID, row.Handle = id, id
			if p, err := a.store.FindPersonByID(r.Context(), id); err == nil {
				row.Handle = p.Handle
			} else if nah.ErrorCode(err) != nah.NotFound {
				return v, err
			}
		}
		v.Files = append(v.Files, row)
	}
	if b.Sweep != nil {
		last, running := b.Sweep.Last()
		v.Sweep = &ui.SweepRow{Stamp: last.Stamp, Started: last.Started, Duration: last.Duration, Files: last.Files, Bytes: last.Bytes, Failed: last.Failed, Err: last.Err}
		v.Sweeping, v.NextSweep = running, b.NextSweepAt()
		a.copiesView(r.Context(), &v)
	}
	a.syncView(r, &v)
	v.Flash = flashes[r.URL.Query().Get("m")]
	return v, nil
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-:") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// handleBackupSync is "Sync now": every file behind brought to the
// target, the store's queue drained, as a job in the background, one at a
// time (backup.Backups.StartSync); the Backups page then shows how far it
// has come, or that one is already running.
func (a *App) handleBackupSync(w http.ResponseWriter, r *http.Request) {
	b := a.cfg.Backups
	if b == nil {
		a.consoleError(w, r, page(r, "Backups", "backups"), backupsOff())
		return
	}
	m := "syncing"
	if !b.StartSync() {
		m = "sync-running"
	}
	http.Redirect(w, r, "/console/backups?m="+m+"#health-title", http.StatusSeeOther)
}

// syncView fills the Backups page's "Sync now": the one running, and after
// a redirect from it (?m=syncing) how the last one ended.
func (a *App) syncView(r *http.Request, v *ui.Backups) {
	b := a.cfg.Backups
	p, ok := b.SyncState()
	if !ok {
		return
	}
	if p.Running {
		v.Syncing = &ui.SyncProgress{Running: true, Done: p.Done, Total: p.Total}
		return
	}
	if m := r.URL.Query().Get("m"); m != "syncing" && m != "sync-running" {
		return
	}
	if p.Err != "" {
		// A sync that failed its first check of the target listed nothing
		// (Total 0); the files behind are the health's. What the health
		// line above says (the problem, that people can still post) is not
		// said again.
		what := fmt.Sprintf("Sync failed after %s, with %d of %s sent.", ui.Duration(p.Took), p.Done, nFiles(p.Total))
		if p.Total == 0 {
			what = "Sync failed at once: the target did not take its first check, so nothing was sent"
			if n := v.Health.Behind; n > 0 {
				what += fmt.Sprintf(" (%s %s behind)", nFiles(n), plural(n, "is", "are"))
			}
			what += "."
		}
		if problem := replicationProblem(p.Err, b.Repl.Target().IsS3()); problem != v.Health.Problem {
			what += " " + problem
		}
		if v.Health.Ok {
			what += " People can still post; the copies catch up by themselves once the target works again."
		}
		v.SyncError = what
		return
	}
	v.SyncDone = fmt.Sprintf("Synced in %s: %s sent, every file is on the target.", ui.Duration(p.Took), nFiles(p.Done))
}

// plural is one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// nFiles is "1 file" or "n files".
func nFiles(n int) string {
	if n == 1 {
		return "1 file"
	}
	return strconv.Itoa(n) + " files"
}

// handleBackupDownload streams the full backup (backup.WriteArchive). An
// error after the first byte cuts the connection, so a broken download
// never looks like a whole archive.
func (a *App) handleBackupDownload(w http.ResponseWriter, r *http.Request) {
	pg := page(r, "Backups", "backups")
	name := "nah-backup-" + time.Now().UTC().Format("20060102T150405Z") + ".tar.gz"
	if r.Method == http.MethodHead {
		setDownloadHeaders(w, name)
		w.WriteHeader(http.StatusOK)
		return
	}
	// Its own slot: people's exports cannot starve it.
	done, err := admitTransfer(a.fullBackups.take, a.charge(backup.ArchiveBytes))
	if err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	defer done()
	out := &firstWrite{w: newPacedWriter(w, r, a.cfg.Transfer), start: func() {
		setDownloadHeaders(w, name)
		w.WriteHeader(http.StatusOK)
	}}
	if err := backup.WriteArchive(r.Context(), out, a.store); err != nil {
		if !out.started {
			a.consoleError(w, r, pg, err)
			return
		}
		if !errors.Is(r.Context().Err(), context.Canceled) {
			a.log.Error("full backup: streaming failed", "err", err)
		}
		panic(http.ErrAbortHandler)
	}
}

// firstWrite calls start (the headers) before its first byte goes to w.
type firstWrite struct {
	w       io.Writer
	start   func()
	started bool
}

func (f *firstWrite) Write(b []byte) (int, error) {
	if !f.started {
		f.started = true
		f.start()
	}
	return f.w.Write(b)
}

// extendWrite lets the answer to w be written for d from now, beyond the
// server's 30 s WriteTimeout, which would otherwise cut off a download, or
// the page after a sync or restore that waited on the target.
func (a *App) extendWrite(w http.ResponseWriter, d time.Duration) {
	if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d + writeTimeout)); err != nil {
		a.log.Warn("backups: cannot extend the write deadline", "err", err)
	}
}

func setDownloadHeaders(w http.ResponseWriter, name string) {
	h := w.Header()
	h.Set("Content-Type", "application/gzip")
	h.Set("Content-Disposition", `attachment; filename="`+name+`"`)
	h.Set("Cache-Control", "no-store")
}

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

// publicError is the text of a replication or disk error as /healthz
// (public) may show it: without a person's id (their folder is people/…)
// or an absolute path (the data directory's, a local replica's).
func publicError(s string) string {
	return absPath.ReplaceAllString(hidePeople(s), "${1}…")
}

// absPath matches an absolute path and what comes before it.
var absPath = regexp.MustCompile(`(^|[\s"'(=])/[^\s:"')]+`)

// hidePeople writes every person's folder in s as people/…: a person id
// (nah.ValidPersonID) after nah.PeopleRel.
func hidePeople(s string) string {
	prefix := nah.PeopleRel + "/"
	var b strings.Builder
	for {
		i := strings.Index(s, prefix)
		if i < 0 {
			break
		}
		b.WriteString(s[:i+len(prefix)])
		s = s[i+len(prefix):]
		if len(s) >= nah.IDLen && nah.ValidPersonID(s[:nah.IDLen]) {
			b.WriteString("…")
			s = s[nah.IDLen:]
		}
	}
	b.WriteString(s)
	return b.String()
}

// replicationHealth is /healthz's replication field (nil when off).
type replicationHealth struct {
	Status          string  `json:"status"`       // ok or behind
	FilesBehind     int     `json:"files_behind"` // queued ones included
	FilesQueued     int     `json:"files_queued"`
	WorstLagSeconds float64 `json:"worst_lag_seconds"` // Health.Lag
	Error           string  `json:"error,omitempty"`
	// Disk is the space the replica and the data take (console_space.go).
	Disk *diskHealth `json:"disk,omitempty"`
}

func (a *App) replicationHealth() *replicationHealth {
	if a.cfg.Backups == nil {
		return nil
	}
	h := a.cfg.Backups.Health()
	out := &replicationHealth{Status: "ok", FilesBehind: h.Behind, FilesQueued: h.Queued, WorstLagSeconds: h.Lag.Round(time.Millisecond).Seconds(), Disk: a.diskHealth()}
	if !h.Ok {
		out.Status = "behind"
		out.Error = publicError(h.LastErr)
	}
	return out
}

// replicationGauges are the metrics of replication and the sweep, empty
// when replication is off.
func (a *App) replicationGauges() []gauge {
	b := a.cfg.Backups
	if b == nil {
		return nil
	}
	h := b.Health()
	failing := 0 // counted in place: Status sorts a copy of every file's state
	b.Repl.EachStatus(func(f backup.FileStatus) {
		if f.Err != "" {
			failing++
		}
	})
	healthy := 0.0
	if h.Ok {
		healthy = 1
	}
	gs := []gauge{
		{"nah_replica_healthy", "1 while replication is in step (nothing behind by more than a minute, the last sync now did not fail), else 0.", healthy},
		{"nah_replica_files_watched", "Databases Litestream watches now.", float64(h.Watched)},
		{"nah_replica_files_behind", "Databases whose target lacks some of their transactions.", float64(h.Behind)},
		{"nah_replica_files_failing", "Databases whose last watch or final sync to the target failed.", float64(failing)},
		{"nah_replica_worst_lag_seconds", "Seconds since the database furthest behind was last in step with the target.", h.Worst.Seconds()},
		{"nah_replica_lag_seconds", "Age of the oldest acknowledged write the target lacks, files waiting to be taken up included: the replica's lag.", h.Lag.Seconds()},
	}
	rs := b.Repl.RetentionStats()
	gs = append(gs,
		gauge{"nah_retention_overdue_files", "Databases the retention policy is due to look at and has not yet (all of them until its first listing after the start).", float64(rs.Overdue)},
		gauge{"nah_retention_overdue_seconds", "How long the database overdue longest has waited for the retention policy.", rs.OverdueFor.Seconds()},
		gauge{"nah_retention_deleted_files", "LTX files the retention policy deleted from the target, since start.", float64(rs.Deleted)},
		gauge{"nah_retention_snapshots", "Snapshots the retention policy wrote to the target, since start.", float64(rs.Snapshots)},
		gauge{"nah_retention_failures", "Looks of the retention policy at a database that failed (logged), since start.", float64(rs.Failures)},
	)
	if b.Sweep != nil {
		last, _ := b.Sweep.Last()
		gs = append(gs,
			gauge{"nah_backup_sweep_duration_seconds", "How long the last nightly copy took.", last.Duration.Seconds()},
			gauge{"nah_backup_sweep_bytes", "Bytes the last nightly copy wrote.", float64(last.Bytes)},
			gauge{"nah_backup_sweep_failures", "Databases the last nightly copy could not copy.", float64(len(last.Failed))},
		)
	}
	if b.Media != nil {
		n, oldest := b.Media.Waiting()
		gs = append(gs,
			gauge{"nah_media_mirror_waiting", "People whose new media wait to be mirrored to the target (within a minute when all is well).", float64(n)},
			gauge{"nah_media_mirror_wait_seconds", "How long the person waiting longest for their media's mirror has waited.", oldest.Seconds()},
		)
	}
	return append(gs, a.diskGauges()...)
}
