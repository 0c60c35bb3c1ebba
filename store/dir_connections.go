package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/nah-app/nah"
)

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
		// Either side deleted meanwhile (a session checked just before the
		// deletion): no connection. DeletePerson holds connMu too, so this
		// reads the truth.
		var alive int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM people WHERE id IN (?, ?) AND deleted_at IS NULL`, id, maker).Scan(&alive); err != nil {
			return err
		}
		if alive != 2 && maker != id {
			return notFound
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
		WHERE c.person_id = ? AND p.deleted_at IS NULL ORDER BY c.created_at, c.other_id`, id)
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
	res, err := s.exec(ctx, `DELETE FROM connections WHERE (person_id = ? AND other_id = ?) OR (person_id = ? AND other_id = ?)`, a, b, b, a)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nah.Errorf(nah.NotFound, "", "no such connection")
	}
	// Each one's clients in the other's group are pending removals from
	// here on, by the graph (strangers in mls_group.go): nothing to mark.
	s.graph.disconnect(a, b)
	return nil
}

// ConnectionCount returns how many connections person id has.
func (s *Store) ConnectionCount(ctx context.Context, id string) (int, error) {
	for {
		if n, known := s.graph.count(id); known {
			return n, nil
		}
		if err := s.loadConns(ctx, id); err != nil {
			return 0, err
		}
	}
}

// Connected reports whether a and b are connected.
func (s *Store) Connected(ctx context.Context, a, b string) (bool, error) {
	for {
		if c, known := s.graph.connected(a, b); known {
			return c, nil
		}
		if err := s.loadConns(ctx, a); err != nil {
			return false, err
		}
	}
}

// circle appends to dst the node of person id and, when withConns is set,
// the nodes of everyone connected to id, reading id's connections from the
// directory first if they are not in memory yet.
func (s *Store) circle(ctx context.Context, id string, withConns bool, dst []*node) ([]*node, error) {
	for {
		out, known := s.graph.circle(id, withConns, dst)
		if known {
			return out, nil
		}
		if err := s.loadConns(ctx, id); err != nil {
			return dst, err
		}
	}
}

// loadRetries is how many times loadConns reads a person's connections
// while other connection changes keep landing before it takes connMu.
const loadRetries = 3

// loadConns reads id's connections into the graph on first use (graph.go).
// The read runs outside connMu; it is kept only if graph.changes did not move
// meanwhile (changes are idempotent), else retried, the last of loadRetries
// under connMu. So first feeds after a start do not queue behind an fsync.
func (s *Store) loadConns(ctx context.Context, id string) error {
	for try := 0; ; try++ {
		i, changes, ok := s.graph.pending(id)
		if !ok {
			return nil
		}
		locked := try >= loadRetries
		if locked {
			s.connMu.Lock()
			// Read the count again now that no change can be applied.
			if i, changes, ok = s.graph.pending(id); !ok {
				s.connMu.Unlock()
				return nil
			}
		}
		list, err := s.readConns(ctx, id)
		if err == nil && s.afterConnsRead != nil {
			s.afterConnsRead()
		}
		if err == nil && !s.graph.install(i, list, changes) && locked {
			err = fmt.Errorf("store: the connections of %s changed under connMu", id)
		}
		if locked {
			s.connMu.Unlock()
		}
		if err != nil {
			return err
		}
	}
}

// readConns returns the ids of everyone connected to person id, in one row
// joined by commas: crossing from SQLite into database/sql costs about a
// microsecond per row, a third of the read of a person's 150.
func (s *Store) readConns(ctx context.Context, id string) ([]string, error) {
	var list sql.NullString
	err := s.r.QueryRowContext(ctx, `SELECT group_concat(other_id, ',') FROM connections WHERE person_id = ?`, id).Scan(&list)
	if err != nil {
		return nil, fmt.Errorf("store: the connections of %s: %w", id, err)
	}
	if !list.Valid || list.String == "" {
		return nil, nil
	}
	return strings.Split(list.String, ","), nil
}

// ImportConnections connects every pair in one transaction, at time at, for
// fixtures: the cap is checked once, at the end, and a breach rolls
// everything back.
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
