package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// stalledExport asks for token's export over a connection with a tiny
// receive buffer and never reads it: the server's writes block, as they
// would for a client that wants to hold its slot.
func stalledExport(t *testing.T, ts *testServer, token string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	conn, err := d.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET /api/v1/me/export HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", token)
	return conn
}

// TestExportSlotsPerPerson: one account cannot hold every export slot, nor
// the full backup's, and a client that stops reading loses its slot within
// the transfer's grace. ann (13 MB of moments, more than the sockets
// buffer) starts an export she never reads, then, a minute later each time
// (her limit), three more; bob's export and the admin's full backup must
// still be served, and ann's slot must come free within a few seconds of
// the 3 s grace, not after a flat 10 minutes.
func TestExportSlotsPerPerson(t *testing.T) {
	const grace = 3 * time.Second
	ts := newTestServer(t, func(c *serverConfig) { c.Transfer = Transfer{Grace: grace, MinRate: 16 << 10} })
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	ms := make([]nah.Moment, 200)
	for i := range ms {
		at := int64(1_700_000_000_000 + i*1000)
		ms[i] = nah.Moment{ID: nah.NewMomentID(at), Author: ann.id, CreatedAt: at, Body: bytes.Repeat([]byte{byte(i)}, 64<<10)}
	}
	if err := ts.store.ImportMoments(context.Background(), ann.id, ms); err != nil {
		t.Fatal(err)
	}
	ts.post(t, bob, []byte("hello"))
	admin := signedInAdmin(t, ts)

	start := time.Now()
	stalledExport(t, ts, ann.token)
	time.Sleep(500 * time.Millisecond) // her export is copied and blocks
	for range 3 {
		ts.clock.Advance(exportWindow + time.Second)
		stalledExport(t, ts, ann.token)
		time.Sleep(300 * time.Millisecond) // served before the clock moves on
	}
	ts.clock.Advance(exportWindow + time.Second)
	if r := ts.do(t, "GET", "/api/v1/me/export", ann.token, nil); r.status != 429 || r.errCode() != "export_in_flight" {
		t.Errorf("ann's export while hers are in flight: %d %s, want 429 export_in_flight", r.status, r.errCode())
	}
	res, err := ts.Client().Do(exportRequest(t, ts, "GET", bob.token))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || n == 0 {
		t.Errorf("bob's export while ann stalls hers: %d, %d bytes", res.StatusCode, n)
	}
	if p := get(t, admin, ts.URL+"/console/backups/download"); p.status != 200 || len(p.body) < 10<<10 {
		t.Errorf("the admin's full backup while ann stalls her exports: %d, %d bytes", p.status, len(p.body))
	}

	// ann's stalled export is cut off: she can export again.
	var freed time.Duration
	for time.Since(start) < 30*time.Second {
		ts.clock.Advance(exportWindow + time.Second)
		res, err := ts.Client().Do(exportRequest(t, ts, "GET", ann.token))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode == 200 {
			freed = time.Since(start)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("a stalled export of ann's held her slot for %v (grace %v)", freed.Round(100*time.Millisecond), grace)
	if freed == 0 || freed > grace+10*time.Second {
		t.Errorf("ann's stalled export still held its slot after %v (grace %v)", time.Since(start).Round(time.Second), grace)
	}
}

// TestExportsFollowTheBudget: exports in flight are bounded by the memory
// budget, not by a count of slots. Eight people whose exports stall (four
// held every slot there was) leave room for bob's export and the admin's
// full backup; once the exports' quarter of a smaller budget is held (3
// exports of 448 KiB in 6 MiB), the next person's export is 503 while the
// full backup and a feed are still served.
func TestExportsFollowTheBudget(t *testing.T) {
	for _, tc := range []struct {
		budget  int64
		stalled int
		bob     int
	}{
		{DefaultMemoryBudget, 8, 200},
		{6 << 20, 3, 503},
	} {
		ts := newTestServer(t, func(c *serverConfig) {
			c.MemoryBudget = tc.budget
			c.Transfer = Transfer{Grace: time.Minute, MinRate: 16 << 10} // the stalled hold theirs
		})
		for i := range tc.stalled {
			p := ts.signup(t, fmt.Sprintf("person%d", i))
			ms := make([]nah.Moment, 8) // 512 KiB, more than the sockets take
			for j := range ms {
				at := int64(1_700_000_000_000 + j*1000)
				ms[j] = nah.Moment{ID: nah.NewMomentID(at), Author: p.id, CreatedAt: at, Body: bytes.Repeat([]byte{byte(j)}, 64<<10)}
			}
			if err := ts.store.ImportMoments(context.Background(), p.id, ms); err != nil {
				t.Fatal(err)
			}
			stalledExport(t, ts, p.token)
		}
		want := int64(tc.stalled * (exportCost + exportSQLite))
		for start := time.Now(); ts.app.exportsHeld.Load() != want; time.Sleep(20 * time.Millisecond) {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("budget %d: the stalled exports hold %d bytes, want %d", tc.budget, ts.app.exportsHeld.Load(), want)
			}
		}
		bob := ts.signup(t, "bob")
		ts.post(t, bob, []byte("hello"))
		admin := signedInAdmin(t, ts)
		res, err := ts.Client().Do(exportRequest(t, ts, "GET", bob.token))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != tc.bob {
			t.Errorf("budget %d, %d exports stalled: bob's export %d, want %d", tc.budget, tc.stalled, res.StatusCode, tc.bob)
		}
		if p := get(t, admin, ts.URL+"/console/backups/download"); p.status != 200 || len(p.body) < 4<<10 {
			t.Errorf("budget %d, %d exports stalled: the full backup %d, %d bytes", tc.budget, tc.stalled, p.status, len(p.body))
		}
		if r := ts.do(t, "GET", "/api/v1/feed", bob.token, nil); r.status != 200 {
			t.Errorf("budget %d, %d exports stalled: bob's feed %d", tc.budget, tc.stalled, r.status)
		}
	}
}
