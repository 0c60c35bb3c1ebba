package app

import (
	"context"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/nah-app/nah/ui"
)

// firstRun is the overview's checklist for a new server: what a family
// needs before it relies on it, each with whether it is done and how to
// do it. The overview shows it until every item but the optional ones is
// done, or the admin hides it. HTTPS is optional on a server that phones
// reach only at home (its public address private, loopback or .local),
// the push relay always: the app works without notifications.
func (a *App) firstRun(ctx context.Context, backups ui.BackupHealth) ([]ui.CheckItem, error) {
	open, _, err := a.openSignup(ctx)
	if err != nil {
		return nil, err
	}
	codes, err := a.store.JoinCodes().List(ctx, 1)
	if err != nil {
		return nil, err
	}
	relay := a.cfg.Digests != nil && a.cfg.Digests.Status().RelayConfigured
	env := "in " + envFileWords + ", then restart the server"
	return []ui.CheckItem{
		{ID: "https", Done: strings.HasPrefix(a.cfg.PublicURL, "https://"), Optional: homeOnly(a.cfg.PublicURL),
			Title: "A public address with HTTPS, so that phones reach the server safely",
			How:   "Set NAH_PUBLIC_URL=https://your.name and NAH_DOMAIN=your.name (the server gets its certificate by itself; ports 80 and 443 must reach it), or put it behind a proxy that serves HTTPS, " + env + "."},
		{ID: "joining", Done: open || len(codes) > 0, Link: "/console/joincodes",
			Title: "A first join code, or open sign-up, so that the family can make accounts",
			How:   "Create a join code on Join codes and give it to the first person, or turn on open sign-up in Settings."},
		{ID: "backups", Done: !backups.Off && !backups.SameDisk, Link: "/console/backups",
			Title: "Backups on another disk or in a bucket, so that one failure loses nothing",
			How:   "Set NAH_REPLICA_URL to a folder on another disk, or to s3://bucket/prefix, " + env + "."},
		{ID: "push", Done: relay, Link: "/console/digests", Optional: true,
			Title: "A push relay, so that phones are told of new moments",
			How:   "Set NAH_PUSH_RELAY_URL (and NAH_PUSH_RELAY_TOKEN if the relay asks for one) " + env + "."},
	}, nil
}

// envFileWords is where the server's variables are kept: `nah service`'s
// unit reads them from its -env-file, /etc/nah/nah.env by default.
const envFileWords = "the environment file (/etc/nah/nah.env unless you chose another)"

// homeOnly reports whether the public address u is one only the home
// network reaches: a private, loopback or link-local address, or a name
// of the local network (.local, .lan, .home.arpa, localhost).
func homeOnly(u string) bool {
	pu, err := url.Parse(u)
	if err != nil || pu.Hostname() == "" {
		return false
	}
	h := strings.ToLower(pu.Hostname())
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.IsPrivate() || ip.IsLoopback() || ip.IsLinkLocalUnicast()
	}
	return h == "localhost" || strings.HasSuffix(h, ".local") || strings.HasSuffix(h, ".lan") || strings.HasSuffix(h, ".home.arpa")
}

// settingChecklistHidden is the admin's choice to hide the checklist.
const settingChecklistHidden = "checklist_hidden"

// handleChecklist hides the overview's checklist (hide=true) or shows it
// again.
func (a *App) handleChecklist(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	v := "false"
	if r.PostFormValue("hide") == "true" {
		v = "true"
	}
	if err := a.store.SetSetting(r.Context(), settingChecklistHidden, v); err != nil {
		a.consoleError(w, r, page(r, "Overview", "overview"), err)
		return
	}
	http.Redirect(w, r, "/console", http.StatusSeeOther)
}
