package app

import (
	"context"
	"net/http"
	"time"

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
	v := ui.Settings{Page: pg, OpenSignup: open, OpenSignupSource: src, EnvFile: envFileWords}
	v.Flash = flashes[r.URL.Query().Get("m")]
	v.Groups = groupSettings(a.cfg.Effective())
	a.render(w, r, http.StatusOK, ui.SettingsPage(v))
}

// settingGroup is a heading of the Settings page: what its settings are
// about in a sentence, and each of them in words.
type settingGroup struct {
	title, about string
	items        []settingWords
}

// settingWords is a variable as the Settings page names it: a label and a
// sentence on what it does.
type settingWords struct{ name, label, about string }

// settingGroups sorts every variable of `nah help` for the Settings page
// (cmd/nah's TestEverySettingGrouped checks that none is left out); one
// in none of them is listed under Other.
var settingGroups = []settingGroup{
	{"Who can join", "Whether a person needs a join code to make an account, and how many accounts one address may make.", []settingWords{
		{"NAH_OPEN_SIGNUP", "Open sign-up", "Anyone who reaches the server may make an account without a join code. The box above overrides it."},
		{"NAH_SIGNUP_PER_HOUR", "Sign-ups per hour from one address", "More are refused until the hour is over; 0 is no limit."},
	}},
	{"Address and HTTPS", "Where phones reach the server, and how it gets the certificate that keeps the connection private.", []settingWords{
		{"NAH_PUBLIC_URL", "Public address", "What people type or tap to reach the server; join links and reset links start with it."},
		{"NAH_DOMAIN", "Names served over HTTPS", "The server gets and renews a certificate for each by itself."},
		{"NAH_ACME_EMAIL", "Email for the certificate authority", "Where it writes about certificates, for example one that was not renewed."},
		{"NAH_ACME_DIRECTORY", "Certificate authority", "Let's Encrypt unless you chose another."},
		{"NAH_TLS_CERT", "Your own certificate", "A certificate file you bring instead of the names above; restart after renewing it."},
		{"NAH_TLS_KEY", "Your certificate's private key", "The key file of that certificate."},
		{"NAH_ADDR", "Listening address", "The machine's address and port the server answers on."},
		{"NAH_HTTP_ADDR", "Plain HTTP address", "With HTTPS, where plain HTTP is answered with a redirect to HTTPS."},
		{"NAH_TRUSTED_PROXIES", "Trusted reverse proxies", "Proxies in front of the server whose word on a visitor's address is believed."},
	}},
	{"Moments, photos and storage", "How large one moment or upload may be, how much each person may keep, and how long a deletion can be undone.", []settingWords{
		{"NAH_MAX_MEDIA_BYTES", "Largest photo or video", "A larger upload is refused as soon as its size is known."},
		{"NAH_QUOTA_BYTES", "Storage per person", "Moments, photos and videos together; an upload past it is refused."},
		{"NAH_MAX_MOMENT_BYTES", "Largest moment", "The text of one moment, in bytes."},
		{"NAH_UPLOAD_EXPIRY", "Unfinished uploads kept for", "After that, an upload a phone did not finish is removed."},
		{"NAH_DELETE_GRACE", "Deleted people kept for", "Until then, Deleted people can undo a deletion; then their moments are gone."},
	}},
	{"Backups", "Where every person's moments are copied as they change, the nightly copy, and the drill that checks the copies restore.", []settingWords{
		{"NAH_REPLICA_URL", "Backup folder or bucket", "Another disk's folder or an s3:// bucket; off means no backups."},
		{"NAH_RETENTION", "Restore back to", "How far back a person or the whole server can be restored to a time; older history is pruned, but for one snapshot of each file."},
		{"NAH_SWEEP_EVERY", "Nightly copy", "How often everything is copied whole; off means never."},
		{"NAH_SWEEP_KEEP", "Nightly copies kept", "Older ones are removed from the backup target."},
		{"NAH_REPLICA_BUDGET", "Space for the backup", "Past it, Backups and the health check warn; empty means no budget."},
		{"NAH_DRILL_EVERY", "Restore drill", "How often a sample of people is restored from the backups and compared; off means only when asked on Backups."},
		{"NAH_REPLICA_MAX_FILES", "Files backed up at once", "Files written recently are followed; the others wait for their next change or the nightly copy."},
	}},
	{"Digests and push", "Where the daily digests go to reach the family's phones.", []settingWords{
		{"NAH_PUSH_RELAY_URL", "Push relay", "The service that delivers notifications to phones; empty means digests are not sent."},
		{"NAH_PUSH_RELAY_TOKEN", "Push relay's secret", "Sent to the relay; never shown."},
	}},
	{"Memory and speed", "For whoever runs the machine: the defaults suit a small home server.", []settingWords{
		{"NAH_MEMORY_LIMIT", "Memory for the whole server", "Past it, requests are asked to come back in a moment."},
		{"NAH_MAX_OPEN_FILES", "Person files kept open", "More open files read feeds faster and use more memory."},
		{"NAH_HEAD_CACHE_MB", "Memory for the newest moments", "In megabytes; most feeds are then read without touching the disk."},
		{"NAH_MAX_CONNECTIONS", "Connections at once", "Past it the one idle longest is closed."},
		{"NAH_SYNC", "Waiting for the disk", "full: a power cut loses no posted moment; normal: faster, a power cut may lose the last few."},
		{"NAH_SHUTDOWN_TIMEOUT", "Time given to requests when stopping", "How long a stop waits for requests under way."},
	}},
	{"Files and logs", "Where the server keeps its data, and what it tells the operator.", []settingWords{
		{"NAH_DATA_DIR", "Data folder", "Every person's moments and photos, and the list of accounts."},
		{"NAH_LOG_LEVEL", "Log detail", "debug, info, warn or error."},
		{"NAH_METRICS_ADDR", "Metrics address", "Where Prometheus reads the server's figures; empty means none."},
	}},
}

