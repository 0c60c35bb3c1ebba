package store

import (
	"context"
	"database/sql"

	"github.com/nah-app/nah"
)

// Device is a phone registered for pushes. Token is a secret: it goes to
// the push relay and nowhere else (never a log line, never the console).
type Device struct {
	Token     string
	Platform  string
	CreatedAt int64 // unix ms of its latest registration
}

// Devices are the phones people registered for pushes: the directory's
// devices table.
type Devices struct{ s *Store }

// Devices returns the store's registered phones.
func (s *Store) Devices() Devices { return Devices{s} }

// Put registers (or registers again) a push token for person: the
// same call twice leaves one device. A token registered by someone else
// moves to person, since one token is one phone. Past nah.MaxDevices the
// devices registered longest ago are dropped, in the same transaction.
func (dv Devices) Put(ctx context.Context, person, token, platform string) error {
	s := dv.s
	if err := nah.CheckDeviceToken(token); err != nil {
		return err
	}
	if err := nah.CheckPlatform(platform); err != nil {
		return err
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		// created_at orders a person's devices; two registrations within
		// one millisecond (a fast phone, a test's clock) still order.
		var last int64
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(created_at), 0) FROM devices WHERE person_id = ? AND token <> ?`, person, token).Scan(&last); err != nil {
			return err
		}
		at := max(s.now().UnixMilli(), last+1)
		if _, err := tx.ExecContext(ctx, `INSERT INTO devices(token, person_id, platform, created_at) VALUES (?, ?, ?, ?)
			ON CONFLICT(token) DO UPDATE SET person_id = excluded.person_id, platform = excluded.platform, created_at = excluded.created_at`,
			token, person, platform, at); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM devices WHERE person_id = ?1 AND token NOT IN
			(SELECT token FROM devices WHERE person_id = ?1 ORDER BY created_at DESC LIMIT ?2)`, person, nah.MaxDevices)
		return err
	})
}

// Delete removes person's device token; one that is not theirs is
// NotFound.
func (dv Devices) Delete(ctx context.Context, person, token string) error {
	s := dv.s
	res, err := s.exec(ctx, `DELETE FROM devices WHERE token = ? AND person_id = ?`, token, person)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nah.Errorf(nah.NotFound, "", "no such device")
	}
	return nil
}

// List returns person's devices, newest registration first, tokens
// included: for the digest loop only.
func (dv Devices) List(ctx context.Context, person string) ([]Device, error) {
	s := dv.s
	rows, err := s.r.QueryContext(ctx, `SELECT token, platform, created_at FROM devices WHERE person_id = ? ORDER BY created_at DESC`, person)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ds []Device
	for rows.Next() {
		var d Device
		if err := rows.Scan(&d.Token, &d.Platform, &d.CreatedAt); err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, rows.Err()
}

// Count is how many devices person has registered.
func (dv Devices) Count(ctx context.Context, person string) (int, error) {
	s := dv.s
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM devices WHERE person_id = ?`, person).Scan(&n)
	return n, err
}
