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

// attempt is one event taken from a limiter. Its zero value (from a nil
// or unlimited limiter) gives nothing back.
type attempt struct {
	l      *limiter
	key    string
	window time.Time // start of the window that counted it
}

// take counts one event for key before the work it guards, or refuses with
// a RateLimited error when key has used its events. Checking and counting
// in one step under one lock is what makes the limit hold under
// concurrency: with a check before a password hash and a count after it,
// 50 wrong passwords sent at once were all let through (issue 8).
func (l *limiter) take(key string) (attempt, error) {
	if l == nil || l.max <= 0 {
		return attempt{}, nil
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
	if w.n >= l.max {
		e := nah.Errorf(nah.RateLimited, "rate_limited", "too many attempts; try again later")
		e.RetryAfter = w.start.Add(l.window).Sub(now)
		return attempt{}, e
	}
	w.n++
	return attempt{l: l, key: key, window: w.start}, nil
}

// giveBack returns an event that turned out not to count (a right
// password: signing in successfully must not lock anyone out). It is
// returned only to the window that counted it.
func (at attempt) giveBack() {
	if at.l == nil {
		return
	}
	at.l.mu.Lock()
	defer at.l.mu.Unlock()
	if w := at.l.windows[at.key]; w != nil && w.start.Equal(at.window) && w.n > 0 {
		w.n--
	}
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
