package store

import (
	"context"
	"slices"
	"sync"

	"github.com/nah-app/nah"
)

// The feed (SPEC 3) visits the circle newest poster first, stopping at the
// first whose newest moment is older than the full page: 30 moments read at
// most 31 files, usually none (feed_head.go). A deleted person shows
// nothing; an unusable file is its owner's error, and others' pages are
// rebuilt without it.

// Page is one page of moments, newest first. Take one with NewPage, fill it
// with FeedRange and give it back with Release: its buffers are pooled, since
// the feed is the hottest path of the server.
type Page struct {
	// Moments holds at most limit moments, newest first. Their bodies point
	// into the page's buffers or into immutable heads, and are valid until
	// Release. A moment deleted between reading its key and its body is
	// left out.
	Moments []nah.Moment
	// Next is the position after the page's last moment, or nil when nothing
	// older is left.
	Next *nah.Cursor
	// Take, when set, is asked for the bytes of every body before the page
	// copies it from a file (bodies from heads are already in memory and
	// cost nothing more): an error stops the read and FeedRange returns it. It
	// is how a caller keeps pages inside a memory budget; Taken says how
	// much to give back once the page is written.
	Take func(n int) error

	taken   int
	next    nah.Cursor
	circle  []candidate
	keys    []momentKey // one file's keys
	cand    []item      // one person's items, before merging
	rest    []rest      // people whose files may still matter
	top     []item      // the page so far, newest first, at most limit+1
	spare   []item      // the other half of top's double buffer
	ids     []string
	idsJSON []byte   // ids of one body read, as JSON
	bodies  []byte   // bodies read from files, back to back
	spans   [][2]int // per page item read from a file: its body in bodies
}

var pagePool = sync.Pool{New: func() any { return new(Page) }}

// maxPooledPage keeps one unusually large page from pinning memory.
const maxPooledPage = 1 << 20

// NewPage returns an empty page from the pool.
func NewPage() *Page { return pagePool.Get().(*Page) }

// Release gives p back to the pool; p and its bodies must not be used after.
func (p *Page) Release() {
	if cap(p.bodies) > maxPooledPage {
		return
	}
	// Drop references to heads and people, so the pool pins nothing.
	clear(p.top[:cap(p.top)])
	clear(p.spare[:cap(p.spare)])
	clear(p.cand[:cap(p.cand)])
	clear(p.circle[:cap(p.circle)])
	clear(p.Moments[:cap(p.Moments)])
	clear(p.rest[:cap(p.rest)])
	p.Moments = p.Moments[:0]
	p.Next, p.Take, p.taken = nil, nil, 0
	pagePool.Put(p)
}

// Taken is the sum of the bytes Take granted for this page.
func (p *Page) Taken() int { return p.taken }

// candidate is a person whose moments may be on a page, with the time of
// their newest moment when the circle was read.
type candidate struct {
	n      *node
	newest int64
}

// momentKey is a moment without its body: what the feed merges before it
// knows which bodies make the page.
type momentKey struct {
	ID        string
	Author    string
	CreatedAt int64
}

// item is a moment on its way to a page: from a head, with its body, or
// from a file, whose body is read once the page is known.
type item struct {
	momentKey
	body  []byte
	file  bool
	found bool // the body is known: from a head, or read from the file
}

// rest is a person whose file may hold moments for the page: moments older
// than from, which is at most their head's last item.
type rest struct {
	id    string
	from  *nah.Cursor
	after *nah.Cursor // and newer than after, when set
	last  item
}

// newer orders items newest first, in the one order of moments.
func newer(a, b item) int {
	return nah.CompareNewest(a.CreatedAt, a.ID, a.Author, b.CreatedAt, b.ID, b.Author)
}

// FeedRange fills p with up to limit moments strictly between after and
// before (nil for no bound on that side), newest first: of person id and
// everyone connected to them when circle is set, else of id alone. Who may
// read it is the caller's to decide. An unknown person is NotFound. Next
// then pages on within the same range.
func (s *Store) FeedRange(ctx context.Context, id string, circle bool, before, after *nah.Cursor, limit int, p *Page) error {
	if err := nah.CheckPageLimit(limit); err != nil {
		return err
	}
	var err error
	if p.circle, err = s.candidates(ctx, id, circle, p.circle[:0]); err != nil {
		return err
	}
	for {
		err := s.page(ctx, p, before, after, limit)
		if err == nil {
			break
		}
		// Each round leaves one more person out, so it ends.
		skip := faultPerson(err)
		if skip == "" || skip == id || !slices.ContainsFunc(p.circle, func(c candidate) bool { return c.n.id == skip }) {
			return err
		}
		p.circle = slices.DeleteFunc(p.circle, func(c candidate) bool { return c.n.id == skip })
	}
	n := min(limit, len(p.top))
	p.Moments = p.Moments[:0]
	for _, it := range p.top[:n] {
		if it.found {
			p.Moments = append(p.Moments, nah.Moment{ID: it.ID, Author: it.Author, CreatedAt: it.CreatedAt, Body: it.body})
		}
	}
	p.Next = nil
	if len(p.top) > limit {
		last := p.top[limit-1]
		p.next = nah.Cursor{At: last.CreatedAt, ID: last.ID, Author: last.Author}
		p.Next = &p.next
	}
	return nil
}

