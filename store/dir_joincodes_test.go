package store

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// TestCheckJoinCode: the read-only check agrees with the redemption in
// CreatePerson, and does not use the code.
func TestCheckJoinCode(t *testing.T) {
	var now atomic.Int64 // the store's flusher reads the clock too
	now.Store(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	s := MustOpen(t, Config{Now: func() time.Time { return time.Unix(0, now.Load()) }})
	ctx := t.Context()
	code, _, err := s.JoinCodes().Create(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // asking does not use it
		if err := s.JoinCodes().Check(ctx, code); err != nil {
			t.Fatalf("a fresh code: %v", err)
		}
	}
	if err := s.JoinCodes().Check(ctx, strings.ToUpper(code[:4])+"-"+code[4:]); err != nil {
		t.Fatalf("a fresh code as typed: %v", err)
	}
	for _, bad := range []string{"", "abcdabcdabcdabcd", code + "x", strings.Repeat("a", 4000)} {
		if err := s.JoinCodes().Check(ctx, bad); nah.ErrorCode(err) != nah.Invalid {
			t.Errorf("CheckJoinCode(%.20q) = %v, want invalid", bad, err)
		}
	}
	if _, err := s.CreatePerson(ctx, NewPerson{Handle: "ann", PasswordHash: "x", JoinCode: code}); err != nil {
		t.Fatal(err)
	}
	if err := s.JoinCodes().Check(ctx, code); nah.ErrorCode(err) != nah.Invalid {
		t.Errorf("a used code: %v", err)
	}
	late, _, _ := s.JoinCodes().Create(ctx, time.Hour)
	now.Add(int64(time.Hour))
	if err := s.JoinCodes().Check(ctx, late); nah.ErrorCode(err) != nah.Invalid {
		t.Errorf("an expired code: %v", err)
	}
}
