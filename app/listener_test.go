package app

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// limitedServer serves h through NewServer and LimitConnections(max) on a
// fresh port; edit may shorten the server's timeouts first.
func limitedServer(t *testing.T, a *App, max int, h http.Handler, edit func(*http.Server)) (string, *connLimiter) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer("", h, slog.New(slog.DiscardHandler))
	if edit != nil {
		edit(srv)
	}
	lim := a.LimitConnections(srv, ln, max)
	go srv.Serve(lim)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), lim.(*limitListener).l
}

// clientConn is one raw keep-alive connection.
type clientConn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *clientConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &clientConn{c, bufio.NewReader(c)}
}

// get sends GET path and reads the answer, keeping the connection.
func (c *clientConn) get(path string) (*http.Response, []byte, error) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		return nil, nil, err
	}
	res, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(res.Body)
	return res, b, err
}

// closedByServer reports whether the server has closed c, waiting up to d.
func (c *clientConn) closedByServer(d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.r.ReadByte()
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5 s for %s", what)
		}
	}
}

// TestConnectionBound: past the bound, the connection idle longest makes
// room, so every new client is served while no more than the bound are
// open; with none idle, a new connection is answered 503 with Retry-After
// from a small overflow, and past that closed at once; once the busy ones
// finish, clients are served again.
func TestConnectionBound(t *testing.T) {
	ts := newTestServer(t)
	const max = 8
	entered, release := make(chan struct{}, max), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			entered <- struct{}{}
			<-release
		}
		w.Write([]byte("ok"))
	})
	addr, lim := limitedServer(t, ts.app, max, h, nil)

	// 1. Three times the bound of idle keep-alive connections: each is
	// served, and only the newest max stay open.
	var idle []*clientConn
	for i := range 3 * max {
		c := dial(t, addr)
		if res, _, err := c.get("/"); err != nil || res.StatusCode != 200 {
			t.Fatalf("idle connection %d: %v %v", i, res, err)
		}
		if served, _ := lim.open(); served > max {
			t.Fatalf("%d connections served, bound %d", served, max)
		}
		idle = append(idle, c)
		// net/http marks the connection idle just after the answer is
		// written; the next one must find it so, or the oldest is not the
		// one that makes room.
		waitFor(t, "the connection to be idle", func() bool {
			lim.mu.Lock()
			defer lim.mu.Unlock()
			return lim.idle.Len() == min(i+1, max)
		})
	}
	for i, c := range idle {
		if closed := c.closedByServer(50 * time.Millisecond); closed != (i < 2*max) {
			t.Errorf("idle connection %d of %d: closed %v", i, len(idle), closed)
		}
	}
	if got := lim.evicted.Load(); got != 2*max {
		t.Errorf("%d idle connections closed to make room, want %d", got, 2*max)
	}

	// 2. max busy connections take every slot from the idle ones.
	for range max {
		c := dial(t, addr)
		fmt.Fprint(c, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
		<-entered
	}
	if served, _ := lim.open(); served != max {
		t.Fatalf("%d connections served, want %d", served, max)
	}

	// 3. None idle: the next one is answered 503 at once, and closed.
	c := dial(t, addr)
	res, body, err := c.get("/")
	if err != nil || res.StatusCode != 503 || res.Header.Get("Retry-After") != "1" || !res.Close ||
		res.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("over the bound: %v %v", res, err)
	}
	var e struct{ Error struct{ Code string } }
	if json.Unmarshal(body, &e) != nil || e.Error.Code != "unavailable" {
		t.Fatalf("over the bound: %s", body)
	}
	if !c.closedByServer(time.Second) {
		t.Fatal("the connection answered 503 stays open")
	}

	// 4. With the overflow taken too (a connection that sends nothing), the
	// next one is closed without an answer.
	silent := dial(t, addr)
	waitFor(t, "the overflow to fill", func() bool { _, shed := lim.open(); return shed == 1 })
	c = dial(t, addr)
	start := time.Now()
	if res, _, err := c.get("/"); err == nil {
		t.Fatalf("past the overflow: answered %d", res.StatusCode)
	}
	if time.Since(start) > time.Second || lim.refused.Load() != 1 {
		t.Fatalf("past the overflow: closed after %v, %d refused", time.Since(start), lim.refused.Load())
	}
	silent.Close()

	// 5. The busy ones finish: a new client is served again.
	close(release)
	waitFor(t, "the busy ones to go idle", func() bool {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		return lim.idle.Len() == max && lim.shed == 0
	})
	if res, _, err := dial(t, addr).get("/"); err != nil || res.StatusCode != 200 {
		t.Fatalf("after the busy ones: %v %v", res, err)
	}
	if served, _ := lim.open(); served > max {
		t.Fatalf("%d connections served, bound %d", served, max)
	}
}

