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
//
// A token check reads the directory and then puts what it read; a removal
// that runs between the two would be undone by the put, and the revoked
// token accepted for StaleAfter. So every removal bumps gen, a check takes
// gen before its read (generation), and put drops the entry if gen moved
// in between. One counter for all removals: a put that races any removal
// is not cached, which costs one more query on the next request, and
// removals are rare.
type sessionCache struct {
	mu  sync.RWMutex
	m   map[[32]byte]sessionEntry
	gen uint64 // removals so far; guarded by mu
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

// generation returns the count of removals, to be taken before the
// directory read whose result is put.
func (c *sessionCache) generation() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.gen
}

// put caches p for token hash h, read from the directory at now, unless a
// removal has run since gen was taken.
func (c *sessionCache) put(h [32]byte, p nah.Person, now int64, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
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
	c.gen++
	delete(c.m, h)
	c.mu.Unlock()
}

// removePerson drops every entry of person id.
func (c *sessionCache) removePerson(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for k, e := range c.m {
		if e.person.ID == id {
			delete(c.m, k)
		}
	}
}
