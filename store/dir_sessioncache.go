package store

import (
	"sync"

	"github.com/nah-app/nah"
)

// sessionCache keeps token checks (a directory query, ~28 us) for StaleAfter;
// this process's revocations purge it at once. At most maxSessions entries,
// an arbitrary one evicted. Every removal bumps gen, and a put whose read
// began before the bump is dropped, so a revoked token is never re-cached.
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
