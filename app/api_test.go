package app

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

var timeRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// TestAPIScenarios walks every route through success and failure on one
// server: ann and bob are connected, cat is a stranger to both.
func TestAPIScenarios(t *testing.T) {
	ts := newTestServer(t)
	ann, bob, cat := ts.signup(t, "ann"), ts.signup(t, "bob"), ts.signup(t, "cat")
	ts.connect(t, ann, bob)
	annMoment := ts.post(t, ann, []byte("ann's first"))
	catMoment := ts.post(t, cat, []byte("cat's first"))
	ts.clock.Advance(time.Second)
	bobMoment := ts.post(t, bob, []byte("bob's first"))
	invite := ts.do(t, "POST", "/api/v1/invites", cat.token, nil).str("code")
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

	type want map[string]any // top-level JSON fields; "*" means present, any value
	scenarios := []struct {
		name       string
		method     string
		path       string
		token      string
		body       any
		wantStatus int
		wantCode   string // error code, for failures
		want       want
	}{
		// accounts
		{"signup", "POST", "/api/v1/accounts", "", map[string]string{"handle": "dan", "password": "password-dan"}, 201, "", want{"token": "*", "person": "*"}},
		{"signup handle taken", "POST", "/api/v1/accounts", "", map[string]string{"handle": "ann", "password": "password-x"}, 409, "handle_taken", nil},
		{"signup bad handle", "POST", "/api/v1/accounts", "", map[string]string{"handle": "Ann!", "password": "password-x"}, 400, "invalid_handle", nil},
		{"signup short handle", "POST", "/api/v1/accounts", "", map[string]string{"handle": "ab", "password": "password-x"}, 400, "invalid_handle", nil},
		{"signup short password", "POST", "/api/v1/accounts", "", map[string]string{"handle": "eve", "password": "short"}, 400, "invalid_password", nil},
		{"signup long password", "POST", "/api/v1/accounts", "", map[string]string{"handle": "eve", "password": strings.Repeat("p", 257)}, 400, "invalid_password", nil},
		{"signup no body", "POST", "/api/v1/accounts", "", "", 400, "invalid_json", nil},
		// sessions
		{"signin", "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"}, 201, "", want{"token": "*"}},
		{"signin wrong password", "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-bob"}, 401, "invalid_credentials", nil},
		{"signin unknown handle", "POST", "/api/v1/sessions", "", map[string]string{"handle": "nobody", "password": "password-x"}, 401, "invalid_credentials", nil},
		{"signin malformed", "POST", "/api/v1/sessions", "", `{"handle":`, 400, "invalid_json", nil},
		// me
		{"me", "GET", "/api/v1/me", ann.token, nil, 200, "", want{"connections": float64(1), "storage_used": "*", "person": "*"}},
		{"me no token", "GET", "/api/v1/me", "", nil, 401, "missing_token", nil},
		{"me garbage token", "GET", "/api/v1/me", "garbage", nil, 401, "invalid_token", nil},
		{"me unknown token", "GET", "/api/v1/me", strings.Repeat("A", 43), nil, 401, "invalid_token", nil},
		// moments
		{"post", "POST", "/api/v1/moments", ann.token, map[string]string{"body": b64("hello")}, 201, "", want{"id": "*", "author": ann.id, "created_at": "*"}},
		{"post no token", "POST", "/api/v1/moments", "", map[string]string{"body": b64("hello")}, 401, "missing_token", nil},
		{"post empty body", "POST", "/api/v1/moments", ann.token, map[string]string{"body": ""}, 400, "missing_body", nil},
		{"post missing body", "POST", "/api/v1/moments", ann.token, map[string]string{}, 400, "missing_body", nil},
		{"post bad base64", "POST", "/api/v1/moments", ann.token, map[string]string{"body": "not base64!"}, 400, "invalid_body", nil},
		{"post unpadded base64", "POST", "/api/v1/moments", ann.token, map[string]string{"body": "aGVsbG8"}, 400, "invalid_body", nil},
		{"post url base64", "POST", "/api/v1/moments", ann.token, map[string]string{"body": "-_-_"}, 400, "invalid_body", nil},
		{"post base64 with a line break", "POST", "/api/v1/moments", ann.token, map[string]string{"body": "aGVs\nbG8h"}, 400, "invalid_body", nil},
		{"post base64 with CRLF", "POST", "/api/v1/moments", ann.token, map[string]string{"body": "aGVsbG8h\r\n"}, 400, "invalid_body", nil},
		{"post body wrong type", "POST", "/api/v1/moments", ann.token, `{"body":42}`, 400, "invalid_json", nil},
		{"post at limit", "POST", "/api/v1/moments", ann.token, map[string]string{"body": base64.StdEncoding.EncodeToString(make([]byte, 65536))}, 201, "", want{"id": "*"}},
		{"post over limit", "POST", "/api/v1/moments", ann.token, map[string]string{"body": base64.StdEncoding.EncodeToString(make([]byte, 65537))}, 413, "body_too_large", nil},
		{"post request far over limit", "POST", "/api/v1/moments", ann.token, `{"body":"` + strings.Repeat("A", 200_000) + `"}`, 413, "body_too_large", nil},
		{"delete other's moment", "DELETE", "/api/v1/moments/" + bobMoment, ann.token, nil, 404, "not_found", nil},
		{"delete stranger's moment", "DELETE", "/api/v1/moments/" + catMoment, ann.token, nil, 404, "not_found", nil},
		{"delete bad id", "DELETE", "/api/v1/moments/..%2F..%2Fdirectory.db", ann.token, nil, 404, "not_found", nil},
		{"delete own moment", "DELETE", "/api/v1/moments/" + annMoment, ann.token, nil, 204, "", nil},
		{"delete it again", "DELETE", "/api/v1/moments/" + annMoment, ann.token, nil, 404, "not_found", nil},
		// feed and one person's moments
		{"feed", "GET", "/api/v1/feed", ann.token, nil, 200, "", want{"moments": "*", "next": nil}},
		{"feed limit 0", "GET", "/api/v1/feed?limit=0", ann.token, nil, 400, "invalid_limit", nil},
		{"feed limit 100", "GET", "/api/v1/feed?limit=100", ann.token, nil, 200, "", want{"moments": "*", "next": nil}},
		{"feed limit 101", "GET", "/api/v1/feed?limit=101", ann.token, nil, 400, "invalid_limit", nil},
		{"feed limit text", "GET", "/api/v1/feed?limit=ten", ann.token, nil, 400, "invalid_limit", nil},
		{"feed bad cursor", "GET", "/api/v1/feed?before=abc", ann.token, nil, 400, "invalid_cursor", nil},
		{"feed no token", "GET", "/api/v1/feed", "", nil, 401, "missing_token", nil},
		{"connection's moments", "GET", "/api/v1/people/" + bob.id + "/moments", ann.token, nil, 200, "", want{"moments": "*", "next": nil}},
		{"own moments", "GET", "/api/v1/people/" + ann.id + "/moments", ann.token, nil, 200, "", want{"moments": "*"}},
		{"moments limit 100", "GET", "/api/v1/people/" + bob.id + "/moments?limit=100", ann.token, nil, 200, "", want{"moments": "*", "next": nil}},
		{"moments limit 101", "GET", "/api/v1/people/" + bob.id + "/moments?limit=101", ann.token, nil, 400, "invalid_limit", nil},
		{"stranger's moments", "GET", "/api/v1/people/" + cat.id + "/moments", ann.token, nil, 404, "not_found", nil},
		{"unknown person's moments", "GET", "/api/v1/people/" + nah.NewPersonID() + "/moments", ann.token, nil, 404, "not_found", nil},
		{"path trick person", "GET", "/api/v1/people/..%2F..%2Fdirectory.db/moments", ann.token, nil, 404, "not_found", nil},
		// invites and connections
		{"invite", "POST", "/api/v1/invites", ann.token, nil, 201, "", want{"code": "*", "expires_at": "*"}},
		{"invite no token", "POST", "/api/v1/invites", "", nil, 401, "missing_token", nil},
		{"redeem unknown", "POST", "/api/v1/connections", ann.token, map[string]string{"code": "0000000000000000"}, 404, "invite_not_found", nil},
		{"redeem empty", "POST", "/api/v1/connections", ann.token, map[string]string{"code": ""}, 400, "missing_code", nil},
		{"redeem own", "POST", "/api/v1/connections", cat.token, map[string]string{"code": invite}, 400, "own_invite", nil},
		{"redeem", "POST", "/api/v1/connections", bob.token, map[string]string{"code": invite}, 201, "", want{"id": cat.id, "handle": "cat", "connected_at": "*"}},
		{"redeem used", "POST", "/api/v1/connections", ann.token, map[string]string{"code": invite}, 404, "invite_not_found", nil},
		{"connections", "GET", "/api/v1/connections", bob.token, nil, 200, "", want{"connections": "*"}},
		{"disconnect stranger", "DELETE", "/api/v1/connections/" + cat.id, ann.token, nil, 404, "not_found", nil},
		{"disconnect bad id", "DELETE", "/api/v1/connections/%2E%2E", ann.token, nil, 404, "not_found", nil},
		{"disconnect", "DELETE", "/api/v1/connections/" + cat.id, bob.token, nil, 204, "", nil},
		{"disconnect again", "DELETE", "/api/v1/connections/" + bob.id, cat.token, nil, 404, "not_found", nil},
		// health and routing
		{"health", "GET", "/healthz", "", nil, 200, "", want{"status": "ok"}},
		{"unknown route", "GET", "/api/v1/nothing", ann.token, nil, 404, "not_found", nil},
		{"wrong method", "PUT", "/api/v1/feed", ann.token, nil, 405, "method_not_allowed", nil},
		// sign out last: the token stops working
		{"signout", "DELETE", "/api/v1/sessions/current", bob.token, nil, 204, "", nil},
		{"revoked token", "GET", "/api/v1/me", bob.token, nil, 401, "invalid_token", nil},
		{"signout again", "DELETE", "/api/v1/sessions/current", bob.token, nil, 401, "invalid_token", nil},
	}
	for _, sc := range scenarios {
		r := ts.do(t, sc.method, sc.path, sc.token, sc.body)
		if r.status != sc.wantStatus {
			t.Errorf("%s: %s %s = %d, want %d: %s", sc.name, sc.method, sc.path, r.status, sc.wantStatus, r.raw)
			continue
		}
		if sc.wantCode != "" && r.errCode() != sc.wantCode {
			t.Errorf("%s: error code %q, want %q", sc.name, r.errCode(), sc.wantCode)
		}
		if r.status == 204 && len(r.raw) != 0 {
			t.Errorf("%s: 204 with a body", sc.name)
		}
		for k, v := range sc.want {
			got, ok := r.json[k]
			if !ok {
				t.Errorf("%s: no field %q in %s", sc.name, k, r.raw)
			} else if v != "*" && got != v {
				t.Errorf("%s: %s = %v, want %v", sc.name, k, got, v)
			}
		}
		for _, k := range []string{"created_at", "expires_at", "connected_at"} {
			if s, ok := r.json[k].(string); ok && !timeRE.MatchString(s) {
				t.Errorf("%s: %s = %q is not YYYY-MM-DDTHH:MM:SS.mmmZ", sc.name, k, s)
			}
		}
	}
}

