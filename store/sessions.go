package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"

	"github.com/nah-app/nah"
)

// tokenLen is the length of a session token: 256 random bits, base64url.
const tokenLen = 43

// CreateSession returns a new token for person id. Only its hash is kept.
func (s *Store) CreateSession(ctx context.Context, id string) (string, error) {
	token := newSecret(32)
	_, err := s.exec(ctx, `INSERT INTO sessions(token_hash, person_id, created_at) VALUES (?, ?, ?)`,
		hashSecret(token), id, s.now().UnixMilli())
	if err != nil {
		return "", err
	}
	return token, nil
}

// SignIn returns a new token for person id, whose password was checked
// against hash, only if that is still their password and they are neither
// disabled nor deleted. Check and insert are one statement: a reset, a
// disable or a deletion that commits while the password is hashed (tens of
// ms of bcrypt) leaves no session behind. Unauthorized otherwise.
func (s *Store) SignIn(ctx context.Context, id, hash string) (string, error) {
	token := newSecret(32)
	res, err := s.exec(ctx, `INSERT INTO sessions(token_hash, person_id, created_at)
		SELECT ?, id, ? FROM people WHERE id = ? AND password_hash = ? AND disabled = 0 AND deleted_at IS NULL`,
		hashSecret(token), s.now().UnixMilli(), id, hash)
	if err != nil {
		return "", err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return "", nah.Errorf(nah.Unauthorized, "invalid_credentials", "the handle or password is wrong")
	}
	return token, nil
}

var errBadToken = nah.Errorf(nah.Unauthorized, "invalid_token", "the token is missing, revoked or invalid")

// tokenQuery is the person of a live token's hash.
const tokenQuery = `SELECT p.id, p.handle, p.created_at, p.disabled, p.newest_at
	FROM sessions s JOIN people p ON p.id = s.person_id
	WHERE s.token_hash = ? AND p.disabled = 0 AND p.deleted_at IS NULL`

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
	gen := s.sessions.generation()
	var p nah.Person
	err := scanPerson(s.tokenQuery.QueryRowContext(ctx, h[:]), &p)
	if errors.Is(err, sql.ErrNoRows) {
		return nah.Person{}, errBadToken
	}
	if err == nil {
		if s.afterTokenRead != nil {
			s.afterTokenRead()
		}
		s.sessions.put(h, p, now, gen)
	}
	return p, err
}

// DeleteSession revokes a token.
func (s *Store) DeleteSession(ctx context.Context, token string) error {
	h := sha256.Sum256([]byte(token))
	_, err := s.exec(ctx, `DELETE FROM sessions WHERE token_hash = ?`, h[:])
	s.sessions.remove(h)
	return err
}

// Session is one signed-in device of a person, named by a prefix of its
// token's hash (the token itself is never stored).
type Session struct {
	ID        string
	CreatedAt int64
}

// Sessions lists up to limit of a person's sessions, newest first: a person
// may sign in any number of times, and a page must not grow with it.
func (s *Store) Sessions(ctx context.Context, person string, limit int) ([]Session, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT token_hash, created_at FROM sessions WHERE person_id = ? ORDER BY created_at DESC LIMIT ?`, person, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ss []Session
	for rows.Next() {
		var h []byte
		var se Session
		if err := rows.Scan(&h, &se.CreatedAt); err != nil {
			return nil, err
		}
		se.ID = hex.EncodeToString(h[:8])
		ss = append(ss, se)
	}
	return ss, rows.Err()
}

// RevokeSessions revokes a person's session id (from Sessions), or all of
// them when id is empty.
func (s *Store) RevokeSessions(ctx context.Context, person, id string) error {
	var err error
	if id == "" {
		_, err = s.exec(ctx, `DELETE FROM sessions WHERE person_id = ?`, person)
	} else {
		b, herr := hex.DecodeString(id)
		if herr != nil || len(b) != 8 {
			return nah.Errorf(nah.NotFound, "", "no such session")
		}
		var res sql.Result
		res, err = s.exec(ctx, `DELETE FROM sessions WHERE person_id = ? AND substr(token_hash, 1, 8) = ?`, person, b)
		if err == nil {
			if n, _ := res.RowsAffected(); n == 0 {
				return nah.Errorf(nah.NotFound, "", "no such session")
			}
		}
	}
	if err == nil {
		s.sessions.removePerson(person)
	}
	return err
}
