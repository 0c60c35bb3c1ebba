package app

import (
	"crypto/rand"
	"sync"
	"time"

	"github.com/nah-app/nah/ui"
)

// A restore of a person to a time is confirmed with a one-time ticket:
// the confirmation page issues it, the POST spends it, and the result is
// a page of its own (/console/backups/restore/{ticket}) that the POST
// redirects to. A reload of the result shows the result again; a second
// POST of the same confirmation (a resent form, another tab) is refused.

const (
	// maxRestoreTickets bounds the tickets held, spent or not: each is a
	// few hundred bytes, and an admin confirms a handful of restores a
	// year. Past it the oldest goes first.
	maxRestoreTickets = 64
	// restoreTicketLife is how long a confirmation can be acted on, and
	// how long a result stays to be shown again.
	restoreTicketLife = time.Hour
)

type restoreTicket struct {
	person string
	at     time.Time
	issued time.Time
	spent  bool
	result *ui.RestorePerson // once done
}

// restoreTickets are the confirmations issued and the results of those
// spent, in memory: a restart forgets them, and its confirmation is then
// opened again.
type restoreTickets struct {
	mu sync.Mutex
	m  map[string]*restoreTicket
}

// issue returns a new ticket for restoring person to at.
func (ts *restoreTickets) issue(person string, at, now time.Time) string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.expire(now)
	if ts.m == nil {
		ts.m = make(map[string]*restoreTicket)
	}
	for len(ts.m) >= maxRestoreTickets {
		var oldest string
		for k, t := range ts.m {
			if oldest == "" || t.issued.Before(ts.m[oldest].issued) {
				oldest = k
			}
		}
		delete(ts.m, oldest)
	}
	id := rand.Text()
	ts.m[id] = &restoreTicket{person: person, at: at, issued: now}
	return id
}

// spend marks ticket id spent and returns it; ok is false when it is
// unknown (expired, forgotten) or already spent, which t then says.
func (ts *restoreTickets) spend(id string, now time.Time) (t restoreTicket, ok bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.expire(now)
	p := ts.m[id]
	if p == nil {
		return restoreTicket{}, false
	}
	if p.spent {
		return *p, false
	}
	p.spent = true
	return *p, true
}

// done records the result of ticket id's restore.
func (ts *restoreTickets) done(id string, v ui.RestorePerson) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if p := ts.m[id]; p != nil {
		p.result = &v
	}
}

// result is ticket id's restore's result, if it is done and still held.
func (ts *restoreTickets) result(id string, now time.Time) (ui.RestorePerson, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.expire(now)
	if p := ts.m[id]; p != nil && p.result != nil {
		return *p.result, true
	}
	return ui.RestorePerson{}, false
}

func (ts *restoreTickets) expire(now time.Time) {
	for k, t := range ts.m {
		if now.Sub(t.issued) > restoreTicketLife {
			delete(ts.m, k)
		}
	}
}
