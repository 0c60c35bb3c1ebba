package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah/store"
)

// signIn signs handle in with device as its User-Agent and returns the token.
func (ts *testServer) signIn(t *testing.T, handle, device string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"handle": handle, "password": "password-" + handle})
	req, _ := http.NewRequest("POST", ts.URL+"/api/v1/sessions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", device)
	res, raw := sendChecked(t, ts.Client(), req, body)
	var v struct{ Token string }
	if res.StatusCode != 201 || json.Unmarshal(raw, &v) != nil {
		t.Fatalf("sign in %s: %d %s", handle, res.StatusCode, raw)
	}
	return v.Token
}

// status is the answer to GET /api/v1/me with token.
func (ts *testServer) meStatus(t *testing.T, token string) int {
	t.Helper()
	return ts.do(t, "GET", "/api/v1/me", token, nil).status
}

// TestSessionsPerPerson: a person keeps store.MaxSessions sessions; a new
// one signs out the one used least recently, not the oldest nor itself,
// and at once.
func TestSessionsPerPerson(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	tokens := []string{ann.token}
	for len(tokens) < store.MaxSessions {
		ts.clock.Advance(time.Minute)
		tokens = append(tokens, ts.signIn(t, "ann", "phone"))
	}
	ts.clock.Advance(2 * time.Hour)
	if s := ts.meStatus(t, ann.token); s != 200 { // the oldest, used again
		t.Fatalf("ann's first session, with %d: %d", store.MaxSessions, s)
	}
	ts.clock.Advance(time.Minute)
	tokens = append(tokens, ts.signIn(t, "ann", "phone"))
	for i, tok := range tokens {
		want := 200
		if i == 1 { // used least recently: signed in a minute after the first, never used
			want = 401
		}
		if s := ts.meStatus(t, tok); s != want {
			t.Errorf("session %d of %d: %d, want %d", i+1, len(tokens), s, want)
		}
	}
	ss, err := ts.store.Sessions(context.Background(), ann.id, 100)
	if err != nil || len(ss) != store.MaxSessions {
		t.Errorf("ann's sessions: %d (%v), want %d", len(ss), err, store.MaxSessions)
	}

	// bob's sessions all in one instant, each used (so cached): the one a
	// new sign-in drops stops working at once, not StaleAfter later.
	bob := ts.signup(t, "bob")
	tokens = []string{bob.token}
	for len(tokens) < store.MaxSessions {
		tokens = append(tokens, ts.signIn(t, "bob", "phone"))
	}
	for _, tok := range tokens {
		ts.meStatus(t, tok)
	}
	ts.signIn(t, "bob", "phone")
	refused := 0
	for _, tok := range tokens {
		if ts.meStatus(t, tok) == 401 {
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("bob's %d cached sessions after one more: %d refused, want 1", len(tokens), refused)
	}
}

// TestSessionsExpire: a session unused for store.SessionIdle answers 401 and
// the sweep deletes it; each use moves its end on.
func TestSessionsExpire(t *testing.T) {
	ts := newTestServer(t)
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	for range 2 { // 180 days, used every 89
		ts.clock.Advance(store.SessionIdle - 24*time.Hour)
		if s := ts.meStatus(t, ann.token); s != 200 {
			t.Fatalf("ann's session used after %v unused: %d", store.SessionIdle-24*time.Hour, s)
		}
	}
	if s := ts.meStatus(t, bob.token); s != 401 {
		t.Errorf("bob's session unused for %v: %d, want 401", 2*(store.SessionIdle-24*time.Hour), s)
	}
	ts.clock.Advance(store.SessionIdle + time.Minute)
	if s := ts.meStatus(t, ann.token); s != 401 {
		t.Errorf("ann's session unused for %v: %d, want 401", store.SessionIdle+time.Minute, s)
	}
	if n, err := ts.store.DeleteExpiredSessions(context.Background()); n != 2 || err != nil {
		t.Errorf("the sweep deleted %d expired sessions (%v), want 2", n, err)
	}
	ts.signIn(t, "ann", "phone")
	if n, _ := ts.store.DeleteExpiredSessions(context.Background()); n != 0 {
		t.Errorf("the sweep deleted %d live sessions", n)
	}
}

// TestConsoleListsSessions: a person's page lists each signed-in phone by
// the User-Agent it signed in with (escaped, control bytes replaced), used
// most recently first, with when it expires unused; one can be signed out.
func TestConsoleListsSessions(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann") // Go-http-client/1.1
	ts.clock.Advance(2 * time.Hour)
	phone := ts.signIn(t, "ann", "nah-ios/1.4 (iPhone15,2; iOS 18.1)")
	ts.clock.Advance(2 * time.Hour)
	ts.signIn(t, "ann", "<script>x</script>\u00e9tab")
	ts.clock.Advance(2 * time.Hour)
	ts.meStatus(t, phone) // the phone is now the one used last
	admin := signedInAdmin(t, ts)
	p := get(t, admin, ts.URL+"/console/people/"+ann.id)
	i, j, k := strings.Index(p.body, "nah-ios/1.4 (iPhone15,2; iOS 18.1)"), strings.Index(p.body, "&lt;script&gt;x&lt;/script&gt;??tab"), strings.Index(p.body, "Go-http-client/1.1")
	if p.status != 200 || i < 0 || j < 0 || k < 0 || !(i < j && j < k) {
		t.Errorf("ann's page: %d, phones at %d, %d, %d: want all three, used most recently first", p.status, i, j, k)
	}
	if strings.Contains(p.body, "<script>x") {
		t.Errorf("a User-Agent reached the page unescaped")
	}
	ss, err := ts.store.Sessions(context.Background(), ann.id, 10)
	if err != nil || len(ss) != 3 {
		t.Fatalf("sessions %v %v", ss, err)
	}
	expires := time.UnixMilli(ss[0].UsedAt).Add(store.SessionIdle).UTC().Format(time.RFC3339)
	if ss[0].Device != "nah-ios/1.4 (iPhone15,2; iOS 18.1)" || !strings.Contains(p.body, `datetime="`+expires+`"`) {
		t.Errorf("the phone used last: %+v; its page shows no expiry at %s", ss[0], expires)
	}
	page := postForm(t, admin, ts.URL+"/console/people/"+ann.id+"/sessions/revoke", map[string][]string{"session": {ss[0].ID}}, "Origin", ts.URL)
	if page.status != 303 || ts.meStatus(t, phone) != 401 {
		t.Errorf("signing the phone out: %d, its token still works", page.status)
	}
}
