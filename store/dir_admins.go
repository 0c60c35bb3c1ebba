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

// AdminCount returns how many admins exist; zero means first run.
func (s *Store) AdminCount(ctx context.Context) (int, error) {
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM admins`).Scan(&n)
	return n, err
}

// CreateAdminWithLink uses an admin link and makes the admin, atomically.
// It is the only way an admin is made. passwordHash is hashed by the caller.
func (s *Store) CreateAdminWithLink(ctx context.Context, token, name, passwordHash string) (Admin, error) {
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

// FindAdminByName returns an admin and their password hash.
func (s *Store) FindAdminByName(ctx context.Context, name string) (Admin, string, error) {
	var a Admin
	var hash string
	err := s.r.QueryRowContext(ctx, `SELECT id, name, created_at, password_hash FROM admins WHERE name = ?`, name).
		Scan(&a.ID, &a.Name, &a.CreatedAt, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return Admin{}, "", nah.Errorf(nah.NotFound, "", "no such admin")
	}
	return a, hash, err
}

// CreateAdminSession returns a cookie token for admin id, valid for ttl.
func (s *Store) CreateAdminSession(ctx context.Context, id string, ttl time.Duration) (string, error) {
	token := newSecret(32)
	now := s.now()
	_, err := s.exec(ctx, `INSERT INTO admin_sessions(token_hash, admin_id, created_at, expires_at) VALUES (?, ?, ?, ?)`,
		hashSecret(token), id, now.UnixMilli(), now.Add(ttl).UnixMilli())
	return token, err
}

// AdminForSession returns the admin of a cookie token that has not expired.
// It reads the directory every time: console requests are rare.
func (s *Store) AdminForSession(ctx context.Context, token string) (Admin, error) {
	var a Admin
	err := s.r.QueryRowContext(ctx, `SELECT a.id, a.name, a.created_at FROM admin_sessions s JOIN admins a ON a.id = s.admin_id
		WHERE s.token_hash = ? AND s.expires_at > ?`, hashSecret(token), s.now().UnixMilli()).Scan(&a.ID, &a.Name, &a.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return Admin{}, nah.Errorf(nah.Unauthorized, "", "not signed in")
	}
	return a, err
}

// DeleteAdminSession signs an admin out.
func (s *Store) DeleteAdminSession(ctx context.Context, token string) error {
	_, err := s.exec(ctx, `DELETE FROM admin_sessions WHERE token_hash = ?`, hashSecret(token))
	return err
}
