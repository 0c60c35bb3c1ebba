package app

import (
	"bytes"
	"encoding/base64"
	"net/http"

	"github.com/nah-app/nah"
)

// handleMomentCreate stores an opaque body. The body limit applies to the
// decoded bytes; the request is bounded at the encoded size plus a little
// room for the JSON around it.
func (a *App) handleMomentCreate(w http.ResponseWriter, r *http.Request) {
	p := sessionOf(r).person
	idem, err := idemOf(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	max := a.cfg.MaxMomentBytes
	limit := base64.StdEncoding.EncodedLen(max) + 1024
	// While it is decoded the body is held as the request's buffer (grown
	// to at most twice the limit) and the decoded bytes: 4 times is a
	// bound with room; a request not in the one expected form costs more
	// (slowPostBody).
	if err := a.takeBulkOrOverloaded(4 * limit); err != nil {
		a.writeError(w, r, err)
		return
	}
	defer a.mem.give(int64(4 * limit))
	buf, err := readPost(w, r, int64(limit))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	defer putPost(buf)
	text, ok := fastPostBody(buf.Bytes())
	if !ok {
		if err := a.takeBulkOrOverloaded(3 * limit); err != nil {
			a.writeError(w, r, err)
			return
		}
		defer a.mem.give(int64(3 * limit))
		if text, err = slowPostBody(buf.Bytes(), int64(limit)); err != nil {
			a.writeError(w, r, err)
			return
		}
	}
	if len(text) == 0 {
		a.writeError(w, r, nah.Errorf(nah.Invalid, "missing_body", "a moment needs a non-empty base64 body"))
		return
	}
	// Go's decoder skips line breaks even when strict; the document's
	// pattern forbids them, and a body must come back as it was sent.
	body := make([]byte, base64.StdEncoding.DecodedLen(len(text)))
	n, err := base64.StdEncoding.Strict().Decode(body, text)
	if err != nil || bytes.ContainsAny(text, "\r\n") {
		a.writeError(w, r, nah.Errorf(nah.Invalid, "invalid_body", "the body is not standard padded base64"))
		return
	}
	body = body[:n]
	if len(body) > max {
		a.writeError(w, r, nah.Errorf(nah.TooLarge, "body_too_large", "a moment body is at most %d bytes", max))
		return
	}
	if idem == nil {
		m, err := a.store.CreateMoment(r.Context(), p.ID, body)
		if err != nil {
			a.writeMLSError(w, r, err)
			return
		}
		writeJSON(w, http.StatusCreated, postedMoment(m))
		return
	}
	idem.Hash = idemHash("POST /moments", body)
	m, replay, err := a.store.CreateMomentOnce(r.Context(), p.ID, body, idem)
	if err != nil {
		a.writeMLSError(w, r, err)
		return
	}
	if replay != nil {
		writeCreated(w, replay, true)
		return
	}
	writeCreated(w, answerJSON(m), false)
}

// postedMoment is the 201 answer to a post: the moment without its body.
// A struct, not a map: the same JSON (a map's keys are sorted) without the
// map's sort.
func postedMoment(m nah.Moment) postedJSON {
	return postedJSON{m.Author, nah.FormatTime(m.CreatedAt), m.ID}
}

type postedJSON struct {
	Author    string `json:"author"`
	CreatedAt string `json:"created_at"`
	ID        string `json:"id"`
}

// handleMomentDelete deletes one's own moment. Someone else's is 404, the
// same as a missing one.
func (a *App) handleMomentDelete(w http.ResponseWriter, r *http.Request) {
	if err := a.store.DeleteMoment(r.Context(), sessionOf(r).person.ID, pathParam(r, "id")); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