func TestEmptyFeed(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	r := ts.do(t, "GET", "/api/v1/feed", ann.token, nil)
	if string(r.raw) != `{"moments":[],"next":null}`+"\n" {
		t.Fatalf("empty feed: %s", r.raw)
	}
}

func TestTimesHaveThreeDigitMilliseconds(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	// The fake clock stands on a whole second: RFC3339Nano would drop ".000".
	ts.post(t, ann, []byte("x"))
	items := ts.readAll(t, ann.token, "/api/v1/feed", 30)
	if len(items) != 1 || !strings.HasSuffix(items[0].CreatedAt, ":00.000Z") {
		t.Fatalf("created_at %v", items)
	}
}

func TestMeReportsConnectionsAndNewest(t *testing.T) {
	ts := newTestServer(t)
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	ts.connect(t, ann, bob)
	ts.post(t, ann, []byte("x"))
	r := ts.do(t, "GET", "/api/v1/me", ann.token, nil)
	p := r.json["person"].(map[string]any)
	if r.json["connections"] != float64(1) || p["newest_at"] == nil || p["handle"] != "ann" {
		t.Fatalf("me: %s", r.raw)
	}
	if used, _ := r.json["storage_used"].(float64); used <= 0 {
		t.Fatalf("storage_used %v", r.json["storage_used"])
	}
	cs := ts.do(t, "GET", "/api/v1/connections", bob.token, nil)
	list := cs.json["connections"].([]any)
	c := list[0].(map[string]any)
	if len(list) != 1 || c["id"] != ann.id || c["handle"] != "ann" || c["newest_at"] == nil {
		t.Fatalf("connections: %s", cs.raw)
	}
}

