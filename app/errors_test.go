package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/ui"
)

func TestRetryAfterRule(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int
	}{
		{time.Nanosecond, 1},
		{999 * time.Millisecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{599*time.Second + 500*time.Millisecond, 600},
		{600 * time.Second, 600},
	} {
		if got := retryAfterSeconds(c.d); got != c.want {
			t.Errorf("retryAfterSeconds(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

// TestRetryAfterSameForAPIAndConsole: the API's and the console's sign-ins,
// limited at the same instant, tell the client the same wait, and it is the
// limiter's remaining time, not the whole window.
func TestRetryAfterSameForAPIAndConsole(t *testing.T) {
	ts := newTestServer(t)
	ts.signup(t, "ann")
	mustAdmin(t, ts.store, "root", "admin-password")
	c := consoleClient(t)
	for range signinFailuresPerHandle {
		ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "wrong-password"})
		postForm(t, c, ts.URL+"/console/login", url.Values{"name": {"root"}, "password": {"wrong-password"}})
	}
	for _, step := range []struct {
		advance time.Duration
		want    string
	}{
		{5 * time.Minute, "600"},        // exactly 600 s left
		{500 * time.Millisecond, "600"}, // 599.5 s left: rounded up
		{599 * time.Second, "1"},        // 0.5 s left: at least 1
	} {
		ts.clock.Advance(step.advance)
		api := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"})
		con := postForm(t, c, ts.URL+"/console/login", url.Values{"name": {"root"}, "password": {"admin-password"}})
		if api.status != 429 || con.status != 429 {
			t.Fatalf("after %v: API %d, console %d, want 429 from both", step.advance, api.status, con.status)
		}
		if a, c := api.header.Get("Retry-After"), con.header.Get("Retry-After"); a != step.want || c != step.want {
			t.Errorf("after %v: Retry-After API %q, console %q, want %q from both", step.advance, a, c, step.want)
		}
	}
}

// TestErrorPathHidesForeignErrors: an error that is not an *nah.Error, on
// every way out (JSON, a page, a form such as handleSetup's), is a 500 whose
// text never reaches the client, and nothing panics; a wrapped *nah.Error
// keeps its status and sentence.
func TestErrorPathHidesForeignErrors(t *testing.T) {
	ts := newTestServer(t)
	a := ts.app
	secret := "open /var/lib/nah/directory.db: disk on fire"
	ways := map[string]func(http.ResponseWriter, *http.Request, error){
		"api":  a.writeError,
		"page": func(w http.ResponseWriter, r *http.Request, err error) { a.consoleError(w, r, ui.Page{}, err) },
		"form": func(w http.ResponseWriter, r *http.Request, err error) {
			a.formError(w, r, ui.Form{Page: ui.Page{Title: "Create an admin"}, Action: "/console/setup/x", Kind: "setup"}, err)
		},
	}
	for name, write := range ways {
		for _, c := range []struct {
			err        error
			wantStatus int
			wantText   string
		}{
			{errors.New(secret), 500, "something went wrong on the server"},
			{fmt.Errorf("wrapped: %w", errors.New(secret)), 500, "something went wrong on the server"},
			{fmt.Errorf("setup: %w", nah.CheckPassword("short")), 400, "a password is 8 to 256 bytes"},
			{&nah.Error{Code: nah.Internal, Message: secret}, 500, "something went wrong on the server"},
		} {
			rec := httptest.NewRecorder()
			write(rec, httptest.NewRequest("POST", "/console/setup/x", nil), c.err)
			body := rec.Body.String()
			if rec.Code != c.wantStatus || !strings.Contains(body, c.wantText) || strings.Contains(body, "disk on fire") {
				t.Errorf("%s, %v: %d %.300s", name, c.err, rec.Code, body)
			}
		}
	}
}

// TestRouterErrorsAreSPECErrors: unknown routes, wrong methods, a failed
// health check and a panic all answer with the SPEC's JSON error.
func TestRouterErrorsAreSPECErrors(t *testing.T) {
	ts := newTestServer(t)
	check := func(name string, rec *httptest.ResponseRecorder, status int, code string) {
		t.Helper()
		var body struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != status || body.Error.Code != code || body.Error.Message == "" {
			t.Errorf("%s: %d %q, want %d with code %q", name, rec.Code, rec.Body.String(), status, code)
		}
		if strings.Contains(rec.Body.String(), "boom") {
			t.Errorf("%s: the panic's text reached the client", name)
		}
	}
	serve := func(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	check("unknown route", serve(ts.app, httptest.NewRequest("GET", "/nothing", nil)), 404, "not_found")
	rec := serve(ts.app, httptest.NewRequest("PATCH", "/healthz", nil))
	check("wrong method", rec, 405, "method_not_allowed")
	if rec.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("405 Allow %q", rec.Header().Get("Allow"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec = serve(http.HandlerFunc(ts.app.handleHealth), httptest.NewRequest("GET", "/healthz", nil).WithContext(ctx))
	check("health failure", rec, 503, "unavailable")
	if rec.Header().Get("Retry-After") == "" {
		t.Error("health's 503 has no Retry-After, unlike every other 503")
	}
	boom := ts.app.recoverer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	check("panic", serve(boom, httptest.NewRequest("GET", "/api/v1/me", nil)), 500, "internal")
}

// TestClientLeavingIsNotAnError: a client that gives up while its request
// waits (here for a password-hashing slot) is not logged as an internal
// error: nobody reads that answer, and nothing on the server went wrong.
func TestClientLeavingIsNotAnError(t *testing.T) {
	ts := newTestServer(t)
	ts.signup(t, "ann")
	var logged syncBuffer
	ts.app.log = slog.New(slog.NewTextHandler(&logged, nil))
	for range cap(ts.app.hasher.slots) {
		ts.app.hasher.slots <- struct{}{}
	}
	defer func() {
		for range cap(ts.app.hasher.slots) {
			<-ts.app.hasher.slots
		}
	}()
	c := &http.Client{Timeout: 200 * time.Millisecond}
	_, err := c.Post(ts.URL+"/api/v1/sessions", "application/json", strings.NewReader(`{"handle":"ann","password":"password-ann"}`))
	if err == nil {
		t.Fatal("the sign-in was answered while every hashing slot was held")
	}
	time.Sleep(300 * time.Millisecond) // the server notices the client left
	if strings.Contains(logged.String(), "internal error") {
		t.Fatalf("a client that left was logged as an internal error:\n%s", logged.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FuzzJSONString: a jsonString decodes every JSON value exactly as a plain
// string does, except null, which it refuses.
func FuzzJSONString(f *testing.F) {
	for _, seed := range []string{`"abc"`, `""`, `null`, ` null `, `"\u00e9\ud83d\ude00"`, `"a\"b\\c\/"`, "\"\xff\xfe\"", `42`, `{}`, `[]`, `true`, `"x`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var plain string
		errPlain := json.Unmarshal(b, &plain)
		var s jsonString
		errS := json.Unmarshal(b, &s)
		if string(bytes.TrimSpace(b)) == "null" {
			if errS == nil {
				t.Fatalf("%q: null taken", b)
			}
			return
		}
		if (errPlain == nil) != (errS == nil) || string(s) != plain {
			t.Fatalf("%q: string %q %v, jsonString %q %v", b, plain, errPlain, s, errS)
		}
	})
}
