package app

import (
	"net/url"
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
