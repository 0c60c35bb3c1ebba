package app

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah/store"
)

// consoleClient is a browser-like client: a cookie jar, redirects not
// followed so that tests see them.
func consoleClient(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type htmlPage struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, c *http.Client, u string) htmlPage {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	return send(t, c, req)
}

// send sends req with c and reads the whole answer.
func send(t *testing.T, c *http.Client, req *http.Request) htmlPage {
	t.Helper()
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return htmlPage{res.StatusCode, res.Header, string(b)}
}

func postForm(t *testing.T, c *http.Client, u string, form url.Values, header ...string) htmlPage {
	t.Helper()
	req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return send(t, c, req)
}

// postRestore restores person to at as the console does: it opens the
// confirmation, spends its ticket, and follows the answer to the result.
// A refused confirmation or a refused restore is returned as it is.
func postRestore(t *testing.T, c *http.Client, base, person, at string, header ...string) htmlPage {
	t.Helper()
	confirm := get(t, c, base+"/console/backups/restore?"+url.Values{"person": {person}, "at": {at}}.Encode())
	ticket := ticketField.FindStringSubmatch(confirm.body)
	if confirm.status != http.StatusOK || ticket == nil {
		return confirm
	}
	p := postForm(t, c, base+"/console/backups/restore", url.Values{"ticket": {ticket[1]}}, header...)
	if p.status != http.StatusSeeOther {
		return p
	}
	return get(t, c, base+p.header.Get("Location"))
}

var ticketField = regexp.MustCompile(`name="ticket" value="([^"]+)"`)