// TestIdleTimeoutFreesConnections: the idle timeout closes keep-alive
// connections that send nothing, and their slots come back.
func TestIdleTimeoutFreesConnections(t *testing.T) {
	if srv := NewServer("", nil, slog.New(slog.DiscardHandler)); srv.IdleTimeout > 30*time.Second {
		t.Fatalf("idle timeout %v: an idle connection is held longer than 30 s", srv.IdleTimeout)
	}
	ts := newTestServer(t)
	addr, lim := limitedServer(t, ts.app, 4, ts.app, func(s *http.Server) {
		s.IdleTimeout = 200 * time.Millisecond // shortened so the test is quick
	})
	var cs []*clientConn
	for range 4 {
		c := dial(t, addr)
		if res, _, err := c.get("/healthz"); err != nil || res.StatusCode != 200 {
			t.Fatalf("healthz: %v %v", res, err)
		}
		cs = append(cs, c)
	}
	for i, c := range cs {
		if !c.closedByServer(2 * time.Second) {
			t.Fatalf("idle connection %d still open after 2 s", i)
		}
	}
	waitFor(t, "the slots to come back", func() bool { served, _ := lim.open(); return served == 0 })
	if lim.evicted.Load() != 0 {
		t.Fatalf("%d closed to make room; the timeout should have closed them", lim.evicted.Load())
	}
}

// TestRequestInFlightIsNotEvicted: a keep-alive connection that has started
// sending its next request is no longer idle, even before net/http has read
// the whole header and marked it active; a new connection at the bound must
// not close it and lose a POST, which clients do not retry.
func TestRequestInFlightIsNotEvicted(t *testing.T) {
	ts := newTestServer(t)
	posted := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			io.Copy(io.Discard, r.Body)
			posted <- struct{}{}
		}
		w.WriteHeader(http.StatusNoContent)
	})
	addr, lim := limitedServer(t, ts.app, 1, h, nil)
	a := dial(t, addr)
	if res, _, err := a.get("/"); err != nil || res.StatusCode != 204 {
		t.Fatalf("first request: %v", err)
	}
	waitFor(t, "a's connection to be idle", func() bool {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		return lim.idle.Len() == 1
	})
	// Half of a POST's header on a, then a new connection, then the rest.
	fmt.Fprintf(a, "POST /moments HTTP/1.1\r\nHost: x\r\n")
	waitFor(t, "a to leave the idle list", func() bool {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		return lim.idle.Len() == 0
	})
	b := dial(t, addr)
	fmt.Fprintf(a, "Content-Length: 2\r\n\r\nhi")
	a.SetReadDeadline(time.Now().Add(5 * time.Second))
	res, err := http.ReadResponse(a.r, nil)
	if err != nil {
		t.Fatalf("the POST in flight was cut off: %v", err)
	}
	res.Body.Close()
	select {
	case <-posted:
	default:
		t.Fatal("the POST never reached the handler")
	}
	// b came from the overflow: answered 503, not served in a's place.
	if res, _, err := b.get("/"); err != nil || res.StatusCode != 503 {
		t.Fatalf("new connection while a is busy: %v %v", res, err)
	}
}

// TestStalledRequestLineIsCutAtHeaderTimeout: a connection that sends a
// byte of its next request and stalls leaves the idle list, so it cannot be
// evicted; it must then be closed at the header timeout, not hold its slot
// for the whole idle timeout.
func TestStalledRequestLineIsCutAtHeaderTimeout(t *testing.T) {
	ts := newTestServer(t)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	addr, _ := limitedServer(t, ts.app, 4, h, func(s *http.Server) {
		s.ReadHeaderTimeout = 200 * time.Millisecond
		s.IdleTimeout = 10 * time.Second
	})
	c := dial(t, addr)
	if res, _, err := c.get("/"); err != nil || res.StatusCode != 204 {
		t.Fatalf("first request: %v", err)
	}
	time.Sleep(50 * time.Millisecond) // idle now
	fmt.Fprint(c, "G")
	start := time.Now()
	if !c.closedByServer(3 * time.Second) {
		t.Fatal("a stalled request line held its connection past the header timeout")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("closed after %v, the header timeout is 200 ms", d)
	}
}
