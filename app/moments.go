package app

import (
	"encoding/base64"
	"net/http"
	"strings"

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
	var in struct {
		Body jsonString `json:"body"`
	}
	limit := base64.StdEncoding.EncodedLen(max) + 1024
	// While it is decoded the body is held as the JSON decoder's buffer
	// (which grows to about 1.5 times the body, its smaller steps left as
	// garbage), the base64 string and the decoded bytes: 4 times is a
	// bound with room.
	if err := a.takeBulkOrOverloaded(4 * limit); err != nil {
		a.writeError(w, r, err)
		return
	}
	defer a.mem.give(int64(4 * limit))
	if err := decodeJSON(w, r, int64(limit), &in); err != nil {
		a.writeError(w, r, err)
		return
	}
	if in.Body == "" {
		a.writeError(w, r, nah.Errorf(nah.Invalid, "missing_body", "a moment needs a non-empty base64 body"))
		return
	}
	// Go's decoder skips line breaks even when strict; the document's
	// pattern forbids them, and a body must come back as it was sent.
	body, err := base64.StdEncoding.Strict().DecodeString(string(in.Body))
	if err != nil || strings.ContainsAny(string(in.Body), "\r\n") {
		a.writeError(w, r, nah.Errorf(nah.Invalid, "invalid_body", "the body is not standard padded base64"))
		return
	}
	if len(body) > max {
		a.writeError(w, r, nah.Errorf(nah.TooLarge, "body_too_large", "a moment body is at most %d bytes", max))
		return
	}
	if idem == nil {
		m, err := a.store.CreateMoment(r.Context(), p.ID, body)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusCreated, postedMoment(m))
		return
	}
	idem.Hash = idemHash("POST /moments", body)
	m, replay, err := a.store.CreateMomentOnce(r.Context(), p.ID, body, idem)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if replay != nil {
		writeCreated(w, replay, true)
		return
	}
	writeCreated(w, answerJSON(m), false)
}

// postedMoment is the 201 answer to a post: the moment without its body.
func postedMoment(m nah.Moment) map[string]string {
	return map[string]string{"id": m.ID, "author": m.Author, "created_at": nah.FormatTime(m.CreatedAt)}
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
