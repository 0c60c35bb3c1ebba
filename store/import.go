package store

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/nah-app/nah"
)

// ImportMoments writes moments (with their own ids and times) into author's
// file in one transaction: for fixtures and for moving a person between
// servers. Ids and times are the caller's; ids must be valid.
func (s *Store) ImportMoments(ctx context.Context, author string, ms []nah.Moment) error {
	n := s.graph.node(author)
	if n == nil {
		return nah.Errorf(nah.NotFound, "", "no such person")
	}
	f, err := s.files.acquire(ctx, author, false)
	if err != nil {
		return err
	}
	defer s.files.release(f)
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO moments(id, created_at, body) VALUES (?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	var newest int64
	for _, m := range ms {
		if !nah.ValidMomentID(m.ID) {
			return nah.Errorf(nah.Invalid, "invalid_id", "%q is not a moment id", m.ID)
		}
		if _, err := stmt.ExecContext(ctx, m.ID, m.CreatedAt, m.Body); err != nil {
			return err
		}
		newest = max(newest, m.CreatedAt)
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	n.raiseNewest(newest)
	s.markDirty(author, n.newest.Load(), int64(len(ms)))
	s.dropHead(n)
	return nil
}

// ImportConnections connects every pair in one transaction, at time at. It
// is for fixtures and moves: the cap is checked once, at the end, and a
// breach rolls everything back.
func (s *Store) ImportConnections(ctx context.Context, pairs [][2]string, at int64) error {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `INSERT OR IGNORE INTO connections(person_id, other_id, created_at) VALUES (?, ?, ?), (?, ?, ?)`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, p := range pairs {
			if p[0] == p[1] {
				return nah.Errorf(nah.Invalid, "own_invite", "%s cannot connect to themselves", p[0])
			}
			if _, err := stmt.ExecContext(ctx, p[0], p[1], at, p[1], p[0], at); err != nil {
				return err
			}
		}
		var over string
		err = tx.QueryRowContext(ctx, `SELECT person_id FROM connections GROUP BY person_id HAVING count(*) > ? LIMIT 1`, nah.MaxConnections).Scan(&over)
		if err == nil {
			return nah.Errorf(nah.Conflict, "connection_limit", "%s would have more than %d connections", over, nah.MaxConnections)
		}
		if err != sql.ErrNoRows {
			return fmt.Errorf("check cap: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range pairs {
		s.graph.connect(p[0], p[1])
	}
	return nil
}
