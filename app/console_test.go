package app

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah"
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
	res, err := c.Get(u)
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
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return htmlPage{res.StatusCode, res.Header, string(b)}
}

// signedInAdmin makes an admin and signs a fresh client in.
func signedInAdmin(t *testing.T, ts *testServer) *http.Client {
	t.Helper()
	hash, _ := HashPassword("admin-password", 4)
	if _, err := ts.store.CreateAdmin(context.Background(), "root", hash); err != nil {
		t.Fatal(err)
	}
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
	for _, path := range []string{"/console", "/console/people", "/console/people?q=an", "/console/people/" + ann.id, "/console/joincodes", "/console/settings"} {
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

func TestConsoleRejectsCrossOriginPosts(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	c := signedInAdmin(t, ts)
	for _, path := range []string{"/console/people/" + ann.id + "/disable", "/console/joincodes", "/console/settings", "/console/logout"} {
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
	hash, _ := HashPassword("admin-password", 4)
	ts2.store.CreateAdmin(context.Background(), "root", hash)
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

func signedInAdminOn(t *testing.T, ts *testServer) *http.Client {
	c := consoleClient(t)
	if p := postForm(t, c, ts.URL+"/console/login", url.Values{"name": {"root"}, "password": {"admin-password"}}); p.status != 303 {
		t.Fatalf("sign in: %d", p.status)
	}
	return c
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
	p := postForm(t, c, link, url.Values{"name": {"root"}, "password": {"admin-password"}})
	if p.status != 303 {
		t.Fatalf("setup: %d %s", p.status, p.body)
	}
	if p := get(t, c, ts.URL+"/console"); p.status != 200 {
		t.Fatalf("console after setup: %d", p.status)
	}
	if p := postForm(t, consoleClient(t), link, url.Values{"name": {"eve"}, "password": {"password-eve"}}); p.status != 404 {
		t.Fatalf("setup link used twice: %d", p.status)
	}
	ts.clock.Advance(setupLinkTTL + 1)
	late, _ := SetupLink(context.Background(), ts.store, ts.URL)
	ts.clock.Advance(setupLinkTTL + 1)
	if p := get(t, consoleClient(t), late); p.status != 404 {
		t.Fatalf("expired setup link: %d", p.status)
	}
}

func TestConsolePeopleActions(t *testing.T) {
	ts := newTestServer(t)
	c := signedInAdmin(t, ts)
	// Create a person; they can sign in.
	p := postForm(t, c, ts.URL+"/console/people", url.Values{"handle": {"dan"}, "password": {"password-dan"}})
	if p.status != 303 {
		t.Fatalf("create: %d %s", p.status, p.body)
	}
	id := strings.TrimPrefix(strings.Split(p.header.Get("Location"), "?")[0], "/console/people/")
	r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "dan", "password": "password-dan"})
	if r.status != 201 {
		t.Fatalf("dan signs in: %d", r.status)
	}
	token := r.str("token")
	if p := postForm(t, c, ts.URL+"/console/people", url.Values{"handle": {"dan"}, "password": {"password-dan"}}); p.status != 409 {
		t.Fatalf("duplicate handle: %d", p.status)
	}
	// Disable: the token stops at once; enable: it works again.
	postForm(t, c, ts.URL+"/console/people/"+id+"/disable", nil)
	if r := ts.do(t, "GET", "/api/v1/me", token, nil); r.status != 401 {
		t.Fatalf("disabled: %d", r.status)
	}
	postForm(t, c, ts.URL+"/console/people/"+id+"/enable", nil)
	if r := ts.do(t, "GET", "/api/v1/me", token, nil); r.status != 200 {
		t.Fatalf("enabled: %d", r.status)
	}
	// Sessions: listed, revoked one by one.
	pg := get(t, c, ts.URL+"/console/people/"+id)
	m := regexp.MustCompile(`name="session" value="([0-9a-f]{16})"`).FindStringSubmatch(pg.body)
	if m == nil {
		t.Fatal("no session listed")
	}
	if p := postForm(t, c, ts.URL+"/console/people/"+id+"/sessions/revoke", url.Values{"session": {m[1]}}); p.status != 303 {
		t.Fatalf("revoke: %d", p.status)
	}
	if r := ts.do(t, "GET", "/api/v1/me", token, nil); r.status != 401 {
		t.Fatalf("revoked session: %d", r.status)
	}
	// Password reset link: shown once, works once, revokes sessions.
	r = ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "dan", "password": "password-dan"})
	token = r.str("token")
	p = postForm(t, c, ts.URL+"/console/people/"+id+"/reset", nil)
	link := regexp.MustCompile(`http://[^<"]+/reset/[A-Za-z0-9_-]+`).FindString(p.body)
	if p.status != 201 || link == "" {
		t.Fatalf("reset link: %d", p.status)
	}
	if p := get(t, consoleClient(t), link); p.status != 200 || !strings.Contains(p.body, "dan") {
		t.Fatalf("reset page: %d", p.status)
	}
	if p := postForm(t, consoleClient(t), link, url.Values{"password": {"short"}}); p.status != 400 {
		t.Fatalf("short password: %d", p.status)
	}
	if p := postForm(t, consoleClient(t), link, url.Values{"password": {"a-new-password"}}); p.status != 200 {
		t.Fatalf("reset: %d %s", p.status, p.body)
	}
	if r := ts.do(t, "GET", "/api/v1/me", token, nil); r.status != 401 {
		t.Fatalf("session survived a reset: %d", r.status)
	}
	if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "dan", "password": "a-new-password"}); r.status != 201 {
		t.Fatalf("new password: %d", r.status)
	}
	if p := postForm(t, consoleClient(t), link, url.Values{"password": {"third-password"}}); p.status != 404 {
		t.Fatalf("reset link used twice: %d", p.status)
	}
}

