package store

import (
	"context"
	"database/sql"

	"github.com/nah-app/nah"
)

// Invite is a single-use code that connects its redeemer with its maker.
type Invite struct {
	Code      string
	ExpiresAt int64
}

// MaxOpenInvites bounds the invites a person has that are neither used
// nor expired. Twenty is more than anyone shows at once; without a bound
// one person made 26,363 invites in 15 s, 37.6 MB of directory that every
// replica copies.
const MaxOpenInvites = 20

// CreateInvite makes a connection invite for person id. Their expired
// unused invites are purged in the same transaction, and past
// MaxOpenInvites open ones the answer is Conflict invite_limit.
func (s *Store) CreateInvite(ctx context.Context, id string) (Invite, error) {
	now := s.now()
	inv := Invite{Code: newCode(), ExpiresAt: now.Add(nah.InviteTTL).UnixMilli()}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM invites WHERE person_id = ? AND used_by IS NULL AND expires_at <= ?`, id, now.UnixMilli()); err != nil {
			return err
		}
		var open int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM invites WHERE person_id = ? AND used_by IS NULL`, id).Scan(&open); err != nil {
			return err
		}
		if open >= MaxOpenInvites {
			return nah.Errorf(nah.Conflict, "invite_limit", "you have %d open invites, the most allowed: one is free again once it is used or expires", MaxOpenInvites)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO invites(code_hash, person_id, created_at, expires_at) VALUES (?, ?, ?, ?)`,
			hashSecret(inv.Code), id, now.UnixMilli(), inv.ExpiresAt)
		return err
	})
	if err != nil {
		return Invite{}, err
	}
	return inv, nil
}