func TestJoinCodes(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.OpenSignup = false })
	body := map[string]string{"handle": "ann", "password": "password-ann"}
	if r := ts.do(t, "POST", "/api/v1/accounts", "", body); r.status != 400 || r.errCode() != "join_code_required" {
		t.Fatalf("no code: %d %s", r.status, r.raw)
	}
	body["join_code"] = "0000000000000000"
	if r := ts.do(t, "POST", "/api/v1/accounts", "", body); r.status != 400 || r.errCode() != "invalid_join_code" {
		t.Fatalf("bad code: %d %s", r.status, r.raw)
	}
	code, _, err := ts.store.JoinCodes().Create(t.Context(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Typed codes may come upper-case with dashes.
	body["join_code"] = strings.ToUpper(code[:8] + "-" + code[8:])
	if r := ts.do(t, "POST", "/api/v1/accounts", "", body); r.status != 201 {
		t.Fatalf("good code: %d %s", r.status, r.raw)
	}
	body["handle"] = "bob"
	if r := ts.do(t, "POST", "/api/v1/accounts", "", body); r.status != 400 || r.errCode() != "invalid_join_code" {
		t.Fatalf("used code: %d %s", r.status, r.raw)
	}
	code, _, _ = ts.store.JoinCodes().Create(t.Context(), time.Hour)
	ts.clock.Advance(2 * time.Hour)
	body["join_code"] = code
	if r := ts.do(t, "POST", "/api/v1/accounts", "", body); r.status != 400 || r.errCode() != "invalid_join_code" {
		t.Fatalf("expired code: %d %s", r.status, r.raw)
	}
	// A failed sign-up leaves no person folder behind.
	if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "bob", "password": "password-ann"}); r.status != 401 {
		t.Fatalf("bob exists: %d", r.status)
	}
}

