package app

import (
	"net/http"
	"sync"

	"github.com/nah-app/nah/ui"
)

// Who tried to get in: failed console sign-ins and lockouts (the console's
// and the app's, of an account or of an address), counted since start and
// the last few kept for the Overview. Not a request log: a fixed ring of
// signinLogSize events, no map, and nothing a client chooses kept as it
// is: an account is named only when it exists here (a handle, at most 32
// bytes), else it is "unknown account"; the address is the rate limits'
// key (clientAddr: IPv6 by its /64).

// signinLogSize is how many events the Overview lists: enough to see a
// pattern, few enough to read (about 100 bytes each).
const signinLogSize = 20

// signinWhere is where a sign-in was tried, as the Overview names it.
type signinWhere string

const (
	signinConsole signinWhere = "Console sign-in"
	signinApp     signinWhere = "App sign-in"
)

type signinLog struct {
	mu       sync.Mutex
	failed   int64 // console sign-ins refused for a wrong name or password
	lockouts int64
	ring     [signinLogSize]ui.SigninEvent
	next     int // where the next event goes
	n        int // events in ring, up to signinLogSize
}

func (l *signinLog) add(e ui.SigninEvent) {
	l.ring[l.next] = e
	l.next = (l.next + 1) % signinLogSize
	l.n = min(l.n+1, signinLogSize)
}

// view is the counts and the events, newest first.
func (l *signinLog) view() ui.Signins {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := ui.Signins{Failed: l.failed, Lockouts: l.lockouts, Events: make([]ui.SigninEvent, 0, l.n)}
	for i := 1; i <= l.n; i++ {
		v.Events = append(v.Events, l.ring[(l.next-i+signinLogSize)%signinLogSize])
	}
	return v
}

// signinFailed records a sign-in refused for a wrong name or password,
// counted as at: a console one is an event, and so is each lockout it
// started (it used the last attempt of its address or of its name).
// account is the account's name when it exists here, else "".
func (a *App) signinFailed(r *http.Request, at signinAttempt, where signinWhere, account string) {
	if account == "" {
		account = "unknown account"
	}
	e := ui.SigninEvent{At: a.now().UnixMilli(), Account: account, From: a.clientAddr(r)}
	l := &a.signins
	l.mu.Lock()
	defer l.mu.Unlock()
	if where == signinConsole {
		l.failed++
		e.What = string(where) + ": wrong name or password"
		l.add(e)
	}
	if at.byName.last {
		l.lockouts++
		e.What = string(where) + ": account locked out (too many wrong passwords)"
		l.add(e)
	}
	if at.byAddr.last {
		l.lockouts++
		e.What = string(where) + ": address locked out (too many wrong passwords)"
		e.Account = "any account"
		l.add(e)
	}
}
