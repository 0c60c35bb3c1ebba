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
// page of the limit+1 newest keys is merged from each file's covering index;
// once the page is full, the first person whose newest moment is older than
// the page's oldest key ends the visit, because nobody after them can have
// anything newer. Bodies are then read only for the moments on the page. So a
// page of 30 reads at most 31 files however large the circle.

// feedWork holds the buffers of one feed request; pooled, since a feed is
// the hottest path of the server.
type feedWork struct {
	circle []store.Candidate
	keys   []store.Key // one file's keys
	top    []store.Key // the page so far, newest first, at most limit+1
	ids    []string
	bodies []byte   // every body of the page, back to back
	spans  [][2]int // per page item: its body's offsets in bodies; -1 if gone
	out    []byte
}

var feedPool = sync.Pool{New: func() any { return new(feedWork) }}

// maxPooledFeed keeps one unusually large page from pinning memory.
const maxPooledFeed = 1 << 20

func (fw *feedWork) release() {
	if cap(fw.bodies) > maxPooledFeed || cap(fw.out) > maxPooledFeed {
		return
	}
	feedPool.Put(fw)
}

// newer orders keys newest first: by time, then by id.
func newer(a, b store.Key) int {
	if c := cmp.Compare(b.CreatedAt, a.CreatedAt); c != 0 {
		return c
	}
	return cmp.Compare(b.ID, a.ID)
}

// page fills fw.top with up to limit+1 keys older than before from the
// people in fw.circle, then reads the bodies of the first limit of them.
func (a *App) page(ctx context.Context, fw *feedWork, before *nah.Cursor, limit int) error {
	want := limit + 1
	slices.SortFunc(fw.circle, func(x, y store.Candidate) int { return cmp.Compare(y.Newest, x.Newest) })
	fw.top = fw.top[:0]
	for _, c := range fw.circle {
		if c.Newest == 0 {
			break // never posted, nor anyone after them
		}
		if len(fw.top) == want && c.Newest < fw.top[want-1].CreatedAt {
			break
		}
		var err error
		fw.keys, err = a.store.MomentKeys(ctx, c.ID, before, want, fw.keys[:0])
		if err != nil {
			if nah.ErrorCode(err) == nah.NotFound {
				continue // deleted since the circle was read
			}
			return err
		}
		fw.top = mergeTop(fw.top, fw.keys, want)
	}
	return a.readBodies(ctx, fw, min(limit, len(fw.top)))
}

// mergeTop merges keys (newest first) into top (newest first), keeping at
// most want.
func mergeTop(top, keys []store.Key, want int) []store.Key {
	if len(keys) == 0 {
		return top
	}
	if len(top) == want && newer(keys[0], top[want-1]) >= 0 {
		return top // nothing new enough
	}
	n := len(top)
	top = append(top, keys...)
	// Both halves are sorted; an insertion merge from the back is simple and
	// cheap for pages of 30.
	merged := top[:n+len(keys)]
	slices.SortStableFunc(merged, newer)
	if len(merged) > want {
		merged = merged[:want]
	}
	return merged
}

// readBodies reads the bodies of fw.top[:n], one query per author.
func (a *App) readBodies(ctx context.Context, fw *feedWork, n int) error {
	fw.bodies = fw.bodies[:0]
	fw.spans = slices.Grow(fw.spans[:0], n)[:n]
	for i := range fw.spans {
		fw.spans[i] = [2]int{-1, -1}
	}
	page := fw.top[:n]
	for i, k := range page {
		if fw.spans[i][0] != -1 || slices.IndexFunc(page[:i], func(p store.Key) bool { return p.Author == k.Author }) >= 0 {
			continue // this author's bodies were read with an earlier item
		}
		fw.ids = fw.ids[:0]
		for _, p := range page[i:] {
			if p.Author == k.Author {
				fw.ids = append(fw.ids, p.ID)
			}
		}
		err := a.store.MomentBodies(ctx, k.Author, fw.ids, func(id string, body []byte) {
			for j := i; j < n; j++ {
				if page[j].ID == id && page[j].Author == k.Author {
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
	for i, k := range fw.top[:n] {
		sp := fw.spans[i]
		if sp[0] < 0 {
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
		b = base64.StdEncoding.AppendEncode(b, fw.bodies[sp[0]:sp[1]])
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
