// Package nah holds the vocabulary of the nah server: the domain types
// (Person, Moment, Connection, Cursor), their validation, identifiers, the
// wire format of times, and the one error type every layer returns.
//
// It imports only the standard library; store, app and cmd all point here.
package nah

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"io"
	"time"
)

// Limits of the domain. They are constants, not configuration, because the
// phone apps depend on them.
const (
	MaxConnections   = 150 // per person, both sides of every connection
	FeedPageDefault  = 30
	FeedPageMax      = 100
	HandleMinLen     = 3
	HandleMaxLen     = 32
	PasswordMinBytes = 8
	PasswordMaxBytes = 256
	// DefaultMaxMomentBytes bounds a decoded moment body.
	DefaultMaxMomentBytes = 64 << 10
	// InviteTTL is how long a connection invite can be redeemed.
	InviteTTL = 7 * 24 * time.Hour
	// DefaultMaxMediaBytes bounds one uploaded media file (SPEC section 2),
	// and DefaultQuotaBytes what one person may store, database and media.
	DefaultMaxMediaBytes = 25 << 20
	DefaultQuotaBytes    = 2 << 30
	// MediaChargeBytes is the least one media counts against the quota,
	// whatever its size: a file costs a row, a folder entry and an inode
	// beside its bytes, so 1-byte files cannot hold the disk for free.
	MediaChargeBytes = 4 << 10
	// MaxMediaCount bounds a person's media, wherever they come from
	// (uploads, resumable uploads, an import): every walk of them is then
	// bounded too. 2 GiB of quota at 20 KB a photo is 100,000.
	MaxMediaCount = 100_000
)

// MediaCharge is what a media of size bytes counts against the quota.
func MediaCharge(size int64) int64 { return max(size, MediaChargeBytes) }

// Person is an account. Its id is made by the server and is the only thing
// that ever becomes part of a path.
type Person struct {
	ID        string
	Handle    string
	CreatedAt int64 // unix milliseconds
	Disabled  bool
	NewestAt  int64 // unix milliseconds of the newest moment, 0 for none
}

// Moment is an opaque body posted by Author. The server never reads Body.
type Moment struct {
	ID        string
	Author    string
	CreatedAt int64 // unix milliseconds, server clock
	Body      []byte
}

// Connection is one side of a mutual connection, seen from a person.
type Connection struct {
	ID          string // the other person
	Handle      string
	ConnectedAt int64
	NewestAt    int64
}

// Media is one uploaded file of Owner's: opaque bytes (phones encrypt
// them), kept under the owner's folder. Moments refer to media only inside
// their encrypted bodies, which the server never reads.
type Media struct {
	ID          string
	Owner       string
	Size        int64
	SHA256      string // lowercase hex
	ContentType string // as uploaded, a valid media type
	CreatedAt   int64  // unix milliseconds, server clock
}

// TimeFormat is the one wire format of times: UTC with exactly three digits
// of milliseconds. (time.RFC3339Nano drops trailing zeros.)
const TimeFormat = "2006-01-02T15:04:05.000Z"

// FormatTime formats unix milliseconds in TimeFormat.
func FormatTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(TimeFormat)
}

// AppendTime appends FormatTime(ms) to b without allocating.
func AppendTime(b []byte, ms int64) []byte {
	return time.UnixMilli(ms).UTC().AppendFormat(b, TimeFormat)
}

// Person ids are 128 random bits in lowercase base32 (26 characters of
// a-z and 2-7): unguessable, URL-safe and safe as a directory name.
var personEnc = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Moment ids are 48 bits of milliseconds and 80 random bits in lowercase
// base32hex, whose alphabet sorts in the same order as the bytes, so ids of
// one author sort by time.
var momentEnc = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// IDLen is the length of every person and moment id.
const IDLen = 26

// NewPersonID returns a fresh random person id.
func NewPersonID() string { return PersonIDFrom(rand.Reader) }

