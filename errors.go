package nah

import (
	"errors"
	"fmt"
	"time"
)

// Code is the kind of an Error. The set is small on purpose: the HTTP layer
// maps each to exactly one status, and nothing else decides a status.
type Code string

// The error kinds. Internal is never shown to a client beyond its code.
const (
	Invalid      Code = "invalid"      // 400: malformed input
	Unauthorized Code = "unauthorized" // 401: no or bad credentials
	Forbidden    Code = "forbidden"    // 403: known caller, wrong secret (DELETE /me)
	NotFound     Code = "not_found"    // 404: missing, or not allowed to see
	Conflict     Code = "conflict"     // 409: handle taken, cap reached
	TooLarge     Code = "too_large"    // 413: over a size limit
	RateLimited  Code = "rate_limited" // 429: slow down, see RetryAfter
	Unavailable  Code = "unavailable"  // 503: overloaded, shutting down, or a file that cannot be read
	Internal     Code = "internal"     // 500: a bug, or a failure no other kind names

	// InsufficientStorage is a write refused because the disk is full;
	// reads go on, and writes work again once there is space.
	InsufficientStorage Code = "insufficient_storage" // 507

	// HeadersTooLarge is a request whose header is over the SPEC's 16 KiB
	// (app/headers.go counts it); refused before any other work.
	HeadersTooLarge Code = "headers_too_large" // 431

	// QuotaExceeded is an upload that would take a person's storage past
	// their quota (NAH_QUOTA_BYTES): 413 like any other size limit, with a
	// code of its own so that a phone can tell "delete something" from
	// "send a smaller file".
	QuotaExceeded Code = "quota_exceeded" // 413

	// RangeNotSatisfiable is a download whose Range selects no byte of the
	// file (app/media.go answers it with Content-Range: bytes */size).
	RangeNotSatisfiable Code = "range_not_satisfiable" // 416

	// PreconditionFailed is a download whose If-Match names another
	// version of the file (app/media.go).
	PreconditionFailed Code = "precondition_failed" // 412

	// MethodNotAllowed is the router's answer, never a handler's: the path
	// is a route, but not with this method. It is a kind of its own because
	// HTTP has one status for it, 405 (with an Allow header).
	MethodNotAllowed Code = "method_not_allowed" // 405

	// Unprocessable is a well-formed request that cannot be taken as it
	// stands: an Idempotency-Key sent again with a different request.
	Unprocessable Code = "unprocessable" // 422

	// ChecksumMismatch is a resumable upload's piece, or whole file, whose
	// sum is not the one the client declared: 460, tus 1.0's status for it.
	ChecksumMismatch Code = "checksum_mismatch" // 460

	// UnsupportedMediaType is a resumable upload's piece not sent as
	// application/offset+octet-stream, as tus 1.0 asks.
	UnsupportedMediaType Code = "unsupported_media_type" // 415
)

// Error is the one error type that crosses package lines. Reason is the
// snake_case code a client sees (it defaults to Code); Message is a human
// sentence that is safe to show.
type Error struct {
	Code       Code
	Reason     string
	Message    string
	RetryAfter time.Duration
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf makes an *Error of kind code, with reason as the client-visible code.
func Errorf(code Code, reason, format string, args ...any) *Error {
	if reason == "" {
		reason = string(code)
	}
	return &Error{Code: code, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the Code of err, or Internal when err is not an *Error.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// ErrNoPerson is the answer for a person who does not exist, or whom the
// caller may not see: the two read the same, so nobody learns who exists.
func ErrNoPerson() *Error { return Errorf(NotFound, "", "no such person") }
