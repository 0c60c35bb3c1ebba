package app

import (
	"context"
	"errors"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

func TestConsoleSignIn(t *testing.T) {
	ts := newTestServer(t)
	signedInAdmin(t, ts)
	c := consoleClient(t)
	p := postForm(t, c, ts.URL+"/console/login", url.Values{"name": {"root"}, "password": {"wrong-password"}})
	if p.status != 401 || !strings.Contains(p.body, "wrong") {
		t.Fatalf("wrong password: %d", p.status)
	}
	for range signinFailuresPerHandle {
		postForm(t, c, ts.URL+"/console/login", url.Values{"name": {"root"}, "password": {"wrong-password"}})
	}
	p = postForm(t, c, ts.URL+"/console/login", url.Values{"name": {"root"}, "password": {"admin-password"}})
	if p.status != 429 || p.header.Get("Retry-After") == "" {
		t.Fatalf("right password while limited: %d", p.status)
	}
	// Cookies are HttpOnly and SameSite.
	ts2 := newTestServer(t)
	mustAdmin(t, ts2.store, "root", "admin-password")
	req, _ := http.NewRequest("POST", ts2.URL+"/console/login", strings.NewReader("name=root&password=admin-password"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := consoleClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	ck := res.Cookies()
	if len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteLaxMode || ck[0].Secure {
		t.Fatalf("cookie %+v", ck)
	}
	// Sign out ends the session.
	c2 := signedInAdminOn(t, ts2)
	postForm(t, c2, ts2.URL+"/console/logout", nil)
	if p := get(t, c2, ts2.URL+"/console"); p.status != 303 {
		t.Fatalf("after sign-out: %d", p.status)
	}
}

func TestConsoleSetupLink(t *testing.T) {
	ts := newTestServer(t)
	link, err := SetupLink(context.Background(), ts.store, ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := consoleClient(t)
	if p := get(t, c, link); p.status != 200 || !strings.Contains(p.body, "Create admin") {
		t.Fatalf("setup page: %d", p.status)
	}
	p := postForm(t, c, link, url.Values{"name": {"root"}, "password": {"admin-password"}, "password2": {"admin-password"}})
	if p.status != 303 {
		t.Fatalf("setup: %d %s", p.status, p.body)
	}
	if p := get(t, c, ts.URL+"/console"); p.status != 200 {
		t.Fatalf("console after setup: %d", p.status)
	}
	if p := postForm(t, consoleClient(t), link, url.Values{"name": {"eve"}, "password": {"password-eve"}, "password2": {"password-eve"}}); p.status != 404 {
		t.Fatalf("setup link used twice: %d", p.status)
	}
	ts.clock.Advance(setupLinkTTL + 1)
	late, _ := SetupLink(context.Background(), ts.store, ts.URL)
	ts.clock.Advance(setupLinkTTL + 1)
	if p := get(t, consoleClient(t), late); p.status != 404 {
		t.Fatalf("expired setup link: %d", p.status)
	}
}

func TestConsoleSessionsExpire(t *testing.T) {
	ts := newTestServer(t)
	c := signedInAdmin(t, ts)
	if p := get(t, c, ts.URL+"/console"); p.status != 200 {
		t.Fatalf("signed in: %d", p.status)
	}
	ts.clock.Advance(adminSessionTTL + time.Minute)
	if p := get(t, c, ts.URL+"/console"); p.status != 303 {
		t.Fatalf("after %v: %d", adminSessionTTL, p.status)
	}
}

// TestConsoleShowsTheRulesMessage: every console form that takes a handle
// or a password refuses a bad one with the sentence of the rule in nah, so
// the rule is written in one place.
func TestConsoleShowsTheRulesMessage(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	message := func(err error) string {
		var e *nah.Error
		if !errors.As(err, &e) {
			t.Fatalf("%v is not an *nah.Error", err)
		}
		return html.EscapeString(e.Message)
	}
	badHandle, badPassword := message(nah.CheckHandle("A!")), message(nah.CheckPassword("short"))
	setup, err := SetupLink(context.Background(), ts.store, ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	reset, err := ts.store.CreateLink(context.Background(), store.LinkReset, ann.id, resetLinkTTL)
	if err != nil {
		t.Fatal(err)
	}
	admin := signedInAdmin(t, ts)
	for _, c := range []struct {
		name   string
		client *http.Client
		path   string
		form   url.Values
		want   string
	}{
		{"setup handle", consoleClient(t), strings.TrimPrefix(setup, ts.URL), url.Values{"name": {"A!"}, "password": {"admin-password"}}, badHandle},
		{"setup password", consoleClient(t), strings.TrimPrefix(setup, ts.URL), url.Values{"name": {"root2"}, "password": {"short"}}, badPassword},
		{"create handle", admin, "/console/people", url.Values{"handle": {"A!"}, "password": {"password-x"}}, badHandle},
		{"create password", admin, "/console/people", url.Values{"handle": {"dan"}, "password": {"short"}}, badPassword},
		{"reset password", consoleClient(t), "/reset/" + reset, url.Values{"password": {"short"}}, badPassword},
		{"reset long password", consoleClient(t), "/reset/" + reset, url.Values{"password": {strings.Repeat("p", nah.PasswordMaxBytes+1)}}, badPassword},
	} {
		p := postForm(t, c.client, ts.URL+c.path, c.form)
		if p.status != 400 || !strings.Contains(p.body, c.want) {
			t.Errorf("%s: %d, want 400 with %q: %.300s", c.name, p.status, c.want, p.body)
		}
	}
}
