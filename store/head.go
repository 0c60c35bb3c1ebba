package store

import (
	"context"
	"os"
	"slices"
	"time"

	"github.com/nah-app/nah"
)

// The head cache: a person's newest moments, keys and bodies, in memory, so
// that most feeds read no file at all (SQLite costs tens of microseconds per
// file touched; a feed visits up to 31).
//
//   - Bounded in bytes: Config.HeadCacheBytes over all heads; a person whose
//     head does not fit is read from their file as before.
//   - Updated by this process's own writes, under the node's headMu, so a
//     post is in its author's head before the 201 goes out.
//   - Trusted under the same rule as newest-moment times: a head is reloaded
//     from the file once the node's time is older than StaleAfter, so another
//     process's posts and deletes show within that period.
//   - Checked against the uncached read by the feed oracle test, which runs
//     with and without heads.

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

// Head is an immutable snapshot of a person's newest moments, newest first.
// Complete means these are all of the person's moments.
type Head struct {
	Items    []HeadItem
	Complete bool
	bytes    int64
}

// HeadItem is one moment in a head. Body must not be modified.
type HeadItem struct {
	ID        string
	CreatedAt int64
	Body      []byte
}

func newHead(items []HeadItem, complete bool) *Head {
	h := &Head{Items: items, Complete: complete}
	for _, it := range items {
		h.bytes += int64(len(it.Body)) + headItemOverhead
	}
	return h
}

// itemNewer orders head items newest first.
func itemNewer(a, b HeadItem) int {
	if a.CreatedAt != b.CreatedAt {
		if a.CreatedAt > b.CreatedAt {
			return -1
		}
		return 1
	}
	if a.ID > b.ID {
		return -1
	} else if a.ID < b.ID {
		return 1
	}
	return 0
}

// withMoment returns a head with m added, or h itself if m is already in it
// (a reload raced with the post and read it from the file).
func (h *Head) withMoment(m HeadItem) *Head {
	if slices.ContainsFunc(h.Items, func(it HeadItem) bool { return it.ID == m.ID }) {
		return h
	}
	items := make([]HeadItem, 0, len(h.Items)+1)
	items = append(append(items, h.Items...), m)
	slices.SortFunc(items, itemNewer)
	complete := h.Complete
	if len(items) > HeadLen {
		items = items[:HeadLen]
		complete = false
	}
	return newHead(items, complete)
}

// without returns a head without moment id.
func (h *Head) without(id string) *Head {
	i := slices.IndexFunc(h.Items, func(it HeadItem) bool { return it.ID == id })
	if i < 0 {
		return h
	}
	items := slices.Delete(slices.Clone(h.Items), i, i+1)
	return newHead(items, h.Complete)
}

// installHead makes h the head of n if the budget allows, adjusting the
// accounting; h == nil drops n's head. Call with n.headMu held.
func (s *Store) installHead(n *node, h *Head) {
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
	p, err := s.files.personPath(n.id)
	if err != nil {
		return false
	}
	st, _ := stampOf(p, time.Now())
	return st == n.stamp
}

// loadHead reads n's head from its file, installs it if it fits, and raises
// n's newest time; it returns the head read (installed or not).
func (s *Store) loadHead(ctx context.Context, n *node, now int64) (*Head, error) {
	f, err := s.files.acquire(ctx, n.id, false)
	if err != nil {
		return nil, err
	}
	defer s.files.release(f)
	s.fileReads.Add(1)
	n.headMu.Lock()
	defer n.headMu.Unlock()
	// Stamp before reading: a write after the stamp changes it, so the
	// worst case is one needless reload.
	n.stamp, n.stamped = stampOf(f.path, time.Now())
	rows, err := f.db.QueryContext(ctx, `SELECT id, created_at, body FROM moments
		ORDER BY created_at DESC, id DESC LIMIT ?`, HeadLen+1)
	if err != nil {
		return nil, err
	}
	items := make([]HeadItem, 0, HeadLen)
	complete := true
	for rows.Next() {
		if len(items) == HeadLen {
			complete = false
			break
		}
		var it HeadItem
		if err := rows.Scan(&it.ID, &it.CreatedAt, &it.Body); err != nil {
			rows.Close()
			return nil, err
		}
		items = append(items, it)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	h := newHead(items, complete)
	s.installHead(n, h)
	if len(items) > 0 {
		n.raiseNewest(items[0].CreatedAt)
	}
	n.checked.Store(now)
	return h, nil
}

// Head returns the head of candidate c: the cached one while it is trusted,
// else one loaded from the file. It returns nil when heads are off.
func (s *Store) Head(ctx context.Context, c Candidate) (*Head, error) {
	if s.headBudget <= 0 || c.node == nil {
		return nil, nil
	}
	if h := c.node.head.Load(); h != nil {
		return h, nil
	}
	if s.headBytes.Load() >= s.headBudget {
		return nil, nil // full: this person is read from their file
	}
	h, err := s.loadHead(ctx, c.node, s.now().UnixMilli())
	if nah.ErrorCode(err) == nah.NotFound {
		return newHead(nil, true), nil // deleted meanwhile: nothing to show
	}
	return h, err
}

// headAfterPost adds a moment this process just committed to its author's
// head.
func (s *Store) headAfterPost(n *node, m nah.Moment) {
	n.headMu.Lock()
	defer n.headMu.Unlock()
	if h := n.head.Load(); h != nil {
		s.installHead(n, h.withMoment(HeadItem{ID: m.ID, CreatedAt: m.CreatedAt, Body: m.Body}))
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
	case len(h.Items) > 0:
		return h.Items[0].CreatedAt, true
	case h.Complete:
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

// HeadBytes returns the bytes the head cache holds now.
func (s *Store) HeadBytes() int64 { return s.headBytes.Load() }
