package store

import (
	"context"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// TestRevocationDuringTokenCheck: a token revoked between a check's
// directory read and its cache put is not put back in the cache. The check
// that raced may still answer with the person (it read before the
// revocation); the next one must not.
func TestRevocationDuringTokenCheck(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		revoke func(s *Store, person, token string) error
	}{
		{"DeleteSession", func(s *Store, _, token string) error { return s.DeleteSession(ctx, token) }},
		{"RevokeSessions all", func(s *Store, person, _ string) error { return s.RevokeSessions(ctx, person, "") }},
		{"RevokeSessions one", func(s *Store, person, _ string) error {
			ss, err := s.Sessions(ctx, person, 10)
			if err != nil {
				return err
			}
			return s.RevokeSessions(ctx, person, ss[0].ID)
		}},
		{"SetDisabled", func(s *Store, person, _ string) error { return s.SetDisabled(ctx, person, true) }},
		{"ResetPassword", func(s *Store, person, _ string) error {
			link, err := s.CreateLink(ctx, LinkReset, person, time.Hour)
			if err != nil {
				return err
			}
			_, err = s.ResetPassword(ctx, link, "new hash")
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := MustOpen(t, Config{})
			p := mustPerson(t, s, "ann")
			token, err := s.CreateSession(ctx, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			s.afterTokenRead = func() {
				s.afterTokenRead = nil // once
				if err := c.revoke(s, p.ID, token); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.PersonForToken(ctx, token); err != nil {
				t.Fatalf("the check that raced the revocation: %v", err)
			}
			if s.afterTokenRead != nil {
				t.Fatal("the hook did not run")
			}
			if _, err := s.PersonForToken(ctx, token); nah.ErrorCode(err) != nah.Unauthorized {
				t.Fatalf("revoked between read and cache, still accepted: %v", err)
			}
		})
	}
}

// TestTokenCacheStillCaches: without a revocation, a check is cached: the
// second one reads no directory (here, a deleted row is not noticed).
func TestTokenCacheStillCaches(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, Config{})
	p := mustPerson(t, s, "ann")
	token, _ := s.CreateSession(ctx, p.ID)
	if _, err := s.PersonForToken(ctx, token); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, `DELETE FROM sessions`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PersonForToken(ctx, token); err != nil {
		t.Fatalf("the second check was not served from the cache: %v", err)
	}
}