// TestUnknownQueryParametersAreIgnored: a query parameter no route reads
// changes nothing, on a GET or a POST; only before and limit of the lists
// are read.
func TestUnknownQueryParametersAreIgnored(t *testing.T) {
	ts := newTestServer(t)
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	ts.connect(t, ann, bob)
	for i := range 7 {
		ts.post(t, bob, []byte{byte(i)})
	}
	if r := ts.do(t, "POST", "/api/v1/moments?foo=bar&limit=zero", ann.token, map[string]string{"body": "aGk="}); r.status != 201 {
		t.Errorf("a post with unknown parameters: %d %s", r.status, r.raw)
	}
	next := ts.do(t, "GET", "/api/v1/feed?limit=5", ann.token, nil).str("next")
	for _, c := range []struct{ plain, extra string }{
		{"/api/v1/feed?limit=5", "/api/v1/feed?limit=5&foo=bar"},
		{"/api/v1/feed?limit=5&before=" + next, "/api/v1/feed?foo=&before=" + next + "&limit=5&since=x&Limit=1"},
		{"/api/v1/feed", "/api/v1/feed?page=2&offset=3&cursor=abc"},
		{"/api/v1/people/" + bob.id + "/moments?limit=2", "/api/v1/people/" + bob.id + "/moments?limit=2&foo=bar"},
		{"/api/v1/me", "/api/v1/me?foo=bar"},
		{"/api/v1/connections", "/api/v1/connections?foo=bar&limit=1"},
	} {
		want := ts.do(t, "GET", c.plain, ann.token, nil)
		got := ts.do(t, "GET", c.extra, ann.token, nil)
		if want.status != 200 || got.status != want.status || !bytes.Equal(got.raw, want.raw) {
			t.Errorf("%s: %d %s\nwant as %s: %d %s", c.extra, got.status, got.raw, c.plain, want.status, want.raw)
		}
	}
}

