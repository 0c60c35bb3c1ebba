package nah

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
)

// Cursor is a position in a list of moments ordered newest first: the page
// after it holds moments strictly older than (At, ID). A position, not an
// offset, so posts arriving between two requests neither repeat nor skip.
type Cursor struct {
	At int64
	ID string
}

// Before reports whether a moment at (at, id) comes after the cursor in
// newest-first order, i.e. belongs to the next page.
func (c Cursor) Before(at int64, id string) bool {
	return CompareNewest(at, id, c.At, c.ID) > 0
}

// Newer reports whether a moment at (at, id) is newer than the cursor: on
// the side of it that after= asks for.
func (c Cursor) Newer(at int64, id string) bool {
	return CompareNewest(at, id, c.At, c.ID) < 0
}

// CompareNewest is the one order of moments everywhere (pages, cursors,
// heads): newest first by time, then by id, descending. It is negative when
// the moment (at, aid) comes before (bt, bid), zero when they are the same.
func CompareNewest(at int64, aid string, bt int64, bid string) int {
	switch {
	case at > bt:
		return -1
	case at < bt:
		return 1
	case aid > bid:
		return -1
	case aid < bid:
		return 1
	}
	return 0
}

// cursorMACLen is the truncated HMAC-SHA256 length: 96 bits is plenty to
// make a forged cursor a 400 and keeps the cursor short.
const cursorMACLen = 12

// EncodeCursor returns the opaque form of c, signed with key.
func EncodeCursor(key []byte, c Cursor) string {
	var raw [8 + 16 + cursorMACLen]byte
	binary.BigEndian.PutUint64(raw[:8], uint64(c.At))
	momentEnc.Decode(raw[8:24], []byte(c.ID))
	m := hmac.New(sha256.New, key)
	m.Write(raw[:24])
	copy(raw[24:], m.Sum(nil))
	return base64.RawURLEncoding.EncodeToString(raw[:])
}

// DecodeCursor parses and verifies s. Anything malformed or tampered with is
// an Invalid error.
func DecodeCursor(key []byte, s string) (Cursor, error) {
	bad := Errorf(Invalid, "invalid_cursor", "the cursor is not one this server made")
	var raw [8 + 16 + cursorMACLen]byte
	if base64.RawURLEncoding.DecodedLen(len(s)) != len(raw) {
		return Cursor{}, bad
	}
	if n, err := base64.RawURLEncoding.Strict().Decode(raw[:], []byte(s)); err != nil || n != len(raw) {
		return Cursor{}, bad
	}
	m := hmac.New(sha256.New, key)
	m.Write(raw[:24])
	if !hmac.Equal(m.Sum(nil)[:cursorMACLen], raw[24:]) {
		return Cursor{}, bad
	}
	c := Cursor{At: int64(binary.BigEndian.Uint64(raw[:8])), ID: momentEnc.EncodeToString(raw[8:24])}
	if c.At < 0 || !ValidMomentID(c.ID) {
		return Cursor{}, bad
	}
	return c, nil
}

// CheckPageLimit returns an Invalid error unless a page of n moments is
// allowed: 1 to FeedPageMax. The API's ?limit= and the store's Feed both
// ask it.
func CheckPageLimit(n int) error {
	if n < 1 || n > FeedPageMax {
		return Errorf(Invalid, "invalid_limit", "limit is a whole number from 1 to %d", FeedPageMax)
	}
	return nil
}