// candidates appends to dst person id and, when circle is set, everyone
// connected to them, with newest-moment times that can be trusted: a time
// last confirmed more than StaleAfter ago is re-read from the person's file
// first, so a post taken by another process on the same data directory
// shows within that period. Someone else whose file cannot be used is left
// out; id's own is an error.
func (s *Store) candidates(ctx context.Context, id string, circle bool, dst []candidate) ([]candidate, error) {
	np := nodePool.Get().(*[]*node)
	nodes, err := s.circle(ctx, id, circle, (*np)[:0])
	defer func() {
		clear(nodes)
		*np = nodes[:0]
		nodePool.Put(np)
	}()
	if err != nil {
		return dst, err
	}
	if len(nodes) == 0 {
		return dst, nah.ErrNoPerson()
	}
	now := s.now().UnixMilli()
	for _, n := range nodes {
		if now-n.checked.Load() > s.staleAfter.Milliseconds() {
			if err := s.refresh(ctx, n, now); err != nil {
				if n.id != id && faultPerson(err) == n.id {
					continue
				}
				return dst, err
			}
		}
		dst = append(dst, candidate{n: n, newest: n.newest.Load()})
	}
	return dst, nil
}

// refresh re-reads n's newest time, and its head when heads are on and it
// fits, from its file; a cached head whose file is unchanged since it was
// read (same sizes and modification times, see fileStamp) is trusted for
// another period without opening the file.
func (s *Store) refresh(ctx context.Context, n *node, now int64) error {
	if s.unchanged(n) {
		n.checked.Store(now)
		return nil
	}
	if s.headBudget > 0 && (n.head.Load() != nil || s.headBytes.Load() < s.headBudget) {
		_, err := s.loadHead(ctx, n, now)
		return err
	}
	_, err := s.withFile(ctx, n.id, func(f *personFile) error {
		newest, err := readNewest(ctx, f.db)
		if err != nil {
			return err
		}
		// Raise, never lower: a post of ours may have landed after the read.
		n.raiseNewest(newest)
		n.checked.Store(now)
		return nil
	})
	return err
}

// withFile runs fn on the file of person id, for reading (useFile). A
// person deleted since their node was read has no file: gone is then true,
// fn is not run, and there is no error, since a deleted person has nothing
// to show.
func (s *Store) withFile(ctx context.Context, id string, fn func(f *personFile) error) (gone bool, err error) {
	err = s.useFile(ctx, id, false, fn)
	if nah.ErrorCode(err) == nah.NotFound {
		return true, nil
	}
	return false, err
}

