package store

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/nah-app/nah"
)

// JoinCode is a single-use code that lets one person sign up.
type JoinCode struct {
	ID        string // names the code in lists without revealing it
	Hint      string // the first characters, to tell codes apart in lists
	CreatedAt int64
	ExpiresAt int64
	UsedBy    string
	UsedAt    int64
	RevokedAt int64
}

// JoinCodes are the single-use sign-up codes of a server without open
// sign-up: the directory's join_codes table.
type JoinCodes struct{ s *Store }

// JoinCodes returns the store's join codes.
func (s *Store) JoinCodes() JoinCodes { return JoinCodes{s} }

// Create makes a join code valid for ttl and returns it in clear.
// It is stored hashed; the caller shows it once.
func (jcs JoinCodes) Create(ctx context.Context, ttl time.Duration) (string, JoinCode, error) {
	s := jcs.s
	code := newCode()
	now := s.now().UnixMilli()
	h := hashSecret(code)
	jc := JoinCode{ID: hex.EncodeToString(h[:8]), Hint: code[:4], CreatedAt: now, ExpiresAt: now + ttl.Milliseconds()}
	_, err := s.exec(ctx, `INSERT INTO join_codes(code_hash, hint, created_at, expires_at) VALUES (?, ?, ?, ?)`,
		h, jc.Hint, jc.CreatedAt, jc.ExpiresAt)
	if err != nil {
		return "", JoinCode{}, err
	}
	return code, jc, nil
}

var errBadJoinCode = nah.Errorf(nah.Invalid, "invalid_join_code", "the join code is unknown, used, revoked or expired")

// Check returns nil when code is a join code that can be used now
// (known, unused, unrevoked, unexpired), without using it. Sign-up asks
// first so that a bogus code is refused before a password is hashed or a
// file is made; using the code stays in CreatePerson's transaction, which
// asks again.
func (jcs JoinCodes) Check(ctx context.Context, code string) error {
	s := jcs.s
	code = normCode(code)
	if len(code) != codeLen {
		return errBadJoinCode
	}
	var one int
	err := s.r.QueryRowContext(ctx, `SELECT 1 FROM join_codes
		WHERE code_hash = ? AND used_by IS NULL AND revoked_at IS NULL AND expires_at > ?`,
		hashSecret(code), s.now().UnixMilli()).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return errBadJoinCode
	}
	return err
}

// useJoinCode marks a join code used by person id inside tx.
func useJoinCode(ctx context.Context, tx *sql.Tx, code, id string, now int64) error {
	code = normCode(code)
	if len(code) != codeLen {
		return errBadJoinCode
	}
	res, err := tx.ExecContext(ctx, `UPDATE join_codes SET used_by = ?, used_at = ?
		WHERE code_hash = ? AND used_by IS NULL AND revoked_at IS NULL AND expires_at > ?`,
		id, now, hashSecret(code), now)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return errBadJoinCode
	}
	return nil
}

// List returns join codes, newest first.
func (jcs JoinCodes) List(ctx context.Context, limit int) ([]JoinCode, error) {
	s := jcs.s
	rows, err := s.r.QueryContext(ctx, `SELECT hex(code_hash), hint, created_at, expires_at, coalesce(used_by, ''), coalesce(used_at, 0), coalesce(revoked_at, 0)
		FROM join_codes ORDER BY created_at DESC LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cs []JoinCode
	for rows.Next() {
		var c JoinCode
		var h string
		if err := rows.Scan(&h, &c.Hint, &c.CreatedAt, &c.ExpiresAt, &c.UsedBy, &c.UsedAt, &c.RevokedAt); err != nil {
			return nil, err
		}
		c.ID = strings.ToLower(h[:16])
		cs = append(cs, c)
	}
	return cs, rows.Err()
}

// Revoke revokes an unused join code by its ID (from List).
func (jcs JoinCodes) Revoke(ctx context.Context, id string) error {
	s := jcs.s
	b, err := hex.DecodeString(id)
	if err != nil || len(b) != 8 {
		return nah.Errorf(nah.NotFound, "", "no such join code")
	}
	res, err := s.exec(ctx, `UPDATE join_codes SET revoked_at = ? WHERE substr(code_hash, 1, 8) = ? AND revoked_at IS NULL AND used_by IS NULL`,
		s.now().UnixMilli(), b)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nah.Errorf(nah.NotFound, "", "no such unused join code")
	}
	return nil
}
