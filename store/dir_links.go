package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/nah-app/nah"
)

// Link kinds.
const (
	LinkAdmin = "admin" // creates an admin
	LinkReset = "reset" // sets a person's password
)

// CreateLink makes a one-time link token of kind, for person (reset) or
// nobody (admin), valid for ttl.
func (s *Store) CreateLink(ctx context.Context, kind, person string, ttl time.Duration) (string, error) {
	token := newSecret(32)
	now := s.now()
	var p any
	if person != "" {
		p = person
	}
	_, err := s.exec(ctx, `INSERT INTO links(token_hash, kind, person_id, created_at, expires_at) VALUES (?, ?, ?, ?, ?)`,
		hashSecret(token), kind, p, now.UnixMilli(), now.Add(ttl).UnixMilli())
	return token, err
}

var errBadLink = nah.Errorf(nah.NotFound, "invalid_link", "this link is unknown, used or expired")

// CheckLink returns the person of an unused, unexpired link of kind ("" for
// admin links) without using it.
func (s *Store) CheckLink(ctx context.Context, kind, token string) (string, error) {
	var person sql.NullString
	err := s.r.QueryRowContext(ctx, `SELECT person_id FROM links WHERE token_hash = ? AND kind = ? AND used_at IS NULL AND expires_at > ?`,
		hashSecret(token), kind, s.now().UnixMilli()).Scan(&person)
	if errors.Is(err, sql.ErrNoRows) {
		return "", errBadLink
	}
	return person.String, err
}

// useLink marks a link used inside tx; it fails if it was not usable.
func useLink(ctx context.Context, tx *sql.Tx, kind, token string, now int64) (string, error) {
	var person sql.NullString
	err := tx.QueryRowContext(ctx, `UPDATE links SET used_at = ? WHERE token_hash = ? AND kind = ? AND used_at IS NULL AND expires_at > ?
		RETURNING person_id`, now, hashSecret(token), kind, now).Scan(&person)
	if errors.Is(err, sql.ErrNoRows) {
		return "", errBadLink
	}
	return person.String, err
}
