package app

import (
	"sync"
	"time"

	"github.com/nah-app/nah"
)

// limiter counts events per key in fixed windows: at most max events per key
// per window. Its keys are never raw client input (see clientAddr and
// takeSignin), and there are at most maxLimiterKeys of them; how it makes
// room without forgetting a lockout is makeRoomLocked's comment.
type limiter struct {
	max    int
	window time.Duration
	now    func() time.Time

	mu      sync.Mutex
	windows map[string]fixedWindow
	// fullUntil is set when every key was found locked out: until then a
	// new key is refused at once instead of sweeping the map again.
	fullUntil time.Time
}

// fixedWindow is a value, not a pointer: 16 bytes beside its key, no
// allocation of its own.
type fixedWindow struct {
	start int64 // unix nanoseconds
	n     int32
}

// maxLimiterKeys bounds each limiter's map. Measured with keys of IPv6 /64
// form ("2001:db8:1:2::/64", 17 bytes), a full map holds about 7 MB
// (TestLimiterMemory); the App has four limiters, so about 29 MB at worst.
const maxLimiterKeys = 100_000

func newLimiter(max int, window time.Duration, now func() time.Time) *limiter {
	return &limiter{max: max, window: window, now: now, windows: make(map[string]fixedWindow)}
}

func (l *limiter) expired(w fixedWindow, now time.Time) bool {
	return now.UnixNano()-w.start >= int64(l.window)
}

func (l *limiter) refuse(wait time.Duration) error {
	e := nah.Errorf(nah.RateLimited, "rate_limited", "too many attempts; try again later")
	e.RetryAfter = wait
	return e
}

// attempt is one event taken from a limiter. Its zero value (from a nil
// or unlimited limiter) gives nothing back.
type attempt struct {
	l      *limiter
	key    string
	window int64 // start of the window that counted it
	// last is set when this event used the key's last one: unless it is
	// given back, the key is locked out until its window ends.
	last bool
}

// take counts one event for key before the work it guards, or refuses with
// a RateLimited error when key has used its events. Checking and counting
// in one step under one lock is what makes the limit hold under
// concurrency: with a check before a password hash and a count after it,
// 50 wrong passwords sent at once were all let through.
func (l *limiter) take(key string) (attempt, error) {
	if l == nil || l.max <= 0 {
		return attempt{}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	w, ok := l.windows[key]
	if !ok || l.expired(w, now) {
		if !ok && len(l.windows) >= maxLimiterKeys {
			if err := l.makeRoomLocked(now); err != nil {
				return attempt{}, err
			}
		}
		w = fixedWindow{start: now.UnixNano()}
	}
	if int(w.n) >= l.max {
		return attempt{}, l.refuse(time.Duration(w.start + int64(l.window) - now.UnixNano()))
	}
	w.n++
	l.windows[key] = w
	return attempt{l: l, key: key, window: w.start, last: int(w.n) == l.max}, nil
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
	if w, ok := at.l.windows[at.key]; ok && w.start == at.window && w.n > 0 {
		w.n--
		at.l.windows[at.key] = w
	}
}

// makeRoomLocked forgets expired windows, then the keys with fewest events,
// down to 9/10 of the bound; never a locked-out key (a flood cannot reset a
// lockout). All locked out: it refuses new keys only (fails closed).
func (l *limiter) makeRoomLocked(now time.Time) error {
	if now.Before(l.fullUntil) {
		return l.refuse(l.fullUntil.Sub(now))
	}
	byCount := make([]int, l.max) // keys not locked out, by their events
	var earliest int64            // the earliest end of a lockout
	for k, w := range l.windows {
		switch {
		case l.expired(w, now):
			delete(l.windows, k)
		case int(w.n) >= l.max:
			if end := w.start + int64(l.window); earliest == 0 || end < earliest {
				earliest = end
			}
		default:
			byCount[w.n]++
		}
	}
	excess := len(l.windows) - (maxLimiterKeys - maxLimiterKeys/10)
	upTo, freed := -1, 0 // forget keys with at most upTo events
	for upTo+1 < l.max && freed < excess {
		upTo++
		freed += byCount[upTo]
	}
	if upTo >= 0 {
		for k, w := range l.windows {
			if int(w.n) <= upTo {
				delete(l.windows, k)
			}
		}
	}
	if len(l.windows) >= maxLimiterKeys {
		l.fullUntil = time.Unix(0, earliest)
		return l.refuse(l.fullUntil.Sub(now))
	}
	return nil
}
