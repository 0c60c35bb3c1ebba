package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/ui"
)

// The console's Backups page: replication's health and each
// file's state, the last and next sweep, "sync now", a full backup to
// download, and a person's restore to a time (console_restore.go).
// Replication itself is package backup's; this file only shows it and
// calls it.

// backupFilesPerPage bounds the file list: 10,000 people make 200 pages,
// never a 10,000-row one.
const backupFilesPerPage = 50

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

	files := b.Status()
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
