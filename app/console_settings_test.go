package app

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestConsoleOpenSignupSetting(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.OpenSignup = false })
	c := signedInAdmin(t, ts)
	body := map[string]string{"handle": "eve", "password": "password-eve"}
	if r := ts.do(t, "POST", "/api/v1/accounts", "", body); r.status != 400 {
		t.Fatalf("closed: %d", r.status)
	}
	postForm(t, c, ts.URL+"/console/settings", url.Values{"open_signup": {"true"}})
	if r := ts.do(t, "POST", "/api/v1/accounts", "", body); r.status != 201 {
		t.Fatalf("opened from the console: %d", r.status)
	}
	if p := get(t, c, ts.URL+"/console/settings"); !strings.Contains(p.body, "the console") || !strings.Contains(p.body, "NAH_MAX_OPEN_FILES") {
		t.Fatal("settings page does not say where open sign-up came from, or lacks the configuration")
	}
}

// TestConsoleSettingsGrouped: without JavaScript, the Settings page says
// how to change a setting (the environment file, then restart) and lays
// every variable out under a heading with a sentence, each with its words,
// its value, where the value came from and the line to write; a variable
// it has no words for is under Other rather than lost.
func TestConsoleSettingsGrouped(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.OpenSignup = false })
	ts.app.cfg.Settings = append(ts.app.cfg.Settings,
		Setting{"NAH_QUOTA_BYTES", "5GiB", "the environment"},
		Setting{"NAH_REPLICA_URL", "/mnt/backup", "the environment"},
		Setting{"NAH_NEW_THING", "42", "the default"})
	c := signedInAdmin(t, ts)
	doc := parseConsole(t, get(t, c, ts.URL+"/console/settings").body)

	how := text(doc.byID("how-to-change"))
	if !strings.Contains(how, "from "+envFileWords) || !strings.Contains(how, "then restart the server") {
		t.Errorf("how to change a setting: %q", how)
	}
	var titles []string
	where := map[string]string{} // variable: its group
	for _, g := range doc.find("data-testid", "setting-group") {
		h2 := ""
		for n := range g.Descendants() {
			if n.Data == "h2" {
				h2 = text(n)
			}
			if v, ok := attr(n, "data-setting"); ok {
				where[v] = h2
			}
			if n.Data == "p" && h2 != "" && text(n) == "" {
				t.Errorf("group %s has no sentence", h2)
			}
		}
		titles = append(titles, h2)
	}
	want := []string{"Who can join", "Moments, photos and storage", "Backups", "Memory and speed", "Files and logs", "Other"}
	if strings.Join(titles, "|") != strings.Join(want, "|") {
		t.Errorf("groups %q, want %q", titles, want)
	}
	for v, g := range map[string]string{
		"NAH_OPEN_SIGNUP": "Who can join", "NAH_SIGNUP_PER_HOUR": "Who can join",
		"NAH_QUOTA_BYTES": "Moments, photos and storage", "NAH_MAX_MOMENT_BYTES": "Moments, photos and storage",
		"NAH_REPLICA_URL": "Backups", "NAH_MAX_OPEN_FILES": "Memory and speed",
		"NAH_DATA_DIR": "Files and logs", "NAH_NEW_THING": "Other",
	} {
		if where[v] != g {
			t.Errorf("%s is under %q, want %q", v, where[v], g)
		}
	}
	var cells []string
	for n := range doc.find("data-setting", "NAH_QUOTA_BYTES")[0].Descendants() {
		if n.Data == "td" {
			cells = append(cells, text(n))
		}
	}
	if want := []string{"Storage per person Moments, photos and videos together; an upload past it is refused.", "5GiB (set in the environment)", "NAH_QUOTA_BYTES"}; !slices.Equal(cells, want) {
		t.Errorf("the quota's row: %q, want %q", cells, want)
	}
}