// PersonIDFrom makes a person id from 16 bytes of r: a seeded source makes
// deterministic fixtures.
func PersonIDFrom(r io.Reader) string {
	var b [16]byte
	io.ReadFull(r, b[:])
	return personEnc.EncodeToString(b[:])
}

// NewMomentID returns a fresh moment id that starts with the time ms.
func NewMomentID(ms int64) string { return MomentIDFrom(ms, rand.Reader) }

// MomentIDFrom makes a moment id for time ms from 10 bytes of r.
func MomentIDFrom(ms int64, r io.Reader) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(ms)<<16)
	io.ReadFull(r, b[6:])
	return momentEnc.EncodeToString(b[:])
}

// ValidPersonID reports whether s has the exact shape of a person id. It is
// checked before an id touches a path or a query.
func ValidPersonID(s string) bool {
	return validID(s, personEnc)
}

// ValidMomentID reports whether s has the exact shape of a moment id.
func ValidMomentID(s string) bool {
	return validID(s, momentEnc)
}

// NewMediaID returns a fresh media id: the shape of a moment id (time
// first, then 80 random bits), made by the server only, and the one thing
// of a media file that becomes part of a path.
func NewMediaID(ms int64) string { return MomentIDFrom(ms, rand.Reader) }

// ValidMediaID reports whether s has the exact shape of a media id. It is
// checked before an id touches a path or a query: anything else ("..",
// slashes, other spellings) is simply not found.
func ValidMediaID(s string) bool {
	return validID(s, momentEnc)
}

func validID(s string, enc *base32.Encoding) bool {
	if len(s) != IDLen {
		return false
	}
	var b [16]byte
	n, err := enc.Decode(b[:], []byte(s))
	// 26 characters carry 130 bits; the last two must be zero so that each
	// id has exactly one spelling.
	return err == nil && n == 16 && enc.EncodeToString(b[:]) == s
}

// ValidHandle reports whether h is 3 to 32 characters of a-z, 0-9, '.', '_'
// and '-'.
func ValidHandle(h string) bool {
	if len(h) < HandleMinLen || len(h) > HandleMaxLen {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// CheckHandle returns an Invalid error naming the rule when h is not a
// valid handle. People's handles and admins' names follow the same rule.
func CheckHandle(h string) error {
	if !ValidHandle(h) {
		return Errorf(Invalid, "invalid_handle", "a handle is 3 to 32 characters of a-z, 0-9, '.', '_' and '-'")
	}
	return nil
}

// CheckPassword returns an Invalid error naming the rule when password is
// shorter than 8 or longer than 256 bytes. Longer passwords are refused,
// never truncated.
func CheckPassword(password string) error {
	if len(password) < PasswordMinBytes || len(password) > PasswordMaxBytes {
		return Errorf(Invalid, "invalid_password", "a password is 8 to 256 bytes")
	}
	return nil
}

// CheckSignup validates a handle and password pair for a new account.
func CheckSignup(handle, password string) error {
	if err := CheckHandle(handle); err != nil {
		return err
	}
	return CheckPassword(password)
}

// MomentTime is the time in milliseconds a moment id begins with
// (MomentIDFrom); ok is false for a string that is not a moment id.
func MomentTime(id string) (ms int64, ok bool) {
	var b [16]byte
	if !ValidMomentID(id) {
		return 0, false
	}
	momentEnc.Decode(b[:], []byte(id))
	return int64(binary.BigEndian.Uint64(b[:8]) >> 16), true
}

// MomentIDCeiling sorts above every moment id: 'v' is the last digit.
const MomentIDCeiling = "w"

// MomentIDFloor is the smallest moment id of time ms: every id of an
// earlier time sorts below it, every id of ms or later at or above it.
func MomentIDFloor(ms int64) string {
	switch {
	case ms <= 0:
		return ""
	case ms >= 1<<48:
		return MomentIDCeiling
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(ms)<<16)
	return momentEnc.EncodeToString(b[:])
}
