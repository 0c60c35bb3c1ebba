package app

import (
	"net/http"

	"github.com/nah-app/nah/ui"
)

// handleOverview is the console's home: what needs attention (a full
// disk, person files that cannot be read, a name without an HTTPS
// certificate), counts, storage, open files,
// memory, uptime, and the chart of the last minutes' p95 and memory.
func (a *App) handleOverview(w http.ResponseWriter, r *http.Request) {
	t, err := a.store.Totals(r.Context())
	if err != nil {
		a.consoleError(w, r, page(r, "Overview", "overview"), err)
		return
	}
	rss, peak := procMemory()
	st := a.store.Stats()
	o := ui.Overview{
		Page: page(r, "Overview", "overview"), People: t.People, Moments: t.Moments, StorageBytes: t.StorageBytes, MediaBytes: t.MediaBytes,
		OpenFiles: st.OpenFiles, MaxOpenFiles: st.MaxOpenFiles, RSSBytes: rss, PeakRSSBytes: peak,
		HeadBytes: st.HeadBytes, Uptime: a.now().Sub(a.metrics.start),
	}
	o.Points = a.metrics.series()
	o.DiskFull = st.DiskFull
	if a.certs != nil {
		o.Certificates = a.certs.problems(a.cfg.TLS.Domains)
	}
	bh := a.backupHealth()
	o.Backups = &bh
	checks, err := a.firstRun(r.Context(), bh)
	if err != nil {
		a.consoleError(w, r, o.Page, err)
		return
	}
	for _, c := range checks {
		if !c.Done {
			o.ChecklistToDo++
			if !c.Optional {
				o.Checklist = checks // shown until every item but the optional ones is done
			}
		}
	}
	if o.Checklist != nil {
		hidden, err := a.store.Setting(r.Context(), settingChecklistHidden, "")
		if err != nil {
			a.consoleError(w, r, o.Page, err)
			return
		}
		if hidden == "true" {
			o.Checklist, o.ChecklistHidden = nil, true
		}
	}
	o.Drill = a.drillView()
	o.Signins = a.signins.view()
	problems := a.store.FileProblems()
	o.AttentionTotal = len(problems)
	for _, fp := range problems[:min(len(problems), attentionListed)] {
		row := ui.AttentionRow{ID: fp.PersonID, Handle: fp.PersonID, Problem: fp.Problem, Since: fp.Since}
		if p, err := a.store.FindPersonByID(r.Context(), fp.PersonID); err == nil {
			row.Handle = p.Handle
		}
		o.Attention = append(o.Attention, row)
	}
	a.render(w, r, http.StatusOK, ui.OverviewPage(o))
}

// attentionListed is how many unreadable files the overview names; the
// rest are counted (and each is in the log).
const attentionListed = 20