// TestNullStringFieldsAre400: null for a string field of a request body is
// 400 invalid_json naming the field, never taken as if the field were
// absent; an absent optional field (join_code under open sign-up) is fine.
func TestNullStringFieldsAre400(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	cases := []struct {
		path, token, body, message string
	}{
		{"/api/v1/accounts", "", `{"handle":null,"password":"password-dan"}`, "handle must be a string, not null"},
		{"/api/v1/accounts", "", `{"handle":"dan","password":null}`, "password must be a string, not null"},
		{"/api/v1/accounts", "", `{"handle":"dan","password":"password-dan","join_code":null}`, "join_code must be a string, not null"},
		{"/api/v1/sessions", "", `{"handle":null,"password":"password-ann"}`, "handle must be a string, not null"},
		{"/api/v1/sessions", "", `{"handle":"ann","password":null}`, "password must be a string, not null"},
		{"/api/v1/connections", ann.token, `{"code":null}`, "code must be a string, not null"},
		{"/api/v1/moments", ann.token, `{"body":null}`, "body must be a string, not null"},
		// Any other kind names the field too.
		{"/api/v1/moments", ann.token, `{"body":42}`, "body must be a string, not a number"},
		{"/api/v1/accounts", "", `{"handle":"dan","password":"password-dan","join_code":["x"]}`, "join_code must be a string, not an array"},
		{"/api/v1/sessions", "", `{"handle":{},"password":"password-ann"}`, "handle must be a string, not an object"},
		{"/api/v1/connections", ann.token, `{"code":true}`, "code must be a string, not true or false"},
	}
	for _, c := range cases {
		r := ts.do(t, "POST", c.path, c.token, c.body)
		e, _ := r.json["error"].(map[string]any)
		if r.status != 400 || r.errCode() != "invalid_json" || e["message"] != c.message {
			t.Errorf("POST %s %s: %d %s, want 400 invalid_json %q", c.path, c.body, r.status, r.raw, c.message)
		}
	}
	// None of them signed dan up; without join_code he is signed up.
	if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "dan", "password": "password-dan"}); r.status != 401 {
		t.Fatalf("dan exists after refused sign-ups: %d %s", r.status, r.raw)
	}
	if r := ts.do(t, "POST", "/api/v1/accounts", "", `{"handle":"dan","password":"password-dan"}`); r.status != 201 {
		t.Fatalf("sign-up without join_code: %d %s", r.status, r.raw)
	}
}

