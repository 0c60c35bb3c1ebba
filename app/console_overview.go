package app

import (
	"net/http"

	"github.com/nah-app/nah/ui"
)

// handleOverview is the console's home: counts, storage, open files,
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
		Page: page(r, "Overview", "overview"), People: t.People, Moments: t.Moments, StorageBytes: t.StorageBytes,
		OpenFiles: st.OpenFiles, MaxOpenFiles: st.MaxOpenFiles, RSSBytes: rss, PeakRSSBytes: peak,
		HeadBytes: st.HeadBytes, Uptime: a.now().Sub(a.metrics.start),
	}
	o.Points = a.metrics.series()
	a.render(w, r, http.StatusOK, ui.OverviewPage(o))
}
