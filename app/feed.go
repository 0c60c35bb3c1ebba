package app

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// The feed's read, newest poster first, is the store's (store/feed.go):
// here a page is only parsed from the query and written as JSON.

// parsePage reads ?before=, ?after= and ?limit=.
func (a *App) parsePage(r *http.Request) (before, after *nah.Cursor, limit int, err error) {
	q := r.URL.Query()
	limit = nah.FeedPageDefault
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			n = 0 // not a number: refused below like any other bad limit
		}
		if err := nah.CheckPageLimit(n); err != nil {
			return nil, nil, 0, err
		}
		limit = n
	}
	for _, p := range []struct {
		name string
		c    **nah.Cursor
	}{{"before", &before}, {"after", &after}} {
		if s := q.Get(p.name); s != "" {
			c, err := nah.DecodeCursor(a.store.CursorKey(), s)
			if err != nil {
				return nil, nil, 0, err
			}
			*p.c = &c
		}
	}
	return before, after, limit, nil
}

// handleFeed serves the feed of the signed-in person.
func (a *App) handleFeed(w http.ResponseWriter, r *http.Request) {
	a.servePage(w, r, sessionOf(r).person.ID, true)
}

// handlePersonMoments serves one person's moments to themselves or a
// connection; to anyone else the person does not exist.
func (a *App) handlePersonMoments(w http.ResponseWriter, r *http.Request) {
	me, id := sessionOf(r).person.ID, pathParam(r, "id")
	if ok, err := a.mayRead(r, me, id); err != nil || !ok {
		if err == nil {
			err = nah.ErrNoPerson()
		}
		a.writeError(w, r, err)
		return
	}
	a.servePage(w, r, id, false)
}

// mayRead reports whether me may read person id's moments and media:
// they are themselves or connected.
func (a *App) mayRead(r *http.Request, me, id string) (bool, error) {
	if !nah.ValidPersonID(id) {
		return false, nil
	}
	if id == me {
		return true, nil
	}
	return a.store.Connected(r.Context(), me, id)
}