func TestConsoleJoinCodes(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.OpenSignup = false })
	c := signedInAdmin(t, ts)
	p := postForm(t, c, ts.URL+"/console/joincodes", url.Values{"ttl": {"168h"}})
	code := regexp.MustCompile(`<output class="secret" id="secret">([0-9a-z]{16})</output>`).FindStringSubmatch(p.body)
	if p.status != 201 || code == nil {
		t.Fatalf("create: %d", p.status)
	}
	if p := postForm(t, c, ts.URL+"/console/joincodes", url.Values{"ttl": {"forever"}}); p.status != 400 {
		t.Fatalf("bad ttl: %d", p.status)
	}
	list := get(t, c, ts.URL+"/console/joincodes")
	if !strings.Contains(list.body, code[1][:4]+"…") || strings.Contains(list.body, code[1]) {
		t.Fatal("the list should show the hint and never the code")
	}
	id := regexp.MustCompile(`/console/joincodes/([0-9a-f]{16})/revoke`).FindStringSubmatch(list.body)
	if p := postForm(t, c, ts.URL+"/console/joincodes/"+id[1]+"/revoke", nil); p.status != 303 {
		t.Fatalf("revoke: %d", p.status)
	}
	r := ts.do(t, "POST", "/api/v1/accounts", "", map[string]string{"handle": "eve", "password": "password-eve", "join_code": code[1]})
	if r.status != 400 || r.errCode() != "invalid_join_code" {
		t.Fatalf("revoked code signed up: %d", r.status)
	}
	if p := postForm(t, c, ts.URL+"/console/joincodes/"+id[1]+"/revoke", nil); p.status != 404 {
		t.Fatalf("revoke twice: %d", p.status)
	}
}

func TestConsoleOpenSignupSetting(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.OpenSignup = false })
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

func TestPrometheusMetrics(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	ts.post(t, ann, []byte("x"))
	ts.do(t, "GET", "/api/v1/feed", ann.token, nil)
	rec := &strings.Builder{}
	ts.app.writePrometheus(rec)
	out := rec.String()
	for _, want := range []string{
		`nah_http_requests_total{route="/api/v1/feed",method="GET",code="2xx"} 1`,
		`nah_http_request_duration_seconds_count{route="/api/v1/moments",method="POST"} 1`,
		`nah_http_request_duration_seconds_bucket{route="/api/v1/feed",method="GET",le="+Inf"} 1`,
		"nah_open_person_files ", "nah_sqlite_memory_bytes ", "nah_goroutines ", "nah_resident_memory_bytes ", "nah_sqlite_connections ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(out, ann.token) || strings.Contains(out, ann.id) {
		t.Error("metrics hold a token or an id")
	}
	pts := ts.app.metrics.series()
	if len(pts) != ringMinutes || pts[len(pts)-1].FeedP95 <= 0 || pts[len(pts)-1].PostP95 <= 0 {
		t.Fatalf("chart series: %+v", pts[len(pts)-1])
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

func TestConsolePeoplePages(t *testing.T) {
	ts := newTestServer(t)
	for i := range peoplePerPage + 5 {
		if _, err := ts.store.CreatePerson(context.Background(), store.NewPerson{Handle: fmt.Sprintf("p%03d", i), PasswordHash: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	c := signedInAdmin(t, ts)
	p1 := get(t, c, ts.URL+"/console/people")
	p2 := get(t, c, ts.URL+"/console/people?page=2")
	rows := func(s string) int { return strings.Count(s, `<td><a href="/console/people/`) }
	if rows(p1.body) != peoplePerPage || rows(p2.body) != 5 || !strings.Contains(p1.body, "page 1 of 2") || !strings.Contains(p1.body, ">Next<") {
		t.Fatalf("pages hold %d and %d rows", rows(p1.body), rows(p2.body))
	}
	// htmx's search asks for the list alone.
	req, _ := http.NewRequest("GET", ts.URL+"/console/people?q=p00", nil)
	req.Header.Set("HX-Request", "true")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if s := string(b); strings.Contains(s, "<html") || !strings.HasPrefix(strings.TrimSpace(s), `<section id="people-list"`) || rows(s) != 10 {
		t.Fatalf("fragment: %.200s", s)
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