// mustAdmin makes an admin the way the server does: through a one-time
// admin link.
func mustAdmin(t *testing.T, s *store.Store, name, password string) {
	t.Helper()
	ctx := context.Background()
	link, err := s.CreateLink(ctx, store.LinkAdmin, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	hash, _ := store.HashPassword(password, 4)
	if _, err := s.Admins().CreateWithLink(ctx, link, name, hash); err != nil {
		t.Fatal(err)
	}
}

// signedInAdmin makes an admin and signs a fresh client in.
func signedInAdmin(t *testing.T, ts *testServer) *http.Client {
	t.Helper()
	mustAdmin(t, ts.store, "root", "admin-password")
	c := consoleClient(t)
	p := postForm(t, c, ts.URL+"/console/login", url.Values{"name": {"root"}, "password": {"admin-password"}})
	if p.status != 303 || p.header.Get("Location") != "/console" {
		t.Fatalf("sign in: %d %s", p.status, p.header.Get("Location"))
	}
	return c
}

var titleRE = regexp.MustCompile(`<title>([^<]*)</title>`)

func TestConsolePagesRender(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	c := signedInAdmin(t, ts)
	for _, path := range []string{"/console", "/console/people", "/console/people?q=an", "/console/people/" + ann.id, "/console/joincodes", "/console/settings", "/console/deleted"} {
		p := get(t, c, ts.URL+path)
		if p.status != 200 || !strings.Contains(p.header.Get("Content-Type"), "text/html") {
			t.Errorf("%s: %d %s", path, p.status, p.header.Get("Content-Type"))
			continue
		}
		if m := titleRE.FindStringSubmatch(p.body); m == nil || strings.Count(p.body, "<h1>") != 1 {
			t.Errorf("%s: no title or not exactly one h1", path)
		}
	}
	if p := get(t, c, ts.URL+"/console/people?q=an"); !strings.Contains(p.body, ">ann</a>") {
		t.Errorf("search for 'an' does not list ann")
	}
	if p := get(t, c, ts.URL+"/console/people/"+strings.Repeat("a", 26)); p.status != 404 {
		t.Errorf("unknown person: %d", p.status)
	}
}

func TestConsoleRedirectsWhenSignedOut(t *testing.T) {
	ts := newTestServer(t)
	c := consoleClient(t)
	for _, path := range []string{"/console", "/console/people", "/console/joincodes", "/console/settings"} {
		if p := get(t, c, ts.URL+path); p.status != 303 || p.header.Get("Location") != "/console/login" {
			t.Errorf("%s signed out: %d %s", path, p.status, p.header.Get("Location"))
		}
	}
	if p := postForm(t, c, ts.URL+"/console/people", url.Values{"handle": {"eve"}, "password": {"password-eve"}}); p.status != 303 {
		t.Errorf("create signed out: %d", p.status)
	}
	if p := get(t, c, ts.URL+"/console/login"); p.status != 200 {
		t.Errorf("login page: %d", p.status)
	}
}

// TestConsoleRejectsCrossOriginPosts walks every POST route of the router
// outside the API (the console's, sign-in's and reset's), so that one
// registered outside the cross-origin protection is caught: a signed-in
// admin's browser sending it from another site gets 403, and nothing
// changes.
func TestConsoleRejectsCrossOriginPosts(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	c := signedInAdmin(t, ts)
	params := strings.NewReplacer("{id}", ann.id, "{token}", "not-a-token", "{stamp}", "20260101T000000Z")
	var paths []string
	err := chi.Walk(ts.app.handler.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		// The embedded files answer every method and change nothing.
		if method == http.MethodPost && !strings.HasPrefix(route, "/api/") && !strings.HasPrefix(route, "/static/") {
			paths = append(paths, params.Replace(route))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 20 {
		t.Fatalf("%d POST routes outside the API, want the console's 20 and more: %v", len(paths), paths)
	}
	slices.Sort(paths)
	for _, path := range paths {
		p := postForm(t, c, ts.URL+path, url.Values{"ttl": {"24h"}}, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
		if p.status != http.StatusForbidden {
			t.Errorf("cross-origin POST %s: %d", path, p.status)
		}
	}
	if r := ts.do(t, "GET", "/api/v1/me", ann.token, nil); r.status != 200 {
		t.Fatalf("ann was disabled by a cross-origin request: %d", r.status)
	}
	// Same origin, as a browser sends it, passes.
	p := postForm(t, c, ts.URL+"/console/people/"+ann.id+"/disable", nil, "Sec-Fetch-Site", "same-origin", "Origin", ts.URL)
	if p.status != 303 {
		t.Fatalf("same-origin POST: %d", p.status)
	}
}

// TestConsoleSignInFormsRejectCrossOrigin: the forms used before anyone
// is signed in are state changes too: a cross-site POST to sign-in (login
// CSRF: the victim's browser signed in as the attacker), to an admin
// setup link or to a reset link is 403, sets no cookie and leaves the link
// usable; the same POSTs from the console's own origin work.
func TestConsoleSignInFormsRejectCrossOrigin(t *testing.T) {
	ts := newTestServer(t)
	ctx := context.Background()
	mustAdmin(t, ts.store, "root", "admin-password")
	ann := ts.signup(t, "ann")
	setup, err := ts.store.CreateLink(ctx, store.LinkAdmin, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	reset, err := ts.store.CreateLink(ctx, store.LinkReset, ann.id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	forms := []struct {
		path string
		form url.Values
	}{
		{"/console/login", url.Values{"name": {"root"}, "password": {"admin-password"}}},
		{"/console/setup/" + setup, url.Values{"name": {"second"}, "password": {"second-password"}, "password2": {"second-password"}}},
		{"/reset/" + reset, url.Values{"password": {"new-password-ann"}, "password2": {"new-password-ann"}}},
	}
	for _, f := range forms {
		c := consoleClient(t)
		p := postForm(t, c, ts.URL+f.path, f.form, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
		if p.status != http.StatusForbidden || p.header.Get("Set-Cookie") != "" {
			t.Errorf("cross-site POST %s: %d, Set-Cookie %q; want 403 and no cookie", f.path, p.status, p.header.Get("Set-Cookie"))
		}
	}
	if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"}); r.status != 201 {
		t.Errorf("ann's old password after a cross-site reset: %d", r.status)
	}
	for _, f := range forms {
		c := consoleClient(t)
		p := postForm(t, c, ts.URL+f.path, f.form, "Sec-Fetch-Site", "same-origin", "Origin", ts.URL)
		if p.status >= 400 {
			t.Errorf("same-origin POST %s after the cross-site one: %d\n%.1000s", f.path, p.status, p.body)
		}
	}
}

func signedInAdminOn(t *testing.T, ts *testServer) *http.Client {
	c := consoleClient(t)
	if p := postForm(t, c, ts.URL+"/console/login", url.Values{"name": {"root"}, "password": {"admin-password"}}); p.status != 303 {
		t.Fatalf("sign in: %d", p.status)
	}
	return c
}

func TestStaticAssets(t *testing.T) {
	ts := newTestServer(t)
	c := consoleClient(t)
	p := get(t, c, ts.URL+"/console/login")
	src := regexp.MustCompile(`/static/htmx\.min\.[0-9a-f]{12}\.js`).FindString(p.body)
	if src == "" {
		t.Fatal("no hashed htmx URL on the page")
	}
	a := get(t, c, ts.URL+src)
	if a.status != 200 || !strings.Contains(a.header.Get("Cache-Control"), "immutable") || !strings.Contains(a.body, "htmx") {
		t.Fatalf("asset: %d %q", a.status, a.header.Get("Cache-Control"))
	}
	if a := get(t, c, ts.URL+"/static/htmx.min.js"); a.status != 404 {
		t.Fatalf("unhashed name: %d", a.status)
	}
	if a := get(t, c, ts.URL+"/static/..%2f..%2fgo.mod"); a.status != 404 {
		t.Fatalf("path trick: %d", a.status)
	}
}

// TestConsoleFooterVersion: every console page, signed in or not, names
// the binary's version in its footer.
func TestConsoleFooterVersion(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.Version = "v1.2.3-test" })
	c := signedInAdmin(t, ts)
	for _, path := range []string{"/console/login", "/console", "/console/people", "/console/no-such-page"} {
		if p := get(t, c, ts.URL+path); !strings.Contains(p.body, `id="version">nah v1.2.3-test</p>`) {
			t.Errorf("%s: %d, no version in the footer", path, p.status)
		}
	}
}