// TestFailedSignupLeavesNoFolder: a sign-up refused after its person file
// was made (handle taken, bad join code) leaves nothing under people/.
func TestFailedSignupLeavesNoFolder(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.OpenSignup = false })
	folders := func() []string {
		t.Helper()
		entries, err := os.ReadDir(filepath.Join(ts.dir, "people"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	joinCode := func() string {
		t.Helper()
		code, _, err := ts.store.JoinCodes().Create(t.Context(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	r := ts.do(t, "POST", "/api/v1/accounts", "", map[string]string{"handle": "ann", "password": "password-ann", "join_code": joinCode()})
	if r.status != 201 {
		t.Fatalf("ann signs up: %d %s", r.status, r.raw)
	}
	ann := r.json["person"].(map[string]any)["id"].(string)
	for _, c := range []struct {
		name, handle, code string
		wantStatus         int
		wantCode           string
	}{
		{"handle taken", "ann", joinCode(), 409, "handle_taken"},
		{"bad join code", "bob", "0000000000000000", 400, "invalid_join_code"},
	} {
		r := ts.do(t, "POST", "/api/v1/accounts", "", map[string]string{"handle": c.handle, "password": "password-x", "join_code": c.code})
		if r.status != c.wantStatus || r.errCode() != c.wantCode {
			t.Fatalf("%s: %d %s, want %d %s", c.name, r.status, r.raw, c.wantStatus, c.wantCode)
		}
		if got := folders(); !slices.Equal(got, []string{ann}) {
			t.Errorf("%s: people/ holds %v, want only ann's folder %s", c.name, got, ann)
		}
	}
}

func TestLongPasswordIsNotTruncated(t *testing.T) {
	ts := newTestServer(t)
	long := strings.Repeat("a", 100)
	if r := ts.do(t, "POST", "/api/v1/accounts", "", map[string]string{"handle": "ann", "password": long + "1"}); r.status != 201 {
		t.Fatal(r.status)
	}
	// bcrypt alone would read 72 bytes and accept this.
	if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": long + "2"}); r.status != 401 {
		t.Fatalf("a password differing after byte 72 signed in: %d", r.status)
	}
	if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": long + "1"}); r.status != 201 {
		t.Fatalf("right password: %d", r.status)
	}
}

func TestSigninRateLimits(t *testing.T) {
	ts := newTestServer(t)
	ts.signup(t, "ann")
	wrong := map[string]string{"handle": "ann", "password": "wrong-password"}
	right := map[string]string{"handle": "ann", "password": "password-ann"}
	for i := range signinFailuresPerHandle {
		if r := ts.do(t, "POST", "/api/v1/sessions", "", wrong); r.status != 401 {
			t.Fatalf("failure %d: %d", i, r.status)
		}
	}
	r := ts.do(t, "POST", "/api/v1/sessions", "", right)
	if r.status != 429 || r.errCode() != "rate_limited" {
		t.Fatalf("right password while limited: %d %s", r.status, r.raw)
	}
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s <= 0 || s > int(signinWindow/time.Second) {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	ts.clock.Advance(signinWindow)
	if r := ts.do(t, "POST", "/api/v1/sessions", "", right); r.status != 201 {
		t.Fatalf("after the window: %d %s", r.status, r.raw)
	}
}

func TestSigninRateLimitPerAddress(t *testing.T) {
	ts := newTestServer(t)
	ts.signup(t, "ann")
	// Many handles from one address: the address limit catches it.
	for i := range signinFailuresPerAddr {
		body := map[string]string{"handle": "guess" + strconv.Itoa(i), "password": "password-x"}
		if r := ts.do(t, "POST", "/api/v1/sessions", "", body); r.status != 401 {
			t.Fatalf("failure %d: %d", i, r.status)
		}
	}
	if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"}); r.status != 429 {
		t.Fatalf("address over its limit: %d", r.status)
	}
}

func TestSignupRateLimit(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.SignupPerHour = 3 })
	for i := range 3 {
		ts.signup(t, "user"+strconv.Itoa(i))
	}
	r := ts.do(t, "POST", "/api/v1/accounts", "", map[string]string{"handle": "user9", "password": "password-x"})
	if r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("4th sign-up in an hour: %d %v", r.status, r.header)
	}
	ts.clock.Advance(time.Hour)
	ts.signup(t, "user9")
}

// TestSignupLimitCountsSignups: with a limit of 2 sign-ups an hour, failed
// attempts (a taken handle, a short password, a bad handle) leave both
// sign-ups possible; failures have their own bound, signupFailuresPerAddr,
// past which even a good sign-up waits.
func TestSignupLimitCountsSignups(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.SignupPerHour = 2 })
	ts.signup(t, "ann")
	for _, bad := range []map[string]string{
		{"handle": "ann", "password": "password-again"}, // taken
		{"handle": "bob", "password": "short"},
		{"handle": "No Such Handle!", "password": "password-x"},
	} {
		if r := ts.do(t, "POST", "/api/v1/accounts", "", bad); r.status != 409 && r.status != 400 {
			t.Fatalf("failed sign-up %v: %d %s", bad, r.status, r.raw)
		}
	}
	ts.signup(t, "bob") // the second sign-up of the hour, after three failures
	if r := ts.do(t, "POST", "/api/v1/accounts", "", map[string]string{"handle": "cat", "password": "password-cat"}); r.status != 429 {
		t.Fatalf("a third sign-up in the hour: %d %s", r.status, r.raw)
	}
	ts.clock.Advance(time.Hour)
	for i := range signupFailuresPerAddr {
		if r := ts.do(t, "POST", "/api/v1/accounts", "", map[string]string{"handle": "ann", "password": "password-ann"}); r.status != 409 {
			t.Fatalf("failure %d: %d %s", i, r.status, r.raw)
		}
	}
	if r := ts.do(t, "POST", "/api/v1/accounts", "", map[string]string{"handle": "cat", "password": "password-cat"}); r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("a sign-up after %d failures in the hour: %d %v", signupFailuresPerAddr, r.status, r.header)
	}
	ts.clock.Advance(time.Hour)
	ts.signup(t, "cat")
}

