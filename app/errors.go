package app

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/nah-app/nah"
)

// statusOf maps each error kind to its one status.
var statusOf = map[nah.Code]int{
	nah.Invalid:      http.StatusBadRequest,
	nah.Unauthorized: http.StatusUnauthorized,
	nah.Forbidden:    http.StatusForbidden,
	nah.NotFound:     http.StatusNotFound,
	nah.Conflict:     http.StatusConflict,
	nah.TooLarge:     http.StatusRequestEntityTooLarge,
	nah.RateLimited:  http.StatusTooManyRequests,
	nah.Unavailable:  http.StatusServiceUnavailable,
	nah.Internal:     http.StatusInternalServerError,
}

// writeError is the one error path of the API: an *nah.Error becomes its
// status and SPEC body; anything else is a 500 whose text is logged, never
// sent.
func (a *App) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *nah.Error
	if !errors.As(err, &e) {
		a.log.Error("internal error", "method", r.Method, "route", routePattern(r), "err", err)
		e = nah.Errorf(nah.Internal, "", "something went wrong on the server")
	}
	if e.RetryAfter > 0 {
		secs := int((e.RetryAfter + 999_999_999) / 1_000_000_000)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	writeErrorBody(w, statusOf[e.Code], e.Reason, e.Message)
}

func writeErrorBody(w http.ResponseWriter, status int, code, message string) {
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	body.Error.Code, body.Error.Message = code, message
	writeJSON(w, status, body)
}

// writeJSON writes v with status. Small bodies only: the feed writes its own
// from a pooled buffer.
func writeJSON(w http.ResponseWriter, status int, v any) {
	out, err := json.Marshal(v)
	if err != nil {
		status, out = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"something went wrong on the server"}}`)
	}
	out = append(out, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(status)
	w.Write(out)
}

// decodeJSON reads one JSON object of at most limit bytes into v. Bodies are
// bounded before they are read; an oversized one is 413.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return nah.Errorf(nah.TooLarge, "body_too_large", "the request body is over %d bytes", limit)
		case errors.Is(err, io.EOF):
			return nah.Errorf(nah.Invalid, "invalid_json", "the request body is empty; a JSON object was expected")
		default:
			return nah.Errorf(nah.Invalid, "invalid_json", "the request body is not the JSON object expected")
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nah.Errorf(nah.TooLarge, "body_too_large", "the request body is over %d bytes", limit)
		}
		return nah.Errorf(nah.Invalid, "invalid_json", "the request body holds more than one JSON value")
	}
	return nil
}
