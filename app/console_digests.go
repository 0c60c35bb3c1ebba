package app

import (
	"net/http"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/ui"
)

// handleDigests is the Digests and push page: whether a relay is
// configured, the digest loop's last run, its pushes per minute over the
// last day, and the relay's last errors (which never hold a token).
func (a *App) handleDigests(w http.ResponseWriter, r *http.Request) {
	v := ui.Digests{Page: page(r, "Digests and push", "digests")}
	if l := a.cfg.Digests; l != nil {
		st := l.Status()
		v.Running, v.RelayConfigured, v.RelayHost, v.SendsPerMinute = true, st.RelayConfigured, st.RelayHost, st.SendsPerMinute
		if !st.Last.At.IsZero() {
			v.Last = ui.DigestRun{At: st.Last.At.UnixMilli(), Due: st.Last.Due, WithNew: st.Last.WithNew, Sent: st.Last.Sent,
				Failed: st.Last.Failed, Skipped: st.Last.Skipped, Left: st.Last.Left, Duration: st.Last.Duration, P95: st.Last.P95}
		}
		for _, e := range st.Errors {
			v.Errors = append(v.Errors, ui.RelayError{At: e.At.UnixMilli(), Message: e.Message})
		}
	}
	a.render(w, r, http.StatusOK, ui.DigestsPage(v))
}

// personDigest fills a person page's digest settings and device count
// (never the devices' tokens).
func (a *App) personDigest(r *http.Request, v *ui.Person) error {
	d, last, err := a.store.FindDigest(r.Context(), v.ID)
	switch {
	case err == nil:
		v.Digest, v.DigestOn, v.LastDigestAt = d.Time()+" "+d.Timezone, d.Enabled, last
	case nah.ErrorCode(err) != nah.NotFound:
		return err
	}
	v.Devices, err = a.store.Devices().Count(r.Context(), v.ID)
	return err
}
