package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/nah-app/nah"
)

// Codes are typed by people, so they use an alphabet without look-alikes:
// 16 characters of Crockford-style base32 carry 80 random bits.
var codeEnc = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

const codeLen = 16

func newCode() string {
	var b [10]byte
	rand.Read(b[:])
	return codeEnc.EncodeToString(b[:])
}

// normCode lowercases a typed code and drops spaces and dashes.
func normCode(c string) string {
	c = strings.ToLower(c)
	return strings.Map(func(r rune) rune {
		if r == '-' || r == ' ' {
			return -1
		}
		return r
	}, c)
}

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

// CreateJoinCode makes a join code valid for ttl and returns it in clear.
// It is stored hashed; the caller shows it once.
func (s *Store) CreateJoinCode(ctx context.Context, ttl time.Duration) (string, JoinCode, error) {
	code := newCode()
	now := s.now().UnixMilli()
	h := hashSecret(code)
	jc := JoinCode{ID: hex.EncodeToString(h[:8]), Hint: code[:4], CreatedAt: now, ExpiresAt: now + ttl.Milliseconds()}
	_, err := s.w.ExecContext(ctx, `INSERT INTO join_codes(code_hash, hint, created_at, expires_at) VALUES (?, ?, ?, ?)`,
		h, jc.Hint, jc.CreatedAt, jc.ExpiresAt)
	if err != nil {
		return "", JoinCode{}, err
	}
	return code, jc, nil
}

var errBadJoinCode = nah.Errorf(nah.Invalid, "invalid_join_code", "the join code is unknown, used, revoked or expired")

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

// Invite is a single-use code that connects its redeemer with its maker.
type Invite struct {
	Code      string
	ExpiresAt int64
}

// CreateInvite makes a connection invite for person id.
func (s *Store) CreateInvite(ctx context.Context, id string) (Invite, error) {
	now := s.now()
	inv := Invite{Code: newCode(), ExpiresAt: now.Add(nah.InviteTTL).UnixMilli()}
	_, err := s.w.ExecContext(ctx, `INSERT INTO invites(code_hash, person_id, created_at, expires_at) VALUES (?, ?, ?, ?)`,
		hashSecret(inv.Code), id, now.UnixMilli(), inv.ExpiresAt)
	if err != nil {
		return Invite{}, err
	}
	return inv, nil
}

// RedeemInvite connects person id with the maker of code. An unknown, used
// or expired code is NotFound; connecting to oneself is Invalid; an existing
// connection or a full side is Conflict. Nothing changes unless all is well.
func (s *Store) RedeemInvite(ctx context.Context, id, code string) (nah.Connection, error) {
	code = normCode(code)
	notFound := nah.Errorf(nah.NotFound, "invite_not_found", "the invite code is unknown, used or expired")
	if len(code) != codeLen {
		return nah.Connection{}, notFound
	}
	// connMu keeps the graph in the order of the commits.
	s.connMu.Lock()
	defer s.connMu.Unlock()
	now := s.now().UnixMilli()
	var c nah.Connection
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var maker string
		var usedBy sql.NullString
		var expires int64
		err := tx.QueryRowContext(ctx, `SELECT person_id, used_by, expires_at FROM invites WHERE code_hash = ?`,
			hashSecret(code)).Scan(&maker, &usedBy, &expires)
		if errors.Is(err, sql.ErrNoRows) || err == nil && (usedBy.Valid || expires <= now) {
			return notFound
		}
		if err != nil {
			return err
		}
		if maker == id {
			return nah.Errorf(nah.Invalid, "own_invite", "you cannot redeem your own invite")
		}
		var exists int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM connections WHERE person_id = ? AND other_id = ?`, id, maker).Scan(&exists); err != nil {
			return err
		}
		if exists > 0 {
			return nah.Errorf(nah.Conflict, "already_connected", "you are already connected")
		}
		for _, who := range []struct{ id, whose string }{{id, "you have"}, {maker, "the inviter has"}} {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM connections WHERE person_id = ?`, who.id).Scan(&n); err != nil {
				return err
			}
			if n >= nah.MaxConnections {
				return nah.Errorf(nah.Conflict, "connection_limit", "%s %d connections, the most allowed", who.whose, nah.MaxConnections)
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE invites SET used_by = ?, used_at = ? WHERE code_hash = ?`, id, now, hashSecret(code)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO connections(person_id, other_id, created_at) VALUES (?, ?, ?), (?, ?, ?)`,
			id, maker, now, maker, id, now); err != nil {
			return err
		}
		c = nah.Connection{ID: maker, ConnectedAt: now}
		return tx.QueryRowContext(ctx, `SELECT handle, newest_at FROM people WHERE id = ?`, maker).Scan(&c.Handle, &c.NewestAt)
	})
	if err != nil {
		return nah.Connection{}, err
	}
	s.graph.connect(id, c.ID)
	if n := s.graph.node(c.ID); n != nil {
		c.NewestAt = max(c.NewestAt, n.newest.Load())
	}
	return c, nil
}

// Connections lists the connections of person id, oldest first.
func (s *Store) Connections(ctx context.Context, id string) ([]nah.Connection, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT c.other_id, p.handle, c.created_at, p.newest_at
		FROM connections c JOIN people p ON p.id = c.other_id
		WHERE c.person_id = ? ORDER BY c.created_at, c.other_id`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cs := []nah.Connection{}
	for rows.Next() {
		var c nah.Connection
		if err := rows.Scan(&c.ID, &c.Handle, &c.ConnectedAt, &c.NewestAt); err != nil {
			return nil, err
		}
		if n := s.graph.node(c.ID); n != nil {
			c.NewestAt = max(c.NewestAt, n.newest.Load())
		}
		cs = append(cs, c)
	}
	return cs, rows.Err()
}

// Disconnect removes the connection between a and b, both sides.
func (s *Store) Disconnect(ctx context.Context, a, b string) error {
	if !nah.ValidPersonID(b) {
		return nah.Errorf(nah.NotFound, "", "no such connection")
	}
	s.connMu.Lock()
	defer s.connMu.Unlock()
	res, err := s.w.ExecContext(ctx, `DELETE FROM connections WHERE (person_id = ? AND other_id = ?) OR (person_id = ? AND other_id = ?)`, a, b, b, a)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nah.Errorf(nah.NotFound, "", "no such connection")
	}
	s.graph.disconnect(a, b)
	return nil
}
