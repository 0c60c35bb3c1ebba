package app

import (
	"cmp"
	"context"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// The feed, newest poster first (SPEC section 3).
//
// A person's circle (themselves and their connections) comes from memory with
// each one's newest-moment time. Visiting the circle newest poster first, the
// page of the limit+1 newest keys is merged from each person's head (their
// newest moments, bodies included, kept in memory by the store) or else from
// their file's covering index; once the page is full, the first person whose
// newest moment is older than the page's oldest key ends the visit, because
// nobody after them can have anything newer. Bodies are read from files only
// for the moments on the page that no head held. So a page of 30 reads at
// most 31 files however large the circle, and usually none.

// feedWork holds the buffers of one feed request; pooled, since a feed is
// the hottest path of the server.
type feedWork struct {
	circle []store.Candidate
	keys   []store.Key // one file's keys
	cand   []item      // one person's items, before merging
	rest   []rest      // people whose files may still matter
	top    []item      // the page so far, newest first, at most limit+1
	spare  []item      // the other half of top's double buffer
	ids    []string
	bodies []byte   // bodies read from files, back to back
	spans  [][2]int // per page item read from a file: its body in bodies
	out    []byte
}

// item is a moment on its way to a page: from a head, with its body, or
// from a file, whose body is read once the page is known.
type item struct {
	store.Key
	body []byte
	file bool
}

var feedPool = sync.Pool{New: func() any { return new(feedWork) }}

// maxPooledFeed keeps one unusually large page from pinning memory.
const maxPooledFeed = 1 << 20

func (fw *feedWork) release() {
	if cap(fw.bodies) > maxPooledFeed || cap(fw.out) > maxPooledFeed {
		return
	}
	clear(fw.top[:cap(fw.top)]) // drop references to head bodies
	clear(fw.spare[:cap(fw.spare)])
	clear(fw.cand[:cap(fw.cand)])
	feedPool.Put(fw)
}

// newer orders items newest first: by time, then by id.
func newer(a, b item) int {
	if c := cmp.Compare(b.CreatedAt, a.CreatedAt); c != 0 {
		return c
	}
	return cmp.Compare(b.ID, a.ID)
}

// page fills fw.top with up to limit+1 items older than before from the
// people in fw.circle, then reads from files the bodies of the first limit
// of them that did not come from a head.
//
// Heads come first: every visited person's cached newest moments are merged
// before any file is read, since a head's last item can only be proved
// irrelevant once the page is full. Then, for each person whose head is
// incomplete, the file is read for moments older than the head's last item,
// but only if that item would not close the page. The page only ever gets
// newer, so a person skipped early stays skippable.
func (a *App) page(ctx context.Context, fw *feedWork, before *nah.Cursor, limit int) error {
	want := limit + 1
	slices.SortFunc(fw.circle, func(x, y store.Candidate) int { return cmp.Compare(y.Newest, x.Newest) })
	fw.top = fw.top[:0]
	fw.rest = fw.rest[:0]
	for _, c := range fw.circle {
		if c.Newest == 0 {
			break // never posted, nor anyone after them
		}
		if len(fw.top) == want && c.Newest < fw.top[want-1].CreatedAt {
			break
		}
		h, err := a.store.Head(ctx, c)
		if err != nil {
			return err
		}
		if h == nil { // not cached: read the file now, as it helps close the page
			if err := a.mergeFile(ctx, fw, rest{id: c.ID, from: before}, want); err != nil {
				return err
			}
			continue
		}
		fw.cand = fw.cand[:0]
		for _, it := range h.Items {
			if before == nil || before.Before(it.CreatedAt, it.ID) {
				fw.cand = append(fw.cand, item{Key: store.Key{ID: it.ID, Author: c.ID, CreatedAt: it.CreatedAt}, body: it.Body})
			}
		}
		fw.merge(fw.cand, want)
		if h.Complete || len(h.Items) == 0 {
			continue
		}
		// The file holds more, all older than the head's last item.
		last := h.Items[len(h.Items)-1]
		r := rest{id: c.ID, from: before, last: item{Key: store.Key{ID: last.ID, CreatedAt: last.CreatedAt}}}
		if before == nil || before.Before(last.CreatedAt, last.ID) {
			r.from = &nah.Cursor{At: last.CreatedAt, ID: last.ID}
		}
		fw.rest = append(fw.rest, r)
	}
	for _, r := range fw.rest {
		if len(fw.top) == want && newer(fw.top[want-1], r.last) <= 0 {
			continue // the page closes before the head runs out
		}
		if err := a.mergeFile(ctx, fw, r, want); err != nil {
			return err
		}
	}
	return a.readBodies(ctx, fw, min(limit, len(fw.top)))
}

// mergeFile merges the keys of r's file older than r.from into the page.
func (a *App) mergeFile(ctx context.Context, fw *feedWork, r rest, want int) error {
	var err error
	fw.keys, err = a.store.MomentKeys(ctx, r.id, r.from, want, fw.keys[:0])
	if err != nil {
		if nah.ErrorCode(err) == nah.NotFound {
			return nil // deleted since the circle was read
		}
		return err
	}
	fw.cand = fw.cand[:0]
	for _, k := range fw.keys {
		fw.cand = append(fw.cand, item{Key: k, file: true})
	}
	fw.merge(fw.cand, want)
	return nil
}

// rest is a person whose file may hold moments for the page: moments older
// than from, which is at most their head's last item.
type rest struct {
	id   string
	from *nah.Cursor
	last item
}

// merge merges cand (newest first) into fw.top (newest first), keeping at
// most want, through the spare buffer: no sorting, no allocation once warm.
func (fw *feedWork) merge(cand []item, want int) {
	if len(cand) == 0 || len(fw.top) == want && newer(cand[0], fw.top[want-1]) >= 0 {
		return // nothing new enough
	}
	out := fw.spare[:0]
	i, j := 0, 0
	for len(out) < want && (i < len(fw.top) || j < len(cand)) {
		if j == len(cand) || i < len(fw.top) && newer(fw.top[i], cand[j]) <= 0 {
			out = append(out, fw.top[i])
			i++
		} else {
			out = append(out, cand[j])
			j++
		}
	}
	fw.spare, fw.top = fw.top[:0], out
}

// readBodies reads the bodies of the file items of fw.top[:n], one query
// per author, and points each item at its body. An item whose moment was
// deleted since its key was read keeps a nil body and is left out.
func (a *App) readBodies(ctx context.Context, fw *feedWork, n int) error {
	fw.bodies = fw.bodies[:0]
	fw.spans = slices.Grow(fw.spans[:0], n)[:n]
	page := fw.top[:n]
	for i := range page {
		fw.spans[i] = [2]int{-1, -1}
	}
	for i, k := range page {
		if !k.file || slices.ContainsFunc(page[:i], func(p item) bool { return p.file && p.Author == k.Author }) {
			continue // from a head, or read with an earlier item of this author
		}
		fw.ids = fw.ids[:0]
		for _, p := range page[i:] {
			if p.file && p.Author == k.Author {
				fw.ids = append(fw.ids, p.ID)
			}
		}
		err := a.store.MomentBodies(ctx, k.Author, fw.ids, func(id string, body []byte) {
			for j := i; j < n; j++ {
				if page[j].file && page[j].ID == id && page[j].Author == k.Author {
					start := len(fw.bodies)
					fw.bodies = append(fw.bodies, body...)
					fw.spans[j] = [2]int{start, len(fw.bodies)}
					return
				}
			}
		})
		if err != nil && nah.ErrorCode(err) != nah.NotFound {
			return err
		}
	}
	for i := range page {
		if sp := fw.spans[i]; sp[0] >= 0 {
			page[i].body = fw.bodies[sp[0]:sp[1]]
		}
	}
	return nil
}

// parsePage reads ?before= and ?limit=.
func (a *App) parsePage(r *http.Request) (*nah.Cursor, int, error) {
	q := r.URL.Query()
	limit := nah.FeedPageDefault
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > nah.FeedPageMax {
			return nil, 0, nah.Errorf(nah.Invalid, "invalid_limit", "limit is a whole number from 1 to %d", nah.FeedPageMax)
		}
		limit = n
	}
	if s := q.Get("before"); s != "" {
		c, err := nah.DecodeCursor(a.store.CursorKey(), s)
		if err != nil {
			return nil, 0, err
		}
		return &c, limit, nil
	}
	return nil, limit, nil
}