// page fills p.top with up to limit+1 items between before and after from
// p.circle, merging every head before any file is read, then reads bodies
// not from a head. An incomplete head's file is read only if its last item
// would not close the page: the page only gets newer, so a skip stays valid.
func (s *Store) page(ctx context.Context, p *Page, before, after *nah.Cursor, limit int) error {
	want := limit + 1
	slices.SortFunc(p.circle, func(x, y candidate) int {
		switch {
		case x.newest > y.newest:
			return -1
		case x.newest < y.newest:
			return 1
		}
		return 0
	})
	p.top = p.top[:0]
	p.rest = p.rest[:0]
	pf := s.prefetchHeads(ctx, p.circle, after, want)
	defer pf.stop() // on an error
	for _, c := range p.circle {
		if c.newest == 0 {
			break // never posted, nor anyone after them
		}
		if len(p.top) == want && c.newest < p.top[want-1].CreatedAt || after != nil && c.newest < after.At {
			break
		}
		pf.await(c.n)
		h, err := s.headOf(ctx, c.n)
		if err != nil {
			return err
		}
		if h == nil { // not cached: read the file now, as it helps close the page
			if err := s.mergeFile(ctx, p, rest{id: c.n.id, from: before, after: after}, want); err != nil {
				return err
			}
			continue
		}
		p.cand = p.cand[:0]
		for _, it := range h.items {
			if after != nil && !after.Newer(it.CreatedAt, it.ID, c.n.id) {
				break // the head is newest first: the rest is older still
			}
			if before == nil || before.Before(it.CreatedAt, it.ID, c.n.id) {
				p.cand = append(p.cand, item{momentKey: momentKey{ID: it.ID, Author: c.n.id, CreatedAt: it.CreatedAt}, body: it.Body, found: true})
			}
		}
		p.merge(p.cand, want)
		if h.complete || len(h.items) == 0 {
			continue
		}
		last := h.items[len(h.items)-1]
		if after != nil && !after.Newer(last.CreatedAt, last.ID, c.n.id) {
			continue // the head reaches past after: the file holds nothing newer
		}
		// The file holds more, all older than the head's last item.
		r := rest{id: c.n.id, from: before, after: after, last: item{momentKey: momentKey{ID: last.ID, Author: c.n.id, CreatedAt: last.CreatedAt}}}
		if before == nil || before.Before(last.CreatedAt, last.ID, c.n.id) {
			r.from = &nah.Cursor{At: last.CreatedAt, ID: last.ID, Author: c.n.id}
		}
		p.rest = append(p.rest, r)
	}
	pf.stop()
	for _, r := range p.rest {
		if len(p.top) == want && newer(p.top[want-1], r.last) <= 0 {
			continue // the page closes before the head runs out
		}
		if err := s.mergeFile(ctx, p, r, want); err != nil {
			return err
		}
	}
	return s.readBodies(ctx, p, min(limit, len(p.top)))
}

// mergeFile merges the keys of r's file older than r.from into the page.
func (s *Store) mergeFile(ctx context.Context, p *Page, r rest, want int) error {
	var err error
	if p.keys, err = s.momentKeys(ctx, r.id, r.from, r.after, want, p.keys[:0]); err != nil {
		return err
	}
	p.cand = p.cand[:0]
	for _, k := range p.keys {
		p.cand = append(p.cand, item{momentKey: k, file: true})
	}
	p.merge(p.cand, want)
	return nil
}

// merge merges cand (newest first) into p.top (newest first), keeping at
// most want, through the spare buffer: no sorting, no allocation once warm.
func (p *Page) merge(cand []item, want int) {
	if len(cand) == 0 || len(p.top) == want && newer(cand[0], p.top[want-1]) >= 0 {
		return // nothing new enough
	}
	out := p.spare[:0]
	i, j := 0, 0
	for len(out) < want && (i < len(p.top) || j < len(cand)) {
		if j == len(cand) || i < len(p.top) && newer(p.top[i], cand[j]) <= 0 {
			out = append(out, p.top[i])
			i++
		} else {
			out = append(out, cand[j])
			j++
		}
	}
	p.spare, p.top = p.top[:0], out
}

// readBodies reads the bodies of the file items of p.top[:n], one query per
// author, and points each item at its body. An item whose moment was
// deleted since its key was read stays not found.
func (s *Store) readBodies(ctx context.Context, p *Page, n int) error {
	p.bodies = p.bodies[:0]
	p.spans = slices.Grow(p.spans[:0], n)[:n]
	page := p.top[:n]
	for i := range page {
		p.spans[i] = [2]int{-1, -1}
	}
	for i, k := range page {
		if !k.file || slices.ContainsFunc(page[:i], func(it item) bool { return it.file && it.Author == k.Author }) {
			continue // from a head, or read with an earlier item of this author
		}
		p.ids = p.ids[:0]
		for _, it := range page[i:] {
			if it.file && it.Author == k.Author {
				p.ids = append(p.ids, it.ID)
			}
		}
		var over error
		err := s.momentBodies(ctx, p, k.Author, p.ids, func(id string, body []byte) bool {
			// Twice the bodies held: the buffer they are appended to may
			// double. Charged as a high-water mark, since a page read again
			// without an unreadable person (FeedRange) reuses the same buffer.
			if need := 2 * (len(p.bodies) + len(body)); p.Take != nil && need > p.taken {
				if over = p.Take(need - p.taken); over != nil {
					return false
				}
				p.taken = need
			}
			for j := i; j < n; j++ {
				if page[j].file && page[j].ID == id && page[j].Author == k.Author {
					start := len(p.bodies)
					p.bodies = append(p.bodies, body...)
					p.spans[j] = [2]int{start, len(p.bodies)}
					return true
				}
			}
			return true
		})
		if over != nil {
			return over
		}
		if err != nil {
			return err
		}
	}
	for i := range page {
		if sp := p.spans[i]; sp[0] >= 0 {
			page[i].body, page[i].found = p.bodies[sp[0]:sp[1]], true
		}
	}
	return nil
}
