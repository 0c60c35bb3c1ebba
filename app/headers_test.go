package app

import (
	"log/slog"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// TestSecurityHeaders: every answer, console page, console error, redirect,
// asset, API answer and metrics alike, carries nosniff, refuses framing,
// and has the policy that keeps the console to its own origin.
func TestSecurityHeaders(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	admin := signedInAdmin(t, ts)
	anon := consoleClient(t)
	asset := regexp.MustCompile(`/static/htmx\.min\.[0-9a-f]{12}\.js`).FindString(get(t, anon, ts.URL+"/console/login").body)
	metrics := httptest.NewServer(NewServer("", ts.app.MetricsHandler(), slog.New(slog.DiscardHandler)).Handler)
	defer metrics.Close()

	for _, c := range []struct {
		name   string
		answer func() htmlPage
		status int
	}{
		{"console page", func() htmlPage { return get(t, admin, ts.URL+"/console/people") }, 200},
		{"console error page", func() htmlPage { return get(t, admin, ts.URL+"/console/people/"+strings.Repeat("a", 26)) }, 404},
		{"console redirect", func() htmlPage { return get(t, anon, ts.URL+"/console") }, 303},
		{"sign-in form error", func() htmlPage {
			return postForm(t, anon, ts.URL+"/console/login", url.Values{"name": {"root"}, "password": {"wrong-password"}})
		}, 401},
		{"reset page, bad link", func() htmlPage { return get(t, anon, ts.URL+"/reset/"+strings.Repeat("x", 43)) }, 404},
		{"setup page, bad link", func() htmlPage { return get(t, anon, ts.URL+"/console/setup/nothing") }, 404},
		{"asset", func() htmlPage { return get(t, anon, ts.URL+asset) }, 200},
		{"API", func() htmlPage {
			r := ts.do(t, "GET", "/api/v1/me", ann.token, nil)
			return htmlPage{r.status, r.header, ""}
		}, 200},
		{"API error", func() htmlPage { r := ts.do(t, "GET", "/api/v1/me", "", nil); return htmlPage{r.status, r.header, ""} }, 401},
		{"no such route", func() htmlPage { return get(t, anon, ts.URL+"/nothing") }, 404},
		{"health", func() htmlPage { return get(t, anon, ts.URL+"/healthz") }, 200},
		{"metrics", func() htmlPage { return get(t, anon, metrics.URL+"/metrics") }, 200},
	} {
		p := c.answer()
		if p.status != c.status {
			t.Errorf("%s: status %d, want %d", c.name, p.status, c.status)
		}
		if got := p.header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q", c.name, got)
		}
		if got := p.header.Get("X-Frame-Options"); got != "DENY" {
			t.Errorf("%s: X-Frame-Options %q", c.name, got)
		}
		csp := p.header.Get("Content-Security-Policy")
		for _, want := range []string{"frame-ancestors 'none'", "default-src 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: Content-Security-Policy %q lacks %s", c.name, csp, want)
			}
		}
		if strings.Contains(csp, "script-src") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: Content-Security-Policy %q relaxes scripts", c.name, csp)
		}
	}
}
