package store

import (
	"sync"
	"time"
)

// A refresh (after=) must never miss a moment: a post takes its time, then
// commits, so a reader can see a later post of someone else before an
// earlier one still committing, and a refresh from the later one would
// skip it. settling holds the times of the posts between their clock read
// and the moment they are in memory; a page reads its horizon, the oldest
// of them or the current millisecond, and whatever is older than the
// horizon can no longer appear below it.
type settling struct {
	mu sync.Mutex
	at map[*int64]struct{}
}

// begin reads the clock for a post and holds its time as settling until
// done is called, once the post is visible to readers or has failed.
func (st *settling) begin(now func() time.Time) (at int64, done func()) {
	st.mu.Lock()
	defer st.mu.Unlock()
	p := new(int64)
	*p = now().UnixMilli()
	if st.at == nil {
		st.at = make(map[*int64]struct{})
	}
	st.at[p] = struct{}{}
	return *p, func() {
		st.mu.Lock()
		delete(st.at, p)
		st.mu.Unlock()
	}
}

// horizon is the oldest time a moment not yet visible can have: the
// oldest settling post's, else the current millisecond. Every moment
// older than it is visible once horizon returns.
func (st *settling) horizon(now func() time.Time) int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	h := now().UnixMilli()
	for p := range st.at {
		h = min(h, *p)
	}
	return h
}

// Horizon is the store's settling horizon (settling), in unix ms.
func (s *Store) Horizon() int64 { return s.settle.horizon(s.now) }
