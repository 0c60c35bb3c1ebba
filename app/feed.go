package app

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// The feed's read, newest poster first, is the store's (store/feed.go):
// here a page is only parsed from the query and written as JSON.

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
	p := store.NewPage()
	defer p.Release()
	if err := a.store.Feed(r.Context(), id, circle, before, limit, p); err != nil {
		a.writeError(w, r, err)
		return
	}
	out := outPool.Get().(*[]byte)
	defer putOut(out)
	*out = appendPage((*out)[:0], p, a.store.CursorKey())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(*out)))
	w.WriteHeader(http.StatusOK)
	w.Write(*out)
}

// outPool recycles the buffers pages are written into; maxPooledOut keeps
// one unusually large page from pinning memory.
var outPool = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledOut = 1 << 20

func putOut(b *[]byte) {
	if cap(*b) <= maxPooledOut {
		outPool.Put(b)
	}
}

// appendPage writes the page JSON by hand: ids are base32 and times fixed
// format, so nothing needs escaping, and bodies are base64 appended in place.
func appendPage(b []byte, p *store.Page, key []byte) []byte {
	b = append(b, `{"moments":[`...)
	for i, m := range p.Moments {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":"`...)
		b = append(b, m.ID...)
		b = append(b, `","author":"`...)
		b = append(b, m.Author...)
		b = append(b, `","created_at":"`...)
		b = nah.AppendTime(b, m.CreatedAt)
		b = append(b, `","body":"`...)
		b = base64.StdEncoding.AppendEncode(b, m.Body)
		b = append(b, `"}`...)
	}
	b = append(b, `],"next":`...)
	if p.Next != nil {
		b = append(b, '"')
		b = append(b, nah.EncodeCursor(key, *p.Next)...)
		b = append(b, '"')
	} else {
		b = append(b, "null"...)
	}
	return append(b, "}\n"...)
}