func TestTrustedProxyForwardedFor(t *testing.T) {
	send := func(ts *testServer, xff string) int {
		body := []byte(`{"handle":"x` + strconv.Itoa(int(time.Now().UnixNano()%1e9)) + `","password":"password-x"}`)
		req, _ := http.NewRequest("POST", ts.URL+"/api/v1/accounts", bytes.NewReader(body))
		req.Header.Set("X-Forwarded-For", xff)
		res, _ := sendChecked(t, ts.Client(), req, body)
		return res.StatusCode
	}
	// Untrusted peer: the header is ignored, so every sign-up counts against
	// 127.0.0.1 whatever it claims.
	ts := newTestServer(t, func(c *serverConfig) { c.SignupPerHour = 1 })
	if s := send(ts, "203.0.113.1"); s != 201 {
		t.Fatal(s)
	}
	if s := send(ts, "203.0.113.2"); s != 429 {
		t.Fatalf("forged X-Forwarded-For was believed: %d", s)
	}
	// Trusted proxy: each forwarded client has its own limit.
	ts = newTestServer(t, func(c *serverConfig) {
		c.SignupPerHour = 1
		c.TrustedProxies = mustPrefixes("127.0.0.1/32")
	})
	if s := send(ts, "203.0.113.1"); s != 201 {
		t.Fatal(s)
	}
	if s := send(ts, "203.0.113.2"); s != 201 {
		t.Fatalf("second client behind the proxy: %d", s)
	}
	if s := send(ts, "203.0.113.1"); s != 429 {
		t.Fatalf("first client again: %d", s)
	}
	// A client cannot hide behind a forged left-most entry.
	if s := send(ts, "198.51.100.7, 203.0.113.1"); s != 429 {
		t.Fatalf("forged left-most entry: %d", s)
	}
}

func TestDisabledPersonTokensStopWorking(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	if r := ts.do(t, "GET", "/api/v1/me", ann.token, nil); r.status != 200 { // the token check is now cached
		t.Fatalf("me: %d", r.status)
	}
	if err := ts.store.SetDisabled(t.Context(), ann.id, true); err != nil {
		t.Fatal(err)
	}
	if r := ts.do(t, "GET", "/api/v1/me", ann.token, nil); r.status != 401 {
		t.Fatalf("disabled person's token: %d", r.status)
	}
	if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"}); r.status != 401 || r.errCode() != "invalid_credentials" {
		t.Fatalf("disabled sign-in: %d %s", r.status, r.raw)
	}
}

// TestDisabledSigninLooksLikeWrongPassword: the right password of a
// disabled account is answered exactly as a wrong one, so a guesser cannot
// learn that they found it, and it counts against the limit like one.
func TestDisabledSigninLooksLikeWrongPassword(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	if err := ts.store.SetDisabled(t.Context(), ann.id, true); err != nil {
		t.Fatal(err)
	}
	wrong := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "wrong-password"})
	right := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"})
	if right.status != wrong.status || !bytes.Equal(right.raw, wrong.raw) {
		t.Fatalf("disabled account, right password: %d %s; wrong password: %d %s", right.status, right.raw, wrong.status, wrong.raw)
	}
	for i := 2; i < signinFailuresPerHandle; i++ {
		ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"})
	}
	if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"}); r.status != 429 {
		t.Fatalf("after %d right passwords of a disabled account: %d, want 429", signinFailuresPerHandle, r.status)
	}
}
