package app

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"time"

	"github.com/a-h/templ"

	"github.com/nah-app/nah"
)

// statusOf maps each error kind to its one status.
var statusOf = map[nah.Code]int{
	nah.Invalid:          http.StatusBadRequest,
	nah.Unauthorized:     http.StatusUnauthorized,
	nah.Forbidden:        http.StatusForbidden,
	nah.NotFound:         http.StatusNotFound,
	nah.MethodNotAllowed: http.StatusMethodNotAllowed,
	nah.Conflict:         http.StatusConflict,
	nah.TooLarge:         http.StatusRequestEntityTooLarge,
	nah.RateLimited:      http.StatusTooManyRequests,
	nah.Unavailable:      http.StatusServiceUnavailable,
	nah.Internal:         http.StatusInternalServerError,

	nah.InsufficientStorage:  http.StatusInsufficientStorage,
	nah.HeadersTooLarge:      http.StatusRequestHeaderFieldsTooLarge,
	nah.QuotaExceeded:        http.StatusRequestEntityTooLarge,
	nah.RangeNotSatisfiable:  http.StatusRequestedRangeNotSatisfiable,
	nah.PreconditionFailed:   http.StatusPreconditionFailed,
	nah.Unprocessable:        http.StatusUnprocessableEntity,
	nah.ChecksumMismatch:     460,
	nah.UnsupportedMediaType: http.StatusUnsupportedMediaType,
}

// errInternal is what a client sees of any error that is not an *nah.Error,
// or is one of kind Internal: the code and a fixed sentence, never the text.
var errInternal = nah.Errorf(nah.Internal, "", "something went wrong on the server")

// errClientLeft answers a request whose client went away before it was done.
var errClientLeft = nah.Errorf(nah.Unavailable, "canceled", "the request was canceled")

// respondError is the one error path, of the API and the console alike:
// err becomes its status, its Retry-After, and then either the SPEC's JSON
// body (view is nil) or the HTML page that view makes of it. Anything that
// is not an *nah.Error, or is of kind Internal, is logged with slog and
// answered with errInternal, so its text never reaches the client.
func (a *App) respondError(w http.ResponseWriter, r *http.Request, err error, view func(*nah.Error) templ.Component) {
	var e *nah.Error
	switch {
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client left (closed the connection or gave up waiting): no
		// one reads this answer, and it is not the server's fault to log.
		e = errClientLeft
	case !errors.As(err, &e) || e.Code == nah.Internal:
		a.log.Error("internal error", "method", methodLabel(r.Method), "route", routePattern(r), "err", err)
		e = errInternal
	}
	if e.RetryAfter > 0 || e.Code == nah.RateLimited {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(e.RetryAfter)))
	}
	status := statusOf[e.Code]
	if status == 0 {
		status = http.StatusInternalServerError // a kind added without its status
	}
	if view != nil {
		a.render(w, r, status, view(e))
		return
	}
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	body.Error.Code, body.Error.Message = cmp.Or(e.Reason, string(e.Code)), e.Message
	if reason := reasonOf[status]; reason != "" {
		out, _ := json.Marshal(body)
		if writeReasoned(w, status, reason, append(out, '\n')) {
			return
		}
	}
	writeJSON(w, status, body)
}

// reasonOf names the statuses that net/http has no text for, and so would
// send as "460 status code 460".
var reasonOf = map[int]string{460: "Checksum Mismatch"} // tus 1.0.0's

// writeReasoned writes an answer with its reason phrase on the connection
// itself, which then closes; false, having written nothing, where the
// connection cannot be taken over (HTTP/2, which has no reason phrases).
func writeReasoned(w http.ResponseWriter, status int, reason string, body []byte) bool {
	conn, bw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	defer conn.Close()
	for u := w; u != nil; { // for the metrics, which count by status
		if sw, ok := u.(*statusWriter); ok {
			sw.status = status
		}
		uw, ok := u.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		u = uw.Unwrap()
	}
	h := w.Header().Clone()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	h.Set("Connection", "close")
	fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\n", status, reason)
	h.Write(bw)
	bw.WriteString("\r\n")
	bw.Write(body)
	bw.Flush()
	return true
}

// retryAfterSeconds is the one Retry-After rule: whole seconds, rounded up
// so that a client that waits as told is never early, and at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// writeError answers an API request with err as the SPEC's JSON error.
func (a *App) writeError(w http.ResponseWriter, r *http.Request, err error) {
	a.respondError(w, r, err, nil)
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
// bounded before they are read; an oversized one is 413. A string field
// given a value of another kind, null included when the field is a
// jsonString, is 400 invalid_json naming the field.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	return decodeFrom(json.NewDecoder(r.Body), limit, v)
}

// decodeFrom is decodeJSON's decoding and its answers, from dec.
func decodeFrom(dec *json.Decoder, limit int64, v any) error {
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		var ute *json.UnmarshalTypeError
		switch {
		case errors.As(err, &mbe):
			return nah.Errorf(nah.TooLarge, "body_too_large", "the request body is over %d bytes", limit)
		case errors.Is(err, io.EOF):
			return nah.Errorf(nah.Invalid, "invalid_json", "the request body is empty; a JSON object was expected")
		case errors.As(err, &ute) && ute.Field != "" && ute.Type.Kind() == reflect.String && jsonKinds[ute.Value] != "":
			return nah.Errorf(nah.Invalid, "invalid_json", "%s must be a string, not %s", ute.Field, jsonKinds[ute.Value])
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

// jsonString is a string field of a request body that refuses null.
// encoding/json takes null for a plain string as if the field were absent,
// which hides a client's bug (a password it never set) behind the answer
// for a missing field, or behind none when the field is optional; with
// jsonString, "join_code": null is 400 "join_code must be a string, not
// null", while an absent join_code is still fine.
type jsonString string

// UnmarshalJSON is called by encoding/json for null too, unlike the
// decoding of a plain string. Its error is an UnmarshalTypeError, to which
// encoding/json adds the field's name for decodeJSON's message.
func (s *jsonString) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return &json.UnmarshalTypeError{Value: "null", Type: reflect.TypeFor[string]()}
	}
	return json.Unmarshal(b, (*string)(s))
}

// jsonKinds names the kinds of JSON value in UnmarshalTypeError.Value as
// decodeJSON's message says them.
var jsonKinds = map[string]string{"null": "null", "bool": "true or false", "number": "a number", "object": "an object", "array": "an array"}
