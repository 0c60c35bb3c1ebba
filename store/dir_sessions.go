package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"time"

	"github.com/nah-app/nah"
)

// tokenLen is the length of a session token: 256 random bits, base64url.
const tokenLen = 43

const (
	// MaxSessions is how many sessions a person keeps: a new one past it
	// drops the one used least recently, which then answers 401 like a
	// revoked one. Ten phones, tablets and browsers, as ten push devices;
	// one client signing in at the rate limit made 29 in 10 s before.
	MaxSessions = 10
	// SessionIdle is how long a session lives unused: a token that signs
	// no request for 90 days answers 401, and the sweep deletes its row.
	SessionIdle = 90 * 24 * time.Hour
	// sessionTouchEvery is how stale a session's used_at may get before a
	// request moves it on: one directory write a session an hour at most,
	// and only on a read past the session cache (StaleAfter).
	sessionTouchEvery = time.Hour
)

// CreateSession returns a new token for person id. Only its hash is kept.
func (s *Store) CreateSession(ctx context.Context, id string) (string, error) {
	return s.newSession(ctx, `INSERT INTO sessions(token_hash, person_id, created_at, used_at, device) VALUES (?1, ?3, ?2, ?2, '')`, id)
}

// SignIn returns a new token for person id, whose password was checked
// against hash, only if that is still their password and they are neither
// disabled nor deleted; device (the client's User-Agent) names it on the
// console. Check and insert are one statement: a reset, a disable or a
// deletion that commits while the password is hashed (tens of ms of bcrypt)
// leaves no session behind. Unauthorized otherwise.
func (s *Store) SignIn(ctx context.Context, id, hash, device string) (string, error) {
	return s.newSession(ctx, `INSERT INTO sessions(token_hash, person_id, created_at, used_at, device)
		SELECT ?1, id, ?2, ?2, ?5 FROM people WHERE id = ?3 AND password_hash = ?4 AND disabled = 0 AND deleted_at IS NULL`, id, hash, device)
}

// newSession inserts a session of person id with insert (its arguments:
// token hash, now, id, and hash and device when it uses them) and, in the
// same transaction, drops the person's sessions past MaxSessions, those
// used least recently first.
func (s *Store) newSession(ctx context.Context, insert, id string, args ...any) (string, error) {
	token := newSecret(32)
	th := hashSecret(token)
	var dropped [][]byte
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, insert, append([]any{th, s.now().UnixMilli(), id}, args...)...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nah.Errorf(nah.Unauthorized, "invalid_credentials", "the handle or password is wrong")
		}
		rows, err := tx.QueryContext(ctx, `DELETE FROM sessions WHERE person_id = ?1 AND token_hash IN (
			SELECT token_hash FROM sessions WHERE person_id = ?1 AND token_hash != ?2
			ORDER BY used_at DESC, created_at DESC, token_hash LIMIT -1 OFFSET ?3)
			RETURNING token_hash`, id, th, MaxSessions-1)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var h []byte
			if err := rows.Scan(&h); err != nil {
				return err
			}
			dropped = append(dropped, h)
		}
		return rows.Err()
	})
	if err != nil {
		return "", err
	}
	for _, h := range dropped {
		s.sessions.remove([32]byte(h))
	}
	return token, nil
}

var errBadToken = nah.Errorf(nah.Unauthorized, "invalid_token", "the token is missing, revoked or invalid")

// tokenQuery is the person of a live token's hash (?1), unused for no
// longer than SessionIdle before now (?2), and when the token was last used.
const tokenQuery = `SELECT p.id, p.handle, p.created_at, p.disabled, p.newest_at, s.used_at
	FROM sessions s JOIN people p ON p.id = s.person_id
	WHERE s.token_hash = ?1 AND s.used_at >= ?2 AND p.disabled = 0 AND p.deleted_at IS NULL`

// PersonForToken returns the person a token belongs to, and moves the
// session's last use on (kept to sessionTouchEvery). Revoked, dropped and
// expired tokens and disabled people are Unauthorized; a session that
// expires while cached lives StaleAfter longer at most.
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
	var (
		p      nah.Person
		usedAt int64
	)
	err := scanPerson(s.tokenQuery.QueryRowContext(ctx, h[:], now-SessionIdle.Milliseconds()), &p, &usedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nah.Person{}, errBadToken
	}
	if err != nil {
		return p, err
	}
	if now-usedAt >= sessionTouchEvery.Milliseconds() {
		// A failed touch (a full disk) costs the session at most an hour
		// of its idle time; the request goes on.
		s.exec(ctx, `UPDATE sessions SET used_at = ? WHERE token_hash = ?`, now, h[:])
	}
	if s.afterTokenRead != nil {
		s.afterTokenRead()
	}
	s.sessions.put(h, p, now, gen)
	return p, nil
}

// DeleteExpiredSessions deletes the sessions unused for SessionIdle (the
// sweep, once a minute), which PersonForToken already refuses.
func (s *Store) DeleteExpiredSessions(ctx context.Context) (int64, error) {
	res, err := s.exec(ctx, `DELETE FROM sessions WHERE used_at < ?`, s.now().Add(-SessionIdle).UnixMilli())
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
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
	// UsedAt is when it last signed a request, to the hour; ExpiresAt is
	// when it expires unless used again.
	UsedAt, ExpiresAt int64
	// Device is the User-Agent it signed in with, empty if none.
	Device string
}

// Sessions lists up to limit of a person's live sessions, used most
// recently first (at most MaxSessions are kept).
func (s *Store) Sessions(ctx context.Context, person string, limit int) ([]Session, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT token_hash, created_at, used_at, device FROM sessions
		WHERE person_id = ? AND used_at >= ? ORDER BY used_at DESC, created_at DESC LIMIT ?`,
		person, s.now().Add(-SessionIdle).UnixMilli(), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ss []Session
	for rows.Next() {
		var h []byte
		var se Session
		if err := rows.Scan(&h, &se.CreatedAt, &se.UsedAt, &se.Device); err != nil {
			return nil, err
		}
		se.ID = hex.EncodeToString(h[:8])
		se.ExpiresAt = se.UsedAt + SessionIdle.Milliseconds()
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
