package app

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/internal/testutil"
	"github.com/nah-app/nah/store"
)

type testServer struct {
	*httptest.Server
	app   *App
	store *store.Store
	clock *testutil.Clock
	dir   string
}

// serverConfig is what a test may change of its server: the app's Config,
// and the store's knobs that tests turn.
type serverConfig struct {
	Config
	// MaxOpenFiles and HeadCacheBytes go to store.Config.
	MaxOpenFiles   int
	HeadCacheBytes int64
	DeleteGrace    time.Duration
	// Dir is the data directory; default a fresh t.TempDir(). A test of a
	// full disk puts it on a small tmpfs.
	Dir string
	// Replicator and MaxWatched go to store.Config (newReplicatedServer).
	Replicator store.Replicator
	MaxWatched int
}

// newTestServer runs the real router, configured as in production, on real
// SQLite files in a temporary directory, over real HTTP.
func newTestServer(t *testing.T, edit ...func(*serverConfig)) *testServer {
	t.Helper()
	clock := testutil.NewClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	cfg := serverConfig{
		Config: Config{
			OpenSignup:     true,
			SignupPerHour:  0,
			MaxMomentBytes: nah.DefaultMaxMomentBytes,
			PasswordCost:   4, // bcrypt.MinCost: tests measure behaviour, not hashing
			Now:            clock.Now,
		},
		MaxOpenFiles: 64,
	}
	for _, e := range edit {
		e(&cfg)
	}
	dir := cfg.Dir
	if dir == "" {
		dir = t.TempDir()
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	s, err := store.Open(context.Background(), store.Config{Dir: dir, MaxOpenFiles: cfg.MaxOpenFiles, HeadCacheBytes: cfg.HeadCacheBytes, DeleteGrace: cfg.DeleteGrace, Now: clock.Now, Logger: log, Replicator: cfg.Replicator, MaxWatched: cfg.MaxWatched})
	if err != nil {
		t.Fatal(err)
	}
	// What cmd/nah would hand the console for the same server.
	cfg.Settings = []Setting{
		{"NAH_DATA_DIR", dir, "newTestServer"},
		{"NAH_OPEN_SIGNUP", strconv.FormatBool(cfg.OpenSignup), "newTestServer"},
		{"NAH_MAX_OPEN_FILES", strconv.Itoa(cfg.MaxOpenFiles), "newTestServer"},
		{"NAH_SIGNUP_PER_HOUR", strconv.Itoa(cfg.SignupPerHour), "newTestServer"},
		{"NAH_MAX_MOMENT_BYTES", strconv.Itoa(cfg.MaxMomentBytes), "newTestServer"},
	}
	// As cmd/nah does without NAH_PUBLIC_URL: links start with the listen
	// address.
	ts := httptest.NewUnstartedServer(nil)
	if cfg.PublicURL == "" {
		cfg.PublicURL = "http://" + ts.Listener.Addr().String()
	}
	a := New(cfg.Config, s, log)
	ts.Config = NewServer("", a, log)
	ts.Listener = a.LimitConnections(ts.Config, ts.Listener, DefaultMaxConnections)
	ts.Start()
	t.Cleanup(func() {
		ts.Close()
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return &testServer{Server: ts, app: a, store: s, clock: clock, dir: dir}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// response is a decoded answer.
type response struct {
	status int
	header http.Header
	raw    []byte
	json   map[string]any
}

// errCode returns the SPEC error code of the answer, or "".
func (r response) errCode() string {
	e, _ := r.json["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (r response) str(key string) string {
	s, _ := r.json[key].(string)
	return s
}

// do sends one request and checks it and its answer against openapi.json
// (checkContract). body is sent as is when it is a string or []byte, and
// as JSON otherwise.
func (ts *testServer) do(t *testing.T, method, path, token string, body any) response {
	t.Helper()
	var sent []byte
	switch b := body.(type) {
	case nil:
	case string:
		sent = []byte(b)
	case []byte:
		sent = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		sent = j
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(sent)
	}
	req, err := http.NewRequest(method, ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	checkContract(t, exchange{method, ts.URL + path, req.Header, sent, res, raw})
	out := response{status: res.StatusCode, header: res.Header, raw: raw}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out.json); err != nil {
			t.Fatalf("%s %s: %d, body is not JSON: %q", method, path, res.StatusCode, raw)
		}
		if res.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: Content-Type %q", method, path, res.Header.Get("Content-Type"))
		}
	}
	if res.StatusCode >= 400 && out.errCode() == "" {
		t.Errorf("%s %s: %d without an error code: %s", method, path, res.StatusCode, raw)
	}
	// Never a bare 500: 503 (overloaded, a file that cannot be read) and
	// 507 (a full disk) are the SPEC's own answers.
	if res.StatusCode >= 500 && res.StatusCode != 503 && res.StatusCode != 507 {
		t.Errorf("%s %s: %d: %s", method, path, res.StatusCode, raw)
	}
	return out
}

type account struct {
	id, handle, token string
}

// signup makes an account through the API.
func (ts *testServer) signup(t *testing.T, handle string) account {
	t.Helper()
	r := ts.do(t, "POST", "/api/v1/accounts", "", map[string]string{"handle": handle, "password": "password-" + handle})
	if r.status != 201 {
		t.Fatalf("signup %s: %d %s", handle, r.status, r.raw)
	}
	p := r.json["person"].(map[string]any)
	return account{id: p["id"].(string), handle: handle, token: r.str("token")}
}

// connect connects a and b through an invite.
func (ts *testServer) connect(t *testing.T, a, b account) {
	t.Helper()
	inv := ts.do(t, "POST", "/api/v1/invites", a.token, nil)
	if inv.status != 201 {
		t.Fatalf("invite: %d %s", inv.status, inv.raw)
	}
	r := ts.do(t, "POST", "/api/v1/connections", b.token, map[string]string{"code": inv.str("code")})
	if r.status != 201 {
		t.Fatalf("connect: %d %s", r.status, r.raw)
	}
}

// post posts body and returns the moment id.
func (ts *testServer) post(t *testing.T, a account, body []byte) string {
	t.Helper()
	r := ts.do(t, "POST", "/api/v1/moments", a.token, map[string]string{"body": base64.StdEncoding.EncodeToString(body)})
	if r.status != 201 {
		t.Fatalf("post: %d %s", r.status, r.raw)
	}
	return r.str("id")
}

type pageItem struct {
	ID, Author, CreatedAt, Body string
}

// readAll follows a list's cursors to the end with pages of limit, checking
// the paging rules on the way.
func (ts *testServer) readAll(t *testing.T, token, path string, limit int) []pageItem {
	t.Helper()
	var all []pageItem
	next := ""
	for pages := 0; ; pages++ {
		if pages > 10_000 {
			t.Fatal("paging does not end")
		}
		u := fmt.Sprintf("%s?limit=%d", path, limit)
		if next != "" {
			u += "&before=" + next
		}
		req, _ := http.NewRequest("GET", ts.URL+u, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Moments []struct {
				ID        string `json:"id"`
				Author    string `json:"author"`
				CreatedAt string `json:"created_at"`
				Body      string `json:"body"`
			} `json:"moments"`
			Next *string `json:"next"`
		}
		raw, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err == nil {
			checkContract(t, exchange{"GET", ts.URL + u, req.Header, nil, res, raw})
			err = json.Unmarshal(raw, &page)
		}
		if res.StatusCode != 200 || err != nil {
			t.Fatalf("GET %s: %d %v", u, res.StatusCode, err)
		}
		if page.Moments == nil {
			t.Fatalf("GET %s: moments is not an array", u)
		}
		if next != "" && len(page.Moments) == 0 {
			t.Fatalf("GET %s: the page after a cursor is empty, so the page before should have had next null", u)
		}
		for _, m := range page.Moments {
			all = append(all, pageItem{m.ID, m.Author, m.CreatedAt, m.Body})
		}
		if page.Next == nil {
			return all
		}
		if len(page.Moments) != limit {
			t.Fatalf("GET %s: a page that is not the last holds %d items, want %d", u, len(page.Moments), limit)
		}
		next = *page.Next
	}
}

func mustPrefixes(s ...string) []netip.Prefix {
	var ps []netip.Prefix
	for _, x := range s {
		ps = append(ps, netip.MustParsePrefix(x))
	}
	return ps
}
