package app

import (
	"cmp"
	"container/list"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nah-app/nah"
)

// Open connections are bounded: an idle one holds 22-26 KB, 23 MB in all under
// churn at the default 512 (cmd/nah's VmRSS; bench/THRESHOLDS.md "Connections").
// At the bound the idlest is closed for the new one; with none idle, net/http
// reads its request and answers 503 from an overflow of bound/16; past it, a close.
const (
	// ConnectionBytes is what one open connection costs the memory plan
	// (cmd/nah): 45 KB, the churn figure above (23 MB at a bound of 512).
	// TLS changes nothing: measured the same way with NAH_TLS_CERT, an idle
	// TLS connection holds 35 KB (the handshake's state and record buffers
	// add 12 KB to plain HTTP's 23 KB), and churn at a bound of 1,024 costs
	// the same 44 MB over TLS as without.
	ConnectionBytes = 45 << 10
	// DefaultMaxConnections bounds the connections of the API and console
	// listener when cmd/nah's NAH_MAX_CONNECTIONS is unset.
	DefaultMaxConnections = 512
	// MetricsMaxConnections bounds the metrics listener: a scraper or two
	// and an operator's curl.
	MetricsMaxConnections = 8
	// connRetryAfter is the Retry-After of an answer from the overflow:
	// requests last milliseconds, and idle connections make room at once.
	connRetryAfter = time.Second
	// connWarnEvery spaces the warnings that the bound sheds connections.
	connWarnEvery = time.Minute
)

// connLimiter bounds one server's open connections (see above).
type connLimiter struct {
	max, overflow int
	log           *slog.Logger

	mu     sync.Mutex
	served int       // open connections counted against max
	shed   int       // open connections in the overflow
	idle   list.List // of *limitedConn, idle longest first

	evicted, shedTotal, refused atomic.Int64
	lastWarn                    atomic.Int64  // unix ns
	headerTimeout               time.Duration // the server's ReadHeaderTimeout
}

// limitedConn is a connection the limiter admitted.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	shed bool // answered 503 and closed

	// Guarded by l.mu.
	released bool          // no longer counted: closed, or its slot given away
	idleAt   *list.Element // in l.idle while idle

	listed atomic.Bool // idleAt != nil, readable without the lock
}

// Read takes an idle connection off the idle list as soon as its next
// request starts to arrive: net/http marks a connection active only once it
// has read the whole header, and closing it in between would lose a request
// that clients do not retry (a POST is not idempotent).
func (c *limitedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.listed.Load() {
		c.l.mu.Lock()
		c.unlistLocked()
		c.l.mu.Unlock()
		// net/http waits for the rest of the request's first line under the
		// idle timeout (30 s), not the header timeout: without this, a byte
		// after each answer would hold an unevictable slot six times as long
		// as a silent new connection does. net/http sets its own deadline
		// again once the line has begun.
		c.Conn.SetReadDeadline(time.Now().Add(c.l.headerTimeout))
	}
	return n, err
}

// unlistLocked takes c off the idle list; call with l.mu held.
func (c *limitedConn) unlistLocked() {
	if c.idleAt != nil {
		c.l.idle.Remove(c.idleAt)
		c.idleAt = nil
	}
	c.listed.Store(false)
}

// shedKey marks the context of a connection from the overflow.
type shedKey struct{}

// connKey holds a request's *limitedConn in its context, for the
// downloads that set an option of its socket (limitUnsent).
type connKey struct{}

