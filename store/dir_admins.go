package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/nah-app/nah"
)

// Admin is an operator of the console, separate from people.
type Admin struct {
	ID        string
	Name      string
	CreatedAt int64
}

// Admins are the console's admins and their sessions: the directory's
// admins and admin_sessions tables.
type Admins struct{ s *Store }

// Admins returns the store's console admins.
func (s *Store) Admins() Admins { return Admins{s} }

// Count returns how many admins exist; zero means first run.
func (ad Admins) Count(ctx context.Context) (int, error) {
	s := ad.s
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM admins`).Scan(&n)
	return n, err
}

// CreateWithLink uses an admin link and makes the admin, atomically.
// It is the only way an admin is made. passwordHash is hashed by the caller.
func (ad Admins) CreateWithLink(ctx context.Context, token, name, passwordHash string) (Admin, error) {
	s := ad.s
	if err := nah.CheckHandle(name); err != nil {
		return Admin{}, err
	}
	a := Admin{ID: nah.NewPersonID(), Name: name, CreatedAt: s.now().UnixMilli()}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := useLink(ctx, tx, LinkAdmin, token, a.CreatedAt); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO admins(id, name, password_hash, created_at) VALUES (?, ?, ?, ?)`,
			a.ID, a.Name, passwordHash, a.CreatedAt)
		if isUniqueViolation(err) {
			return nah.Errorf(nah.Conflict, "name_taken", "that name is taken")
		}
		return err
	})
	return a, err
}

// FindByName returns an admin and their password hash.
func (ad Admins) FindByName(ctx context.Context, name string) (Admin, string, error) {
	s := ad.s
	var a Admin
	var hash string
	err := s.r.QueryRowContext(ctx, `SELECT id, name, created_at, password_hash FROM admins WHERE name = ?`, name).
		Scan(&a.ID, &a.Name, &a.CreatedAt, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return Admin{}, "", nah.Errorf(nah.NotFound, "", "no such admin")
	}
	return a, hash, err
}

// CreateSession returns a cookie token for admin id, valid for ttl.
func (ad Admins) CreateSession(ctx context.Context, id string, ttl time.Duration) (string, error) {
	s := ad.s
	token := newSecret(32)
	now := s.now()
	_, err := s.exec(ctx, `INSERT INTO admin_sessions(token_hash, admin_id, created_at, expires_at) VALUES (?, ?, ?, ?)`,
		hashSecret(token), id, now.UnixMilli(), now.Add(ttl).UnixMilli())
	return token, err
}

// ForSession returns the admin of a cookie token that has not expired.
// It reads the directory every time: console requests are rare.
func (ad Admins) ForSession(ctx context.Context, token string) (Admin, error) {
	s := ad.s
	var a Admin
	err := s.r.QueryRowContext(ctx, `SELECT a.id, a.name, a.created_at FROM admin_sessions s JOIN admins a ON a.id = s.admin_id
		WHERE s.token_hash = ? AND s.expires_at > ?`, hashSecret(token), s.now().UnixMilli()).Scan(&a.ID, &a.Name, &a.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return Admin{}, nah.Errorf(nah.Unauthorized, "", "not signed in")
	}
	return a, err
}

// DeleteSession signs an admin out.
func (ad Admins) DeleteSession(ctx context.Context, token string) error {
	s := ad.s
	_, err := s.exec(ctx, `DELETE FROM admin_sessions WHERE token_hash = ?`, hashSecret(token))
	return err
}
