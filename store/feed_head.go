package store

import (
	"context"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nah-app/nah"
)

// The head cache: a person's newest moments in memory, so most feeds read no
// file (tens of µs a file; a feed visits up to 31). Bounded by
// Config.HeadCacheBytes; updated under headMu before the 201; reloaded after
// StaleAfter so another process's writes show.

// HeadLen is how many of a person's newest moments a head holds. A feed page
// of 30 out of 151 people takes a few moments from most of them; a person
// who has more on the page is read from their file beyond the head.
const HeadLen = 12

// headItemOverhead approximates the bytes of an item besides its body.
const headItemOverhead = 80

// DefaultHeadCacheBytes is Config.HeadCacheBytes when zero. A full head of
// 400-byte moments costs 12 x (400 + 80) ~ 5.8 KB, so 64 MB holds every head
// of 10,000 people (58 MB) and leaves the rest for longer moments.
const DefaultHeadCacheBytes = 64 << 20

// head is an immutable snapshot of a person's newest moments, newest first;
// complete means these are all of the person's moments.
type head struct {
	items    []headItem
	complete bool
	bytes    int64
}

// headItem is one moment in a head. Body must not be modified.
type headItem struct {
	ID        string
	CreatedAt int64
	Body      []byte
}

func newHead(items []headItem, complete bool) *head {
	h := &head{items: items, complete: complete}
	for _, it := range items {
		h.bytes += int64(len(it.Body)) + headItemOverhead
	}
	return h
}

// itemNewer orders head items newest first, in the one order of moments.
func itemNewer(a, b headItem) int {
	return nah.CompareNewest(a.CreatedAt, a.ID, "", b.CreatedAt, b.ID, "") // one author
}

// withMoment returns a head with m added, or h itself if m is already in it
// (a reload raced with the post and read it from the file).
func (h *head) withMoment(m headItem) *head {
	if slices.ContainsFunc(h.items, func(it headItem) bool { return it.ID == m.ID }) {
		return h
	}
	items := make([]headItem, 0, len(h.items)+1)
	items = append(append(items, h.items...), m)
	slices.SortFunc(items, itemNewer)
	complete := h.complete
	if len(items) > HeadLen {
		items = items[:HeadLen]
		complete = false
	}
	return newHead(items, complete)
}

// without returns a head without moment id.
func (h *head) without(id string) *head {
	i := slices.IndexFunc(h.items, func(it headItem) bool { return it.ID == id })
	if i < 0 {
		return h
	}
	items := slices.Delete(slices.Clone(h.items), i, i+1)
	return newHead(items, h.complete)
}

// installHead makes h the head of n if the budget allows, adjusting the
// accounting; h == nil drops n's head. Call with n.headMu held.
func (s *Store) installHead(n *node, h *head) {
	old := n.head.Load()
	var delta int64
	if h != nil {
		delta += h.bytes
	}
	if old != nil {
		delta -= old.bytes
	}
	if h != nil && delta > 0 && s.headBytes.Load()+delta > s.headBudget {
		h = nil // over budget: this person is read from their file
		if old != nil {
			delta = -old.bytes
		} else {
			delta = 0
		}
	}
	n.head.Store(h)
	s.headBytes.Add(delta)
}

// fileStamp is what the file system says of a person file and its WAL.
// Any commit by any process changes it: a WAL append grows the WAL, a
// rewrite after a checkpoint moves its modification time, a checkpoint
// rewrites the database file.
type fileStamp struct {
	dbSize, dbMod, walSize, walMod int64
}

// quietFor is how long a file must have been unmodified before its stamp
// is trusted: modification times are as coarse as a few milliseconds, and a
// write in the same tick as the last one could otherwise go unseen.
const quietFor = time.Second

