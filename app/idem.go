package app

import (
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// Idempotency keys: POST /moments and POST /media take an
// Idempotency-Key header. The key, the hash of what was asked and the first
// answer are committed with the write in the person's file (store/person_idem.go),
// so a retry with the same key and the same request gets the first answer,
// marked Idempotent-Replayed: true, and writes nothing, after any crash;
// the same key with another request is 422.

// idemOf reads the Idempotency-Key header for route: nil without one, 400
// for a key that is not 1 to 255 printable ASCII bytes. The hash is set by
// the caller once it knows the request's body (idemHash).
func idemOf(r *http.Request) (*store.Idem, error) {
	k, ok := r.Header["Idempotency-Key"]
	if !ok {
		return nil, nil
	}
	if len(k) != 1 || !store.ValidIdemKey(k[0]) {
		return nil, nah.Errorf(nah.Invalid, "invalid_idempotency_key", "Idempotency-Key is one header of 1 to %d printable ASCII characters (a UUID will do)", store.MaxIdemKey)
	}
	return &store.Idem{Key: k[0], Answer: answerJSON}, nil
}

// idemHash is the sha256 of a route and the parts of its request.
func idemHash(route string, parts ...[]byte) []byte {
	h := sha256.New()
	h.Write([]byte(route))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(strconv.Itoa(len(p))))
		h.Write([]byte{0})
		h.Write(p)
	}
	return h.Sum(nil)
}

// answerJSON is the 201 body of what a keyed write created, as writeJSON
// would write it.
func answerJSON(created any) []byte {
	var v any
	switch c := created.(type) {
	case nah.Moment:
		v = postedMoment(c)
	case nah.Media:
		v = mediaJSON{c.ID, c.Size, c.SHA256, c.ContentType, nah.FormatTime(c.CreatedAt)}
	}
	out, _ := json.Marshal(v)
	return append(out, '\n')
}

// writeCreated writes a keyed write's 201: answer, the first one's or a
// replay of it.
func writeCreated(w http.ResponseWriter, answer []byte, replayed bool) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(answer)))
	if replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(http.StatusCreated)
	w.Write(answer)
}

// inFlight holds the keys of keyed uploads running in this process, so
// that a retry sent while the first is still streaming is refused at once
// (409, Retry-After 1) instead of streaming the file a second time. A
// retry that gets past it (another instance) still writes nothing: the
// key's row is checked in the write's transaction.
type inFlight struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// take claims key of person, or says it is taken.
func (f *inFlight) take(person, key string) (release func(), err error) {
	k := person + "\x00" + key
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, busy := f.keys[k]; busy {
		e := nah.Errorf(nah.Conflict, "idempotency_key_in_use", "a request with this Idempotency-Key is still running: retry after it")
		e.RetryAfter = time.Second
		return nil, e
	}
	if f.keys == nil {
		f.keys = make(map[string]struct{})
	}
	f.keys[k] = struct{}{}
	return func() {
		f.mu.Lock()
		delete(f.keys, k)
		f.mu.Unlock()
	}, nil
}