// handleFeed serves the feed of the signed-in person.
func (a *App) handleFeed(w http.ResponseWriter, r *http.Request) {
	a.servePage(w, r, sessionOf(r).person.ID, true)
}

// handlePersonMoments serves one person's moments to themselves or a
// connection; to anyone else the person does not exist.
func (a *App) handlePersonMoments(w http.ResponseWriter, r *http.Request) {
	me, id := sessionOf(r).person.ID, chi.URLParam(r, "id")
	if !nah.ValidPersonID(id) || id != me && !a.store.Connected(me, id) {
		a.writeError(w, r, nah.Errorf(nah.NotFound, "", "no such person"))
		return
	}
	a.servePage(w, r, id, false)
}

func (a *App) servePage(w http.ResponseWriter, r *http.Request, id string, circle bool) {
	before, limit, err := a.parsePage(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	fw := feedPool.Get().(*feedWork)
	defer fw.release()
	if circle {
		fw.circle, err = a.store.Circle(r.Context(), id, fw.circle[:0])
	} else {
		fw.circle, err = a.store.Alone(r.Context(), id, fw.circle[:0])
	}
	if err == nil {
		err = a.page(r.Context(), fw, before, limit)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	fw.out = appendPage(fw.out[:0], fw, limit, a.store.CursorKey())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(fw.out)))
	w.WriteHeader(http.StatusOK)
	w.Write(fw.out)
}

// appendPage writes the page JSON by hand: ids are base32 and times fixed
// format, so nothing needs escaping, and bodies are base64 appended in place.
func appendPage(b []byte, fw *feedWork, limit int, key []byte) []byte {
	n := min(limit, len(fw.top))
	b = append(b, `{"moments":[`...)
	first := true
	for _, k := range fw.top[:n] {
		if k.body == nil {
			continue // deleted between its key and its body
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, `{"id":"`...)
		b = append(b, k.ID...)
		b = append(b, `","author":"`...)
		b = append(b, k.Author...)
		b = append(b, `","created_at":"`...)
		b = nah.AppendTime(b, k.CreatedAt)
		b = append(b, `","body":"`...)
		b = base64.StdEncoding.AppendEncode(b, k.body)
		b = append(b, `"}`...)
	}
	b = append(b, `],"next":`...)
	if len(fw.top) > limit {
		last := fw.top[limit-1]
		b = append(b, '"')
		b = append(b, nah.EncodeCursor(key, nah.Cursor{At: last.CreatedAt, ID: last.ID})...)
		b = append(b, '"')
	} else {
		b = append(b, "null"...)
	}
	return append(b, "}\n"...)
}
