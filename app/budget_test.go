package app

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah/internal/testutil"
)

// finish reads the whole answer of a testutil.SlowGet and returns its
// status.
func finish(t *testing.T, conn net.Conn) int {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil || res.ContentLength >= 0 && n != res.ContentLength {
		t.Fatalf("read %d of %d bytes: %v", n, res.ContentLength, err)
	}
	return res.StatusCode
}

// TestSlowReadersAreShed: the largest pages (100 moments of 64 KiB, 8.7 MB
// of JSON) to clients that do not read take their bodies from the memory
// budget; once the bulk share is spent, more such requests are answered
// 503 with Retry-After at once, while ordinary feeds and posts go on, and
// everything is given back when the slow clients finish.
func TestSlowReadersAreShed(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.MemoryBudget = 40 << 20 })
	big, small := ts.signup(t, "big"), ts.signup(t, "small")
	body := make([]byte, 64<<10)
	for i := range 100 {
		body[0] = byte(i)
		ts.post(t, big, body)
		ts.clock.Advance(time.Millisecond)
	}
	ts.post(t, small, []byte("an ordinary moment"))
	if used := ts.app.mem.used.Load(); used != 0 {
		t.Fatalf("%d bytes of the budget still taken while idle", used)
	}
	addr := strings.TrimPrefix(ts.URL, "http://")
	path := "/api/v1/feed?limit=100"
	// Each holds its page's bodies read from files: 88 of 64 KiB, charged
	// twice (the buffer they are copied into may double): 11.5 MB. The bulk
	// share is 30 MB, so two fit and the third does not.
	var slow []net.Conn
	for range 2 {
		slow = append(slow, testutil.SlowGet(t, addr, path, big.token))
	}
	deadline := time.Now().Add(10 * time.Second)
	for ts.app.mem.used.Load() < 20<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("the slow readers hold only %d bytes of the budget", ts.app.mem.used.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := ts.do(t, "GET", path, big.token, nil)
	if r.status != 503 || r.errCode() != "overloaded" || r.header.Get("Retry-After") != "1" {
		t.Fatalf("a third big page while two are held: %d %s, Retry-After %q", r.status, r.raw, r.header.Get("Retry-After"))
	}
	if r := ts.do(t, "GET", "/api/v1/feed", small.token, nil); r.status != 200 {
		t.Fatalf("an ordinary feed while the big pages are held: %d", r.status)
	}
	ts.post(t, small, []byte("still posting"))
	for _, s := range slow {
		if st := finish(t, s); st != 200 {
			t.Fatalf("slow reader: %d", st)
		}
	}
	deadline = time.Now().Add(5 * time.Second)
	for ts.app.mem.used.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes of the budget never given back", ts.app.mem.used.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := ts.readAll(t, big.token, "/api/v1/feed", 100); len(got) != 100 {
		t.Fatalf("after the slow readers: %d moments", len(got))
	}
}

// TestBudgetSpentIs503: with the whole budget taken, every request, API and
// console alike, is answered 503 with Retry-After through the one error
// path, and nothing is queued.
func TestBudgetSpentIs503(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.MemoryBudget = 1 << 20 })
	ann := ts.signup(t, "ann")
	if !ts.app.mem.take(1<<20 - requestCost/2) {
		t.Fatal("could not take the budget")
	}
	for _, path := range []string{"/api/v1/feed", "/api/v1/me"} {
		r := ts.do(t, "GET", path, ann.token, nil)
		if r.status != 503 || r.errCode() != "overloaded" || r.header.Get("Retry-After") == "" {
			t.Fatalf("%s: %d %s", path, r.status, r.raw)
		}
	}
	res, err := http.Get(ts.URL + "/console/login")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 503 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") || res.Header.Get("Retry-After") == "" {
		t.Fatalf("console: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	ts.app.mem.give(1<<20 - requestCost/2)
	if r := ts.do(t, "GET", "/api/v1/feed", ann.token, nil); r.status != 200 {
		t.Fatalf("after the budget is back: %d", r.status)
	}
}

// TestTransferAdmission: the full backup's slot taken, a second download
// is 503 at once; with the budget too low for its memory, it is 503 and
// gives the slot back, so the next one is served once the memory is; in
// the end neither the slot nor any of the budget is still held.
func TestTransferAdmission(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.MemoryBudget = 4 << 20 })
	admin := signedInAdmin(t, ts)
	u := ts.URL + "/console/backups/download"
	ts.app.fullBackups <- struct{}{} // a download running
	if p := get(t, admin, u); p.status != 503 || p.header.Get("Retry-After") == "" {
		t.Errorf("a download while one runs: %d, Retry-After %q", p.status, p.header.Get("Retry-After"))
	}
	<-ts.app.fullBackups
	held := ts.app.mem.limit - 512<<10 // room for a request, not for an archive
	if !ts.app.mem.take(held) {
		t.Fatal("could not take the budget")
	}
	if p := get(t, admin, u); p.status != 503 || p.header.Get("Retry-After") == "" {
		t.Errorf("a download without the memory for it: %d, Retry-After %q", p.status, p.header.Get("Retry-After"))
	}
	ts.app.mem.give(held)
	if p := get(t, admin, u); p.status != 200 || len(p.body) == 0 {
		t.Errorf("a download once the memory is back: %d, %d bytes", p.status, len(p.body))
	}
	deadline := time.Now().Add(5 * time.Second)
	for ts.app.mem.used.Load() != 0 || len(ts.app.fullBackups) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the downloads: %d bytes of the budget and %d slot held", ts.app.mem.used.Load(), len(ts.app.fullBackups))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
