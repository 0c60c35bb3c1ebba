package app

import (
	"context"
	"net/http"

	"github.com/nah-app/nah/ui"
)

// Settings: open sign-up (persisted, overriding NAH_OPEN_SIGNUP) and the
// effective configuration with the source of each value.

// settingOpenSignup is the persisted override of NAH_OPEN_SIGNUP.
const settingOpenSignup = "open_signup"

// openSignup is the effective open sign-up and where it came from.
func (a *App) openSignup(ctx context.Context) (bool, string, error) {
	v, err := a.store.Setting(ctx, settingOpenSignup, "")
	if err != nil || v == "" {
		return a.cfg.OpenSignup, a.cfg.source("NAH_OPEN_SIGNUP"), err
	}
	return v == "true", "the console (saved in the directory database)", nil
}

func (a *App) handleSettings(w http.ResponseWriter, r *http.Request) {
	pg := page(r, "Settings", "settings")
	open, src, err := a.openSignup(r.Context())
	if err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	v := ui.Settings{Page: pg, OpenSignup: open, OpenSignupSource: src}
	v.MediaLimits = []ui.Setting{
		{Name: "Largest upload", Value: ui.Bytes(a.cfg.MaxMediaBytes), Source: a.cfg.source("NAH_MAX_MEDIA_BYTES")},
		{Name: "Storage per person (database and media)", Value: ui.Bytes(a.cfg.QuotaBytes), Source: a.cfg.source("NAH_QUOTA_BYTES")},
	}
	v.Flash = flashes[r.URL.Query().Get("m")]
	for _, s := range a.cfg.Effective() {
		v.Config = append(v.Config, ui.Setting{Name: s.Name, Value: s.Value, Source: s.Source})
	}
	a.render(w, r, http.StatusOK, ui.SettingsPage(v))
}

func (a *App) handleSettingsSave(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	v := "false"
	if r.PostFormValue("open_signup") == "true" {
		v = "true"
	}
	if err := a.store.SetSetting(r.Context(), settingOpenSignup, v); err != nil {
		a.consoleError(w, r, page(r, "Settings", "settings"), err)
		return
	}
	http.Redirect(w, r, "/console/settings?m=saved", http.StatusSeeOther)
}