// stampOf stats the file and its WAL; ok is false if the stamp cannot be
// trusted to reveal the next write.
func stampOf(path string, now time.Time) (st fileStamp, ok bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return st, false
	}
	st.dbSize, st.dbMod, st.walSize = fi.Size(), fi.ModTime().UnixNano(), -1
	if wi, err := os.Stat(path + "-wal"); err == nil {
		st.walSize, st.walMod = wi.Size(), wi.ModTime().UnixNano()
	}
	latest := time.Unix(0, max(st.dbMod, st.walMod))
	return st, now.Sub(latest) >= quietFor
}

// unchanged reports whether n's file is as it was when its head was
// loaded, so that the head can be trusted for another period without
// opening the file: the common case, and a stat costs microseconds where
// an open costs a millisecond.
func (s *Store) unchanged(n *node) bool {
	n.headMu.Lock()
	defer n.headMu.Unlock()
	if !n.stamped || n.head.Load() == nil {
		return false
	}
	p, err := s.personPath(n.id)
	if err != nil {
		return false
	}
	st, _ := stampOf(p, time.Now())
	return st == n.stamp
}

// loadHead reads n's head from its file, installs it if it fits, and raises
// n's newest time; it returns the head read (installed or not). A person
// deleted meanwhile has an empty, complete head that is not installed.
func (s *Store) loadHead(ctx context.Context, n *node, now int64) (*head, error) {
	var h *head
	gone, err := s.withFile(ctx, n.id, func(f *personFile) error {
		s.fileReads.Add(1)
		n.headMu.Lock()
		defer n.headMu.Unlock()
		// Stamp before reading: a write after the stamp changes it, so the
		// worst case is one needless reload.
		n.stamp, n.stamped = stampOf(f.path, time.Now())
		rows, err := f.db.QueryContext(ctx, `SELECT id, created_at, body FROM moments
			ORDER BY id DESC LIMIT ?`, HeadLen+1)
		if err != nil {
			return err
		}
		defer rows.Close()
		items := make([]headItem, 0, HeadLen)
		complete := true
		for rows.Next() {
			if len(items) == HeadLen {
				complete = false
				break
			}
			var it headItem
			if err := rows.Scan(&it.ID, &it.CreatedAt, &it.Body); err != nil {
				return err
			}
			items = append(items, it)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		h = newHead(items, complete)
		s.installHead(n, h)
		if len(items) > 0 {
			n.raiseNewest(items[0].CreatedAt)
		}
		n.checked.Store(now)
		return nil
	})
	if gone {
		return newHead(nil, true), nil
	}
	return h, err
}

// prefetch reads, in the background and in the page's order, the missing
// heads of the first people of a page's circle, by up to GOMAXPROCS-1 (at
// most 3) workers while the page reads its own: after a start no head is
// cached, and the first feed on people-1k opened its files one after the
// other, SQLite's schema read and the -shm made for each a large share of
// its CPU (bench/THRESHOLDS.md). Each head is read once, by whoever claims
// it first; a worker keeps at most one file ahead of what the page needs,
// and a failure is left to the page's own read, which reports it.
type prefetch struct {
	missing []*node // not the page's candidates: its buffers go back to a pool
	claimed []atomic.Bool
	done    []chan struct{} // closed once the head is read
	reached []chan struct{} // closed once the page is there
	window  int             // workers claim at most this far ahead of the page
	next    atomic.Int64    // the workers' next index
	page    int             // the page's position in missing
	stop1   sync.Once
	stopped chan struct{}
	wg      sync.WaitGroup
}

// prefetchHeads starts a prefetch of the first want people of circle
// (newest first) that have no head; nil when there is nothing to do.
func (s *Store) prefetchHeads(ctx context.Context, circle []candidate, after *nah.Cursor, want int) *prefetch {
	workers := min(runtime.GOMAXPROCS(0), 4) - 1
	if workers < 1 || s.headBudget <= 0 || s.headBytes.Load() >= s.headBudget {
		return nil
	}
	var missing []*node
	for _, c := range circle[:min(want, len(circle))] {
		if c.newest == 0 || after != nil && c.newest < after.At {
			break
		}
		if c.n.head.Load() == nil {
			missing = append(missing, c.n)
		}
	}
	if len(missing) < 2 {
		return nil
	}
	workers = min(workers, len(missing)-1)
	pf := &prefetch{missing: missing, claimed: make([]atomic.Bool, len(missing)), done: make([]chan struct{}, len(missing)),
		reached: make([]chan struct{}, len(missing)), window: workers, stopped: make(chan struct{})}
	for i := range pf.done {
		pf.done[i], pf.reached[i] = make(chan struct{}), make(chan struct{})
	}
	now := s.now().UnixMilli()
	for range workers {
		pf.wg.Go(func() {
			for i := pf.next.Add(1) - 1; i < int64(len(missing)); i = pf.next.Add(1) - 1 {
				if j := int(i) - pf.window; j >= 0 {
					select {
					case <-pf.reached[j]:
					case <-pf.stopped:
						return
					}
				}
				select {
				case <-pf.stopped:
					return
				default:
				}
				if pf.claimed[i].CompareAndSwap(false, true) {
					if s.headBytes.Load() < s.headBudget {
						s.loadHead(ctx, missing[i], now)
					}
					close(pf.done[i])
				}
			}
		})
	}
	return pf
}

// await is called by the page before it reads n's head: if a worker has
// claimed n, it waits for that read; else the page claims n, so that no
// worker reads it too, and reads it itself.
func (pf *prefetch) await(n *node) {
	if pf == nil {
		return
	}
	for pf.page < len(pf.missing) && pf.missing[pf.page] != n {
		pf.page++ // the page skipped it (a head loaded meanwhile)
	}
	if pf.page == len(pf.missing) {
		return
	}
	close(pf.reached[pf.page])
	if pf.claimed[pf.page].CompareAndSwap(false, true) {
		close(pf.done[pf.page])
	} else {
		<-pf.done[pf.page]
	}
	pf.page++
}

// stop ends the workers' reads and waits for those in progress; it may be
// called more than once.
func (pf *prefetch) stop() {
	if pf == nil {
		return
	}
	pf.stop1.Do(func() { close(pf.stopped) })
	pf.wg.Wait()
}

// headOf returns n's head: the cached one while it is trusted, else one
// loaded from the file. It returns nil when heads are off or full, and the
// person is then read from their file.
func (s *Store) headOf(ctx context.Context, n *node) (*head, error) {
	if s.headBudget <= 0 {
		return nil, nil
	}
	if h := n.head.Load(); h != nil {
		return h, nil
	}
	if s.headBytes.Load() >= s.headBudget {
		return nil, nil
	}
	return s.loadHead(ctx, n, s.now().UnixMilli())
}

// headAfterPost adds a moment this process just committed to its author's
// head.
func (s *Store) headAfterPost(n *node, m nah.Moment) {
	n.headMu.Lock()
	defer n.headMu.Unlock()
	if h := n.head.Load(); h != nil {
		s.installHead(n, h.withMoment(headItem{ID: m.ID, CreatedAt: m.CreatedAt, Body: m.Body}))
	}
}

// headAfterDelete removes a moment this process just deleted from its
// author's head and returns the author's newest time if the head knows it.
func (s *Store) headAfterDelete(n *node, id string) (newest int64, known bool) {
	n.headMu.Lock()
	defer n.headMu.Unlock()
	h := n.head.Load()
	if h == nil {
		return 0, false
	}
	h = h.without(id)
	s.installHead(n, h)
	switch {
	case len(h.items) > 0:
		return h.items[0].CreatedAt, true
	case h.complete:
		return 0, true
	}
	return 0, false
}

// dropHead forgets n's head (after a bulk import).
func (s *Store) dropHead(n *node) {
	n.headMu.Lock()
	s.installHead(n, nil)
	n.headMu.Unlock()
}
