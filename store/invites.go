package store

import (
	"context"

	"github.com/nah-app/nah"
)

// Invite is a single-use code that connects its redeemer with its maker.
type Invite struct {
	Code      string
	ExpiresAt int64
}

// CreateInvite makes a connection invite for person id.
func (s *Store) CreateInvite(ctx context.Context, id string) (Invite, error) {
	now := s.now()
	inv := Invite{Code: newCode(), ExpiresAt: now.Add(nah.InviteTTL).UnixMilli()}
	_, err := s.exec(ctx, `INSERT INTO invites(code_hash, person_id, created_at, expires_at) VALUES (?, ?, ?, ?)`,
		hashSecret(inv.Code), id, now.UnixMilli(), inv.ExpiresAt)
	if err != nil {
		return Invite{}, err
	}
	return inv, nil
}
