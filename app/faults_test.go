package app

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah/internal/testutil"
)

// TestUnreadableFileHarmsOnlyItsOwner: with one person's file emptied,
// truncated or overwritten, their connections' feeds go on without them
// (paging still true for everyone else), the owner gets 503
// storage_unavailable on their reads and writes, health, metrics and the
// console say which file needs attention, and putting the good file back
// heals everything without a restart.
func TestUnreadableFileHarmsOnlyItsOwner(t *testing.T) {
	// One open file: whoever was used last is open, everyone else closed,
	// so ann's file can be damaged on disk with no handle on it.
	ts := newTestServer(t, func(c *serverConfig) { c.MaxOpenFiles = 1 })
	ann, bob, cat := ts.signup(t, "ann"), ts.signup(t, "bob"), ts.signup(t, "cat")
	ts.connect(t, ann, bob)
	ts.connect(t, bob, cat)
	ts.connect(t, ann, cat)
	c := signedInAdmin(t, ts)
	var others []string // bob's and cat's moments, newest first
	for i := range 3 {
		ts.post(t, ann, []byte("ann "+string(rune('a'+i))))
		others = append([]string{ts.post(t, bob, []byte("bob"))}, others...)
		ts.clock.Advance(time.Millisecond)
		others = append([]string{ts.post(t, cat, []byte("cat"))}, others...)
		ts.clock.Advance(time.Millisecond)
	}
	path := filepath.Join(ts.dir, "people", ann.id, "person.db")

	for _, damage := range []struct {
		name string
		bad  func(good []byte) []byte
	}{
		{"emptied", func([]byte) []byte { return nil }},
		{"truncated", func(good []byte) []byte { return good[:4096+100] }},
		{"garbage", func(good []byte) []byte { b := make([]byte, len(good)); rand.Read(b); return b }},
	} {
		t.Run(damage.name, func(t *testing.T) {
			// cat's post opens cat's file, which closes ann's (the bound is 1).
			others = append([]string{ts.post(t, cat, []byte("cat before "+damage.name))}, others...)
			// ann's close keeps her small WAL: emptied into the file, the
			// file alone is the good copy an operator puts back.
			ts.store.WaitClosed()
			testutil.Checkpoint(t, path)
			good, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, damage.bad(good), 0o600); err != nil {
				t.Fatal(err)
			}
			ts.clock.Advance(31 * time.Second) // past StaleAfter: cached heads are checked against the file

			for _, limit := range []int{1, 2, 30} {
				var got []string
				for _, m := range ts.readAll(t, bob.token, "/api/v1/feed", limit) {
					if m.Author == ann.id {
						t.Fatalf("limit %d: bob's feed holds ann's moment %s from a file that cannot be read", limit, m.ID)
					}
					got = append(got, m.ID)
				}
				if !slices.Equal(got, others) {
					t.Fatalf("limit %d: bob's feed without ann is %v, want every moment of bob and cat %v", limit, got, others)
				}
			}
			if got := ts.readAll(t, cat.token, "/api/v1/feed", 30); len(got) != len(others) {
				t.Fatalf("cat's feed holds %d moments, want %d", len(got), len(others))
			}

			owner := []struct{ name, method, path, token string }{
				{"ann's feed", "GET", "/api/v1/feed", ann.token},
				{"ann's own moments", "GET", "/api/v1/people/" + ann.id + "/moments", ann.token},
				{"ann's moments read by bob", "GET", "/api/v1/people/" + ann.id + "/moments", bob.token},
				{"ann posts", "POST", "/api/v1/moments", ann.token},
			}
			for _, o := range owner {
				var body any
				if o.method == "POST" {
					body = map[string]string{"body": "aGk="}
				}
				r := ts.do(t, o.method, o.path, o.token, body)
				if r.status != 503 || r.errCode() != "storage_unavailable" || r.header.Get("Retry-After") == "" {
					t.Errorf("%s: %d %s (Retry-After %q), want 503 storage_unavailable with Retry-After", o.name, r.status, r.raw, r.header.Get("Retry-After"))
				}
			}

			h := ts.do(t, "GET", "/healthz", "", nil)
			if h.status != 200 || h.str("status") != "degraded" || h.json["files_need_attention"] != float64(1) {
				t.Errorf("health with one unreadable file: %d %s", h.status, h.raw)
			}
			if m := metricsText(ts); !strings.Contains(m, "\nnah_person_files_unreadable 1\n") {
				t.Errorf("metrics do not count the unreadable file:\n%s", m)
			}
			if p := get(t, c, ts.URL+"/console"); p.status != 200 || !strings.Contains(p.body, "Needs attention") || !strings.Contains(p.body, "/console/people/"+ann.id) {
				t.Errorf("overview: %d, does not list ann's file as needing attention", p.status)
			}
			if p := get(t, c, ts.URL+"/console/people/"+ann.id); p.status != 200 || !strings.Contains(p.body, "Needs attention") {
				t.Errorf("ann's console page: %d, does not say her file needs attention", p.status)
			}
			if p := get(t, c, ts.URL+"/console/people/"+bob.id); p.status != 200 || strings.Contains(p.body, "Needs attention") {
				t.Errorf("bob's console page: %d, or it says his file needs attention", p.status)
			}

			// The operator puts the good file back: no restart needed.
			if err := os.WriteFile(path, good, 0o600); err != nil {
				t.Fatal(err)
			}
			id := ts.post(t, ann, []byte("ann is back"))
			feed := ts.readAll(t, bob.token, "/api/v1/feed", 30)
			if len(feed) == 0 || feed[0].ID != id || len(feed) != len(others)+4+slices.Index([]string{"emptied", "truncated", "garbage"}, damage.name) {
				t.Fatalf("bob's feed after the repair: %d moments, newest %+v", len(feed), feed[:min(1, len(feed))])
			}
			if r := ts.do(t, "GET", "/api/v1/feed", ann.token, nil); r.status != 200 {
				t.Fatalf("ann's feed after the repair: %d %s", r.status, r.raw)
			}
			h = ts.do(t, "GET", "/healthz", "", nil)
			if h.status != 200 || h.str("status") != "ok" || h.json["files_need_attention"] != float64(0) {
				t.Errorf("health after the repair: %d %s", h.status, h.raw)
			}
			if p := get(t, c, ts.URL+"/console/people/"+ann.id); strings.Contains(p.body, "Needs attention") {
				t.Errorf("ann's console page still says her file needs attention")
			}
		})
	}
}

// metricsText is what a Prometheus scrape reads.
func metricsText(ts *testServer) string {
	var b strings.Builder
	ts.app.writePrometheus(&b)
	return b.String()
}

// TestShuttingDownAnswersRetryAfter: a request that reaches a person's file
// after the store has closed is 503 shutting_down with Retry-After, as one
// still in flight when shutdown ran out of time would be.
func TestShuttingDownAnswersRetryAfter(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	// Once used, ann's token is in the store's session cache, so that the
	// post gets past sign-in without the directory and on to her file.
	if r := ts.do(t, "GET", "/api/v1/me", ann.token, nil); r.status != 200 {
		t.Fatalf("me: %d %s", r.status, r.raw)
	}
	if err := ts.store.Close(); err != nil {
		t.Fatal(err)
	}
	r := ts.do(t, "POST", "/api/v1/moments", ann.token, map[string]string{"body": "aGk="})
	if r.status != 503 || r.errCode() != "shutting_down" || r.header.Get("Retry-After") != "5" {
		t.Fatalf("a post to a closed store: %d Retry-After %q: %s", r.status, r.header.Get("Retry-After"), r.raw)
	}
}
