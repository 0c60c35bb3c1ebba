package store

import (
	"sync"

	"github.com/nah-app/nah"
)

// sessionCache keeps recent token checks in memory: every API request pays
// one, and a directory query costs ~28 us, as much as a whole feed built from
// heads. Entries are trusted for StaleAfter, like newest-moment times, so a
// token revoked or a person disabled through another process on the same
// data directory stops working within that period; through this process it
// stops at once (DeleteSession and SetDisabled purge the cache).
//
// Bounded: at most maxSessions entries; when full, an arbitrary entry makes
// room (Go's map order is random, which is good enough for a cache whose
// misses cost one query).
type sessionCache struct {
	mu sync.RWMutex
	m  map[[32]byte]sessionEntry
}

type sessionEntry struct {
	person nah.Person
	at     int64 // store clock, unix ms, when read from the directory
}

const maxSessions = 20_000

func (c *sessionCache) get(h [32]byte, now, staleAfter int64) (nah.Person, bool) {
	c.mu.RLock()
	e, ok := c.m[h]
	c.mu.RUnlock()
	if !ok || now-e.at > staleAfter {
		return nah.Person{}, false
	}
	return e.person, true
}

func (c *sessionCache) put(h [32]byte, p nah.Person, now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[[32]byte]sessionEntry)
	}
	if _, ok := c.m[h]; !ok && len(c.m) >= maxSessions {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[h] = sessionEntry{person: p, at: now}
}

func (c *sessionCache) remove(h [32]byte) {
	c.mu.Lock()
	delete(c.m, h)
	c.mu.Unlock()
}

// removePerson drops every entry of person id.
func (c *sessionCache) removePerson(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if e.person.ID == id {
			delete(c.m, k)
		}
	}
}