func (a *App) servePage(w http.ResponseWriter, r *http.Request, id string, circle bool) {
	before, after, limit, err := a.parsePage(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	// A refresh shows only what is older than the settling horizon (a post
	// in progress, or this millisecond), and a page's refresh cursor is its
	// newest moment older than it: nothing can appear below it later, so a
	// refresh from it misses nothing and repeats nothing.
	horizon := a.store.Horizon()
	settled := nah.Cursor{At: horizon}
	if after != nil && (before == nil || settled.Newer(before.At, before.ID, before.Author)) {
		before = &settled
	}
	// The page's bodies read from files are taken from the memory budget as
	// they are read, and held until the page is written: a slow client holds
	// them, and only them, for as long as it reads. (Streaming them from
	// SQLite instead would hold the author's only connection, and so their
	// posts, for as long as the slowest reader.)
	if err := a.takeOrOverloaded(pageWriterSize); err != nil {
		a.writeError(w, r, err)
		return
	}
	defer a.mem.give(pageWriterSize)
	p := store.NewPage()
	defer p.Release()
	p.Take = a.takeBulkOrOverloaded
	defer func() { a.mem.give(int64(p.Taken())) }()
	if err := a.store.FeedRange(r.Context(), id, circle, before, after, limit, p); err != nil {
		a.writeError(w, r, err)
		return
	}
	var cursor, refresh []byte
	if p.Next != nil {
		cursor = []byte(nah.EncodeCursor(a.store.CursorKey(), *p.Next))
	}
	for _, m := range p.Moments {
		if m.CreatedAt < horizon {
			refresh = []byte(nah.EncodeCursor(a.store.CursorKey(), nah.Cursor{At: m.CreatedAt, ID: m.ID, Author: m.Author}))
			break
		}
	}
	etag := pageETag(p, cursor, refresh)
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "private, no-cache")
	if etagMatches(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(pageLen(p, cursor, refresh)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return // net/http would drop the page: no need to encode it
	}
	pw := pageWriters.Get().(*pageWriter)
	defer pageWriters.Put(pw)
	pw.Reset(w)
	writePage(pw, p, cursor, refresh)
	pw.Flush()
	pw.Reset(nil)
}

// pageETag is the page's strong validator: a hash of its moments' ids and
// authors and of its two cursors. A moment never changes once posted (it
// can only be deleted), so these name the page's bytes exactly: a post, a
// delete or a disconnect that changes the page changes its ETag, and
// nothing else does. It costs a sha256 of ~60 bytes a moment, no body.
func pageETag(p *store.Page, cursor, refresh []byte) string {
	h := sha256.New()
	for _, m := range p.Moments {
		h.Write([]byte(m.ID))
		h.Write([]byte(m.Author))
	}
	h.Write([]byte{0})
	h.Write(cursor)
	h.Write([]byte{0})
	h.Write(refresh)
	var sum [sha256.Size]byte
	return `"` + base64.RawURLEncoding.EncodeToString(h.Sum(sum[:0])[:18]) + `"`
}

// etagMatches reports whether an If-None-Match header names etag: "*", or
// one of its comma-separated tags, compared weakly (RFC 9110 13.1.2).
func etagMatches(header, etag string) bool {
	for t := range strings.SplitSeq(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

// A page is written through a small pooled buffer, never built whole: a
// page of 100 moments of 64 KiB is 8.7 MB of JSON.
type pageWriter struct {
	*bufio.Writer
	scratch []byte // base64 of one chunk of a body
}

var pageWriters = sync.Pool{New: func() any {
	return &pageWriter{Writer: bufio.NewWriterSize(nil, pageWriterSize), scratch: make([]byte, 0, base64.StdEncoding.EncodedLen(bodyChunk))}
}}

// bodyChunk is how much of a body is encoded at a time: a multiple of 3,
// so that no chunk but the last has padding.
const bodyChunk = 3 << 10

// The fixed parts of a page. Ids are base32 and times fixed format, so
// nothing needs escaping, and bodies are base64.
const (
	pageStart    = `{"moments":[`
	itemID       = `{"id":"`
	itemAuthor   = `","author":"`
	itemTime     = `","created_at":"`
	itemBody     = `","body":"`
	itemEnd      = `"}`
	itemEpoch    = `","epoch":`
	pageNext     = `],"next":`
	pageNoNext   = `null`
	pageRefresh  = `,"refresh":`
	pageEnd      = "}\n"
	timeLen      = len(nah.TimeFormat)
	itemFixedLen = len(itemID) + len(itemAuthor) + len(itemTime) + timeLen + len(itemBody) + len(itemEnd)
)

// pageLen is the exact length of the JSON writePage writes, so that the
// page has a Content-Length although it is streamed.
func pageLen(p *store.Page, cursor, refresh []byte) int {
	n := len(pageStart) + len(pageNext) + len(pageEnd)
	if cursor != nil {
		n += len(cursor) + 2
	} else {
		n += len(pageNoNext)
	}
	if refresh != nil { // absent rather than null: an empty page stays SPEC's
		n += len(pageRefresh) + len(refresh) + 2
	}
	for i, m := range p.Moments {
		if i > 0 {
			n++
		}
		n += itemFixedLen + len(m.ID) + len(m.Author) + base64.StdEncoding.EncodedLen(len(m.Body))
		if e, ok := store.MomentEpoch(m.Author, m.Body); ok {
			n += len(itemEpoch) + len(strconv.AppendUint(nil, e, 10)) - 1 // "} is }
		}
	}
	return n
}

// writePage writes the page JSON by hand.
func writePage(w *pageWriter, p *store.Page, cursor, refresh []byte) {
	w.WriteString(pageStart)
	var t [len(nah.TimeFormat)]byte
	for i, m := range p.Moments {
		if i > 0 {
			w.WriteByte(',')
		}
		w.WriteString(itemID)
		w.WriteString(m.ID)
		w.WriteString(itemAuthor)
		w.WriteString(m.Author)
		w.WriteString(itemTime)
		w.Write(nah.AppendTime(t[:0], m.CreatedAt))
		w.WriteString(itemBody)
		for b := m.Body; len(b) > 0; {
			k := min(len(b), bodyChunk)
			w.scratch = base64.StdEncoding.AppendEncode(w.scratch[:0], b[:k])
			w.Write(w.scratch)
			b = b[k:]
		}
		if e, ok := store.MomentEpoch(m.Author, m.Body); ok {
			// An MLS moment (store/mls_moment.go): the epoch whose
			// secret opens it.
			w.WriteString(itemEpoch)
			w.Write(strconv.AppendUint(t[:0], e, 10))
			w.WriteByte('}')
			continue
		}
		w.WriteString(itemEnd)
	}
	w.WriteString(pageNext)
	writeCursor(w, cursor)
	if refresh != nil {
		w.WriteString(pageRefresh)
		writeCursor(w, refresh)
	}
	w.WriteString(pageEnd)
}

// writeCursor writes c as a JSON string, or null when it is nil.
func writeCursor(w *pageWriter, c []byte) {
	if c == nil {
		w.WriteString(pageNoNext)
		return
	}
	w.WriteByte('"')
	w.Write(c)
	w.WriteByte('"')
}
