package nah

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
)

// Cursor is a position in a list of moments ordered newest first: the page
// after it holds moments strictly older than (At, ID, Author). A position,
// not an offset, so posts arriving between two requests neither repeat nor
// skip. Author breaks ties: an import keeps moment ids and times, so two
// people's moments can share (At, ID). A cursor without an author (made
// before cursors had one, or the settling horizon) stands for every moment
// at (At, ID): neither side of it holds them, as before.
type Cursor struct {
	At     int64
	ID     string
	Author string
}

// Before reports whether a moment at (at, id) by author comes after the
// cursor in newest-first order, i.e. belongs to the next page.
func (c Cursor) Before(at int64, id, author string) bool {
	if c.Author == "" {
		return CompareNewest(at, id, "", c.At, c.ID, "") > 0
	}
	return CompareNewest(at, id, author, c.At, c.ID, c.Author) > 0
}

// Newer reports whether a moment at (at, id) by author is newer than the
// cursor: on the side of it that after= asks for.
func (c Cursor) Newer(at int64, id, author string) bool {
	if c.Author == "" {
		return CompareNewest(at, id, "", c.At, c.ID, "") < 0
	}
	return CompareNewest(at, id, author, c.At, c.ID, c.Author) < 0
}

// Inclusive reports whether, in author's own file, the moment at exactly
// (c.At, c.ID) is on the side of c that newer asks for (newer = true:
// after=; false: before=). It is how a file's query, which knows no
// author, applies the tie-break: `<=` instead of `<`.
func (c Cursor) Inclusive(author string, newer bool) bool {
	if c.Author == "" || author == c.Author {
		return false
	}
	return newer == (author > c.Author)
}

// CompareNewest is the one order of moments everywhere (pages, cursors,
// heads): newest first by time, then by id, then by author, descending. It
// is negative when the moment (at, aid, aauthor) comes before (bt, bid,
// bauthor), zero when they are the same.
func CompareNewest(at int64, aid, aauthor string, bt int64, bid, bauthor string) int {
	switch {
	case at > bt:
		return -1
	case at < bt:
		return 1
	case aid > bid:
		return -1
	case aid < bid:
		return 1
	case aauthor > bauthor:
		return -1
	case aauthor < bauthor:
		return 1
	}
	return 0
}

// cursorMACLen is the truncated HMAC-SHA256 length: 96 bits is plenty to
// make a forged cursor a 400 and keeps the cursor short.
const cursorMACLen = 12

// A cursor is 8 bytes of time, 16 of moment id, 16 of author (absent from
// cursors made before the tie-break, which still decode) and the MAC, in
// unpadded base64url: 70 characters, 48 without an author.
const (
	cursorShort = 8 + 16 + cursorMACLen
	cursorLong  = 8 + 16 + 16 + cursorMACLen
)

// EncodeCursor returns the opaque form of c, signed with key: the short
// form when c has no author.
func EncodeCursor(key []byte, c Cursor) string {
	var raw [cursorLong]byte
	binary.BigEndian.PutUint64(raw[:8], uint64(c.At))
	momentEnc.Decode(raw[8:24], []byte(c.ID))
	n := 24
	if c.Author != "" {
		personEnc.Decode(raw[24:40], []byte(c.Author))
		n = 40
	}
	m := hmac.New(sha256.New, key)
	m.Write(raw[:n])
	copy(raw[n:], m.Sum(nil))
	return base64.RawURLEncoding.EncodeToString(raw[:n+cursorMACLen])
}

// DecodeCursor parses and verifies s. Anything malformed or tampered with is
// an Invalid error.
func DecodeCursor(key []byte, s string) (Cursor, error) {
	bad := Errorf(Invalid, "invalid_cursor", "the cursor is not one this server made")
	var raw [cursorLong]byte
	size := base64.RawURLEncoding.DecodedLen(len(s))
	if size != cursorShort && size != cursorLong {
		return Cursor{}, bad
	}
	if n, err := base64.RawURLEncoding.Strict().Decode(raw[:], []byte(s)); err != nil || n != size {
		return Cursor{}, bad
	}
	n := size - cursorMACLen
	m := hmac.New(sha256.New, key)
	m.Write(raw[:n])
	if !hmac.Equal(m.Sum(nil)[:cursorMACLen], raw[n:size]) {
		return Cursor{}, bad
	}
	c := Cursor{At: int64(binary.BigEndian.Uint64(raw[:8])), ID: momentEnc.EncodeToString(raw[8:24])}
	if n == 40 {
		c.Author = personEnc.EncodeToString(raw[24:40])
		if !ValidPersonID(c.Author) {
			return Cursor{}, bad
		}
	}
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

// IDBound turns the bound (at, id) in the order of CompareNewest into the
// same bound on the ids of one file, whose moments' times are their ids'
// (MomentTime): a moment is older than (at, id), or at it too when
// orEqual, exactly when its id is below bound, or equal to it too when eq.
// A bound whose id is not of time at (the settling horizon's) still splits
// the ids exactly, at the floor of at or of the next millisecond.
func IDBound(at int64, id string, orEqual bool) (bound string, eq bool) {
	if at >= 1<<48 {
		return MomentIDCeiling, false
	}
	if lo := MomentIDFloor(at); id < lo {
		return lo, false
	}
	if hi := MomentIDFloor(at + 1); id >= hi {
		return hi, false
	}
	return id, orEqual
}
