package app

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nah-app/nah/ui"
)

// rawRequest is a request without a body as a client writes it.
func rawRequest(method, target string, header ...string) string {
	s := method + " " + target + " HTTP/1.1\r\nHost: nah.test\r\n"
	for _, h := range header {
		if h != "" {
			s += h + "\r\n"
		}
	}
	return s + "\r\n"
}

// TestHeadAnswersLikeGet: HEAD on every GET route answers with the GET's
// status and headers, Content-Length included, and no body; the handler
// runs once, counted under HEAD.
func TestHeadAnswersLikeGet(t *testing.T) {
	ts := newTestServer(t)
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	ts.connect(t, ann, bob)
	for i := range 5 {
		ts.post(t, bob, make([]byte, 1000*i+1))
	}
	admin := signedInAdmin(t, ts)
	u, _ := url.Parse(ts.URL)
	cookie := "Cookie: " + admin.Jar.Cookies(u)[0].String()
	bearer := "Authorization: Bearer " + ann.token
	setup, err := SetupLink(t.Context(), ts.store, ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path, header string
		status       int
	}{
		{"/healthz", "", 200},
		{"/api/v1/me", bearer, 200},
		{"/api/v1/feed", bearer, 200},
		{"/api/v1/feed?limit=2", bearer, 200},
		{"/api/v1/feed", "", 401},
		{"/api/v1/people/" + bob.id + "/moments", bearer, 200},
		{"/api/v1/connections", bearer, 200},
		{"/console/login", "", 200},
		{"/console", "", 303},
		{"/console", cookie, 200},
		{"/console/people", cookie, 200},
		{"/console/people/" + ann.id, cookie, 200},
		{"/console/joincodes", cookie, 200},
		{"/console/settings", cookie, 200},
		{"/console/people?q=an", cookie, 200},
		{strings.TrimPrefix(setup, ts.URL), "", 200},
		{"/console/setup/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "", 404},
		{"/reset/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "", 404},
		{ui.Asset("htmx.min.js"), "", 200},
		{"/favicon.ico", "", 204},
	}
	// One connection for all: a HEAD answer with a body would garble the
	// answer after it.
	c := dialRaw(t, ts)
	for _, tc := range cases {
		gs, gh, gbody := c.roundTrip(t, rawRequest("GET", tc.path, tc.header))
		hs, hh, hbody := c.roundTrip(t, rawRequest("HEAD", tc.path, tc.header))
		if gs != tc.status || hs != gs || len(hbody) != 0 {
			t.Errorf("%s: GET %d, HEAD %d with %d bytes of body; want %d and none", tc.path, gs, hs, len(hbody), tc.status)
		}
		if cl := gh.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(gbody)) {
			t.Errorf("%s: GET's Content-Length %s for %d bytes", tc.path, cl, len(gbody))
		}
		for k := range gh {
			if k != "Date" && !slices.Equal(gh[k], hh[k]) {
				t.Errorf("%s: %s is %q on GET, %q on HEAD", tc.path, k, gh[k], hh[k])
			}
		}
		for k := range hh {
			if _, ok := gh[k]; !ok {
				t.Errorf("%s: HEAD has %s, GET not", tc.path, k)
			}
		}
	}
	if s, _, _ := c.roundTrip(t, rawRequest("GET", "/healthz")); s != 200 {
		t.Fatalf("after the HEADs, health is %d", s)
	}
	// The feed's Content-Length is the page's, which HEAD does not write.
	_, _, gbody := c.roundTrip(t, rawRequest("GET", "/api/v1/feed", bearer))
	_, hh, _ := c.roundTrip(t, rawRequest("HEAD", "/api/v1/feed", bearer))
	if len(gbody) < 5000 || hh.Get("Content-Length") != strconv.Itoa(len(gbody)) {
		t.Errorf("HEAD /api/v1/feed: Content-Length %q, the GET's page is %d bytes", hh.Get("Content-Length"), len(gbody))
	}
	// Each HEAD ran its handler once, counted as HEAD on the GET's route.
	for method, want := range map[string]int64{"GET": 4, "HEAD": 4} {
		ts.app.metrics.mu.RLock()
		rs := ts.app.metrics.routes[routeKey{method, "/api/v1/feed"}]
		ts.app.metrics.mu.RUnlock()
		if rs == nil || rs.n.Load() != want {
			t.Errorf("%s /api/v1/feed counted %v times, want %d", method, rs, want)
		}
	}
}

// TestHeadWhereNoGetIs405: HEAD on a route without GET is 405, with an
// Allow that lists what the route takes; HEAD is in Allow wherever GET is.
func TestHeadWhereNoGetIs405(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	c := dialRaw(t, ts)
	for _, tc := range []struct{ method, path, allow string }{
		{"HEAD", "/api/v1/moments", "POST"},
		{"HEAD", "/api/v1/accounts", "POST"},
		{"HEAD", "/api/v1/sessions/current", "DELETE"},
		{"HEAD", "/api/v1/moments/" + ann.id, "DELETE"},
		{"PUT", "/api/v1/connections", "GET, HEAD, POST"},
		{"DELETE", "/api/v1/feed", "GET, HEAD"},
		{"POST", "/healthz", "GET, HEAD"},
	} {
		status, h, body := c.roundTrip(t, rawRequest(tc.method, tc.path, "Authorization: Bearer "+ann.token, "Content-Length: 0"))
		if status != http.StatusMethodNotAllowed || h.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d Allow %q, want 405 Allow %q", tc.method, tc.path, status, h.Get("Allow"), tc.allow)
		}
		if tc.method == "HEAD" && len(body) != 0 {
			t.Errorf("%s %s: a body", tc.method, tc.path)
		}
	}
	if status, _, _ := c.roundTrip(t, rawRequest("HEAD", "/api/v1/nothing")); status != 404 {
		t.Errorf("HEAD on no route: %d", status)
	}
	if status, _, _ := c.roundTrip(t, rawRequest("GET", "/healthz")); status != 200 {
		t.Fatalf("after the HEADs, health is %d", status)
	}
}
