package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"errors"

	"github.com/nah-app/nah"
)

// tokenLen is the length of a session token: 256 random bits, base64url.
const tokenLen = 43

// newSecret returns n random bytes as unpadded base64url.
func newSecret(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// hashSecret is how tokens and codes are stored: a leaked database does not
// hand out working credentials. Secrets are random, so no salt is needed.
func hashSecret(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// CreateSession returns a new token for person id. Only its hash is kept.
func (s *Store) CreateSession(ctx context.Context, id string) (string, error) {
	token := newSecret(32)
	_, err := s.w.ExecContext(ctx, `INSERT INTO sessions(token_hash, person_id, created_at) VALUES (?, ?, ?)`,
		hashSecret(token), id, s.now().UnixMilli())
	if err != nil {
		return "", err
	}
	return token, nil
}

var errBadToken = nah.Errorf(nah.Unauthorized, "invalid_token", "the token is missing, revoked or invalid")

// PersonForToken returns the person a token belongs to. Revoked tokens and
// disabled people are Unauthorized.
func (s *Store) PersonForToken(ctx context.Context, token string) (nah.Person, error) {
	if len(token) != tokenLen {
		return nah.Person{}, errBadToken
	}
	h := sha256.Sum256([]byte(token))
	now := s.now().UnixMilli()
	if p, ok := s.sessions.get(h, now, s.staleAfter.Milliseconds()); ok {
		return p, nil
	}
	var p nah.Person
	err := scanPerson(s.r.QueryRowContext(ctx, `SELECT p.id, p.handle, p.created_at, p.disabled, p.newest_at
		FROM sessions s JOIN people p ON p.id = s.person_id
		WHERE s.token_hash = ? AND p.disabled = 0`, h[:]), &p)
	if errors.Is(err, sql.ErrNoRows) {
		return nah.Person{}, errBadToken
	}
	if err == nil {
		s.sessions.put(h, p, now)
	}
	return p, err
}

// DeleteSession revokes a token.
func (s *Store) DeleteSession(ctx context.Context, token string) error {
	h := sha256.Sum256([]byte(token))
	_, err := s.w.ExecContext(ctx, `DELETE FROM sessions WHERE token_hash = ?`, h[:])
	s.sessions.remove(h)
	return err
}