// LimitConnections makes srv serve at most max connections at once from ln
// (idle ones make room; see above), and returns the listener to pass to
// srv.Serve. It takes srv's ConnState and ConnContext hooks and wraps its
// handler; call it once, after NewServer and before Serve.
func (a *App) LimitConnections(srv *http.Server, ln net.Listener, max int) net.Listener {
	l := &connLimiter{max: max, overflow: (max + 15) / 16, log: a.log, headerTimeout: cmp.Or(srv.ReadHeaderTimeout, readHeaderTimeout)}
	state, connCtx, next := srv.ConnState, srv.ConnContext, srv.Handler
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		l.connState(c, s)
		if state != nil {
			state(c, s)
		}
	}
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if connCtx != nil {
			ctx = connCtx(ctx, c)
		}
		if lc, ok := asLimited(c); ok {
			ctx = context.WithValue(ctx, connKey{}, lc)
			if lc.shed {
				ctx = context.WithValue(ctx, shedKey{}, true)
			}
		}
		return ctx
	}
	busy := secureHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		e := nah.Errorf(nah.Unavailable, "", "the server has as many connections as it takes; try again in a moment")
		e.RetryAfter = connRetryAfter
		a.writeError(w, r, e)
	}))
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(shedKey{}) != nil {
			busy.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
	return &limitListener{Listener: ln, l: l}
}

type limitListener struct {
	net.Listener
	l *connLimiter
}

// Accept returns the next connection that the limiter admits, closing at
// once those it cannot.
func (ln *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := ln.l.admit(c); lc != nil {
			return lc, nil
		}
		c.Close()
	}
}

// admit counts c in, closing the connection idle longest to make room if
// it must; it returns nil when c is to be closed at once.
func (l *connLimiter) admit(c net.Conn) *limitedConn {
	lc := &limitedConn{Conn: c, l: l}
	var victim *limitedConn
	l.mu.Lock()
	switch {
	case l.served < l.max:
		l.served++
	case l.idle.Len() > 0:
		// The victim's slot passes to c: it stops counting now, before
		// its goroutine has noticed the close.
		victim = l.idle.Front().Value.(*limitedConn)
		victim.unlistLocked()
		victim.released = true
	case l.shed < l.overflow:
		l.shed++
		lc.shed = true
	default:
		lc = nil
	}
	l.mu.Unlock()
	switch {
	case victim != nil:
		l.evicted.Add(1)
		victim.Conn.Close()
	case lc == nil:
		l.refused.Add(1)
		l.warn()
	case lc.shed:
		l.shedTotal.Add(1)
		l.warn()
	}
	return lc
}

// warn logs, at most once per connWarnEvery, that connections are shed.
func (l *connLimiter) warn() {
	now := time.Now().UnixNano()
	last := l.lastWarn.Load()
	if now-last < int64(connWarnEvery) || !l.lastWarn.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn("open connections at their bound, none idle: new ones are answered 503 or closed",
		"max", l.max, "answered_503", l.shedTotal.Load(), "closed", l.refused.Load())
}

// asLimited is the limitedConn under c, which an HTTPS listener wraps in
// a *tls.Conn (tls.NewListener over the limiter's listener): TLS
// connections are bounded alike, and their handshake happens inside the
// slot, bounded by the server's timeouts.
func asLimited(c net.Conn) (*limitedConn, bool) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	lc, ok := c.(*limitedConn)
	return lc, ok
}

// connState keeps the list of idle connections.
func (l *connLimiter) connState(c net.Conn, s http.ConnState) {
	lc, ok := asLimited(c)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateIdle:
		if !lc.released && !lc.shed && lc.idleAt == nil {
			lc.idleAt = l.idle.PushBack(lc)
			lc.listed.Store(true)
		}
	default: // active, closed or hijacked: not idle
		lc.unlistLocked()
	}
}

// Close closes the connection and gives its slot back.
func (c *limitedConn) Close() error {
	l := c.l
	l.mu.Lock()
	if !c.released {
		c.released = true
		c.unlistLocked()
		if c.shed {
			l.shed--
		} else {
			l.served--
		}
	}
	l.mu.Unlock()
	return c.Conn.Close()
}

// CloseWrite passes through to the TCP connection: net/http half-closes
// before it closes a connection whose request it did not read to the end
// (after a 413), so that the client reads the answer instead of a reset.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// open returns the connections counted now: served and in the overflow.
func (l *connLimiter) open() (served, shed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.served, l.shed
}
