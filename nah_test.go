package nah

import (
	"strings"
	"testing"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func TestCursorRoundTrip(t *testing.T) {
	for _, c := range []Cursor{
		{At: 1_780_000_000_123, ID: NewMomentID(1_780_000_000_123), Author: NewPersonID()},
		{At: 1_780_000_000_123, ID: NewMomentID(1_780_000_000_123)}, // as before the author
	} {
		s := EncodeCursor(testKey, c)
		if want := map[bool]int{true: 70, false: 48}[c.Author != ""]; len(s) != want {
			t.Errorf("%+v: %d characters, want %d", c, len(s), want)
		}
		got, err := DecodeCursor(testKey, s)
		if err != nil || got != c {
			t.Fatalf("round trip: %+v, %v", got, err)
		}
		if _, err := DecodeCursor([]byte("another key, another server....."), s); ErrorCode(err) != Invalid {
			t.Fatalf("cursor accepted under another key: %v", err)
		}
	}
}

// TestCursorTies: two moments at the same (time, id) by two authors are
// two positions; a cursor without an author stands for both.
func TestCursorTies(t *testing.T) {
	id, a, b := NewMomentID(5), "a"+NewPersonID()[1:], "b"+NewPersonID()[1:]
	at := Cursor{At: 5, ID: id, Author: b}
	if !at.Before(5, id, a) || at.Before(5, id, b) || at.Newer(5, id, a) || at.Newer(5, id, b) {
		t.Error("b's cursor: a's copy is after it, b's own is on neither side")
	}
	if !(Cursor{At: 5, ID: id, Author: a}).Newer(5, id, b) {
		t.Error("a's cursor: b's copy is newer")
	}
	old := Cursor{At: 5, ID: id}
	if old.Before(5, id, a) || old.Newer(5, id, b) || !old.Before(4, id, b) || !old.Newer(6, id, a) {
		t.Error("an authorless cursor: both copies on neither side, the rest by time")
	}
	if !at.Inclusive(a, false) || at.Inclusive(a, true) || at.Inclusive(b, false) || old.Inclusive(a, false) {
		t.Error("Inclusive disagrees with Before and Newer")
	}
}

func TestIDs(t *testing.T) {
	p := NewPersonID()
	if !ValidPersonID(p) || ValidMomentID(strings.Repeat("w", IDLen)) {
		t.Fatalf("person id %q", p)
	}
	a, b := NewMomentID(1000), NewMomentID(1001)
	if !ValidMomentID(a) || !(a < b) {
		t.Fatalf("moment ids %q %q: want valid and time-ordered", a, b)
	}
	for _, bad := range []string{"", "..", "../../etc/passwd", strings.Repeat("a", 27), strings.ToUpper(p), p[:25] + "/", "☃☃☃☃☃☃☃☃☃☃☃☃☃"} {
		if ValidPersonID(bad) || ValidMomentID(bad) {
			t.Errorf("%q accepted as an id", bad)
		}
	}
}

func TestFormatTime(t *testing.T) {
	if got := FormatTime(1_780_000_000_000); got != "2026-05-28T20:26:40.000Z" {
		t.Fatalf("FormatTime: %s", got)
	}
	if got := string(AppendTime(nil, 1_780_000_000_120)); got != "2026-05-28T20:26:40.120Z" {
		t.Fatalf("AppendTime: %s", got)
	}
}

func TestValidHandle(t *testing.T) {
	for h, want := range map[string]bool{
		"ann": true, "a.b_c-d": true, "ab": false, strings.Repeat("a", 32): true, strings.Repeat("a", 33): false,
		"Ann": false, "an n": false, "ann/": false, "änn": false, "": false,
	} {
		if ValidHandle(h) != want {
			t.Errorf("ValidHandle(%q) = %v", h, !want)
		}
	}
}

// FuzzDecodeCursor: any string either fails as Invalid or decodes to a
// cursor that encodes back to exactly the same string.
func FuzzDecodeCursor(f *testing.F) {
	f.Add(EncodeCursor(testKey, Cursor{At: 1, ID: NewMomentID(1)}))
	f.Add(EncodeCursor(testKey, Cursor{At: 1, ID: NewMomentID(1), Author: NewPersonID()}))
	f.Add("")
	f.Add("AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := DecodeCursor(testKey, s)
		if err != nil {
			if ErrorCode(err) != Invalid {
				t.Fatalf("error of kind %v", ErrorCode(err))
			}
			return
		}
		if EncodeCursor(testKey, c) != s {
			t.Fatalf("%q decoded to %+v, which encodes differently", s, c)
		}
	})
}

// FuzzIDs: an id accepted as valid is exactly one path element of safe
// characters, and has one spelling.
func FuzzIDs(f *testing.F) {
	f.Add(NewPersonID())
	f.Add(NewMomentID(0))
	f.Add("..")
	f.Fuzz(func(t *testing.T, s string) {
		for _, ok := range []bool{ValidPersonID(s), ValidMomentID(s), ValidMediaID(s)} {
			if !ok {
				continue
			}
			if len(s) != IDLen || strings.ContainsAny(s, "./\\\x00") || strings.ToLower(s) != s {
				t.Fatalf("unsafe id %q accepted", s)
			}
		}
	})
}
