package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// vmRSS returns the resident memory of process pid in KB.
func vmRSS(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmRSS in /proc/%d/status", pid)
	}
	kb, _ := strconv.Atoi(string(m[1]))
	return kb
}

// TestIdleConnectionsBounded: 2,000 keep-alive connections, each idle after
// one request, against a server bound to 200: every one is answered (the
// idle longest make room), at most 200 stay open, resident memory grows by
// less than half of what 2,000 held before the bound (45-50 MB), and a new
// client is served at once.
func TestIdleConnectionsBounded(t *testing.T) {
	const n, bound = 2000, 200
	p := start(t, t.TempDir(), "NAH_MAX_CONNECTIONS="+strconv.Itoa(bound))
	time.Sleep(500 * time.Millisecond) // let start-up settle
	before := vmRSS(t, p.cmd.Process.Pid)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("connection %d: %v %v", i, res, err)
		}
		res.Body.Close()
		c.SetDeadline(time.Time{})
	}
	time.Sleep(time.Second)
	after := vmRSS(t, p.cmd.Process.Pid)
	// An evicted connection's descriptor closes once its server goroutine
	// wakes from its read; on a loaded machine that can take past the
	// second above, so count again for a few seconds before judging.
	open := 0
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		open = 0
		for _, c := range conns {
			c.SetReadDeadline(time.Now().Add(time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					open++
				}
			}
		}
		if open <= bound || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("%d connections made, %d open; VmRSS %d -> %d KB (+%.1f MB)", n, open, before, after, float64(after-before)/1024)
	if open > bound {
		t.Errorf("%d connections open, bound %d", open, bound)
	}
	if grew := after - before; grew > 24<<10 {
		t.Errorf("resident memory grew by %d KB with %d connections open", grew, open)
	}
	start := time.Now()
	if st, _, err := p.call("GET", "/healthz", "", nil); err != nil || st != 200 || time.Since(start) > time.Second {
		t.Fatalf("a new client: %d %v after %v", st, err, time.Since(start))
	}
}