// GroupedSetting reports whether the Settings page puts the variable name
// in a group of its own rather than under Other.
func GroupedSetting(name string) bool {
	for _, g := range settingGroups {
		for _, s := range g.items {
			if s.name == name {
				return true
			}
		}
	}
	return false
}

// groupSettings lays the effective configuration out in settingGroups'
// order; groups with none of the variables are left out.
func groupSettings(eff []struct{ Name, Value, Source string }) []ui.SettingGroup {
	byName := make(map[string]struct{ Name, Value, Source string }, len(eff))
	for _, s := range eff {
		byName[s.Name] = s
	}
	var out []ui.SettingGroup
	for _, g := range settingGroups {
		ug := ui.SettingGroup{Title: g.title, About: g.about}
		for _, w := range g.items {
			if s, ok := byName[w.name]; ok {
				ug.Items = append(ug.Items, ui.Setting{Name: s.Name, Label: w.label, About: w.about, Value: settingValue(s.Value), Source: s.Source})
				delete(byName, w.name)
			}
		}
		if len(ug.Items) > 0 {
			out = append(out, ug)
		}
	}
	other := ui.SettingGroup{Title: "Other", About: "Settings this page has no words for yet; nah help describes each."}
	for _, s := range eff {
		if _, ok := byName[s.Name]; ok {
			other.Items = append(other.Items, ui.Setting{Name: s.Name, Label: s.Name, Value: settingValue(s.Value), Source: s.Source})
		}
	}
	if len(other.Items) > 0 {
		out = append(out, other)
	}
	return out
}

// settingValue is a setting's value as the page shows it: a duration of a
// second or more in words ("7 days", not Go's "168h0m0s"), else as it is.
func settingValue(v string) string {
	if d, err := time.ParseDuration(v); err == nil && d >= time.Second {
		return ui.Duration(d)
	}
	return v
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
