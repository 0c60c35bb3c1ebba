package app

import (
	"sync"
	"time"

	"github.com/nah-app/nah"
)

// limiter counts events per key in fixed windows: at most max events per key
// per window. It is bounded: past maxKeys keys it first forgets expired
// windows and, if still full, forgets everything (failing open beats letting
// an attacker with many addresses lock out everyone else).
type limiter struct {
	max    int
	window time.Duration
	now    func() time.Time

	mu      sync.Mutex
	windows map[string]*fixedWindow
}

type fixedWindow struct {
	start time.Time
	n     int
}

const maxLimiterKeys = 100_000

func newLimiter(max int, window time.Duration, now func() time.Time) *limiter {
	return &limiter{max: max, window: window, now: now, windows: make(map[string]*fixedWindow)}
}

// check returns a RateLimited error when key has used its events.
func (l *limiter) check(key string) error {
	if l == nil || l.max <= 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.windows[key]
	now := l.now()
	if w == nil || now.Sub(w.start) >= l.window || w.n < l.max {
		return nil
	}
	e := nah.Errorf(nah.RateLimited, "rate_limited", "too many attempts; try again later")
	e.RetryAfter = w.start.Add(l.window).Sub(now)
	return e
}

// hit counts one event for key.
func (l *limiter) hit(key string) {
	if l == nil || l.max <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	w := l.windows[key]
	if w == nil || now.Sub(w.start) >= l.window {
		if w == nil && len(l.windows) >= maxLimiterKeys {
			l.sweepLocked(now)
		}
		w = &fixedWindow{start: now}
		l.windows[key] = w
	}
	w.n++
}

func (l *limiter) sweepLocked(now time.Time) {
	for k, w := range l.windows {
		if now.Sub(w.start) >= l.window {
			delete(l.windows, k)
		}
	}
	if len(l.windows) >= maxLimiterKeys {
		clear(l.windows)
	}
}
