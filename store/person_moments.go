package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"

	"github.com/nah-app/nah"
)

// CreateMoment stores body as a new moment of author. It returns once the
// row is committed, and with SyncFull fsynced (Sync, sqlite.go).
func (s *Store) CreateMoment(ctx context.Context, author string, body []byte) (nah.Moment, error) {
	m, _, err := s.CreateMomentOnce(ctx, author, body, nil)
	return m, err
}

// CreateMomentOnce is CreateMoment under an idempotency key
// (person_idem.go; nil for none), stored in the moment's transaction. When
// the key was used before for the same request, nothing is written and
// replay is the first answer. Retries in this process wait for each other
// on the file's one connection; another process's wait on its write lock.
func (s *Store) CreateMomentOnce(ctx context.Context, author string, body []byte, idem *Idem) (m nah.Moment, replay []byte, err error) {
	n := s.graph.node(author)
	if n == nil {
		return nah.Moment{}, nil, nah.ErrNoPerson()
	}
	err = s.useFile(ctx, author, true, func(f *personFile) error {
		ins, err := s.stmts.get(ctx, f.path, f.db, stmtInsert)
		if err != nil {
			return err
		}
		now, done := s.settle.begin(s.now)
		defer done()
		m = nah.Moment{ID: nah.NewMomentID(now), Author: author, CreatedAt: now}
		if idem == nil {
			res, err := ins.ExecContext(ctx, m.ID, m.CreatedAt, body)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				if err := inTx(ctx, f, func(tx *sql.Tx) error { return s.mlsMoment(ctx, tx, m, body) }); err != nil {
					return err
				}
			}
		} else {
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if replay, err = idemFind(ctx, tx, idem); err != nil || replay != nil {
				return err
			}
			res, err := tx.StmtContext(ctx, ins).ExecContext(ctx, m.ID, m.CreatedAt, body)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				if err := s.mlsMoment(ctx, tx, m, body); err != nil {
					return err
				}
			}
			if err := idemSave(ctx, tx, idem, m, now); err != nil {
				return err
			}
			if err := tx.Commit(); err != nil {
				return err
			}
		}
		n.raiseNewest(now)
		n.checked.Store(now)
		s.markDirty(author, n.newest.Load(), 1)
		m.Body = bytes.Clone(body)
		s.headAfterPost(n, m)
		m.Body = nil
		return nil
	})
	if err != nil || replay != nil {
		return nah.Moment{}, replay, err
	}
	return m, nil, nil
}

// DeleteMoment deletes moment id of author. A moment that is not author's
// is NotFound, exactly like a missing one.
func (s *Store) DeleteMoment(ctx context.Context, author, id string) error {
	notFound := nah.Errorf(nah.NotFound, "", "no such moment")
	if !nah.ValidMomentID(id) {
		return notFound
	}
	n := s.graph.node(author)
	if n == nil {
		return notFound
	}
	return s.useFile(ctx, author, true, func(f *personFile) error {
		before := n.newest.Load()
		res, err := f.db.ExecContext(ctx, `DELETE FROM moments WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if k, _ := res.RowsAffected(); k == 0 {
			return notFound
		}
		// Counted at once: the delete is committed whatever follows.
		s.markDirty(author, 0, -1)
		// The newest time may now be too new; an overestimate only costs a
		// visit, but keep it true when it is cheap to know.
		newest, known := s.headAfterDelete(n, id)
		if !known {
			if newest, err = readNewest(ctx, f.db); err != nil {
				return err
			}
		}
		// Lower it only if no post raised it meanwhile.
		if n.newest.CompareAndSwap(before, newest) {
			n.checked.Store(s.now().UnixMilli())
		}
		return nil
	})
}

func readNewest(ctx context.Context, db *sql.DB) (int64, error) {
	var at int64
	err := db.QueryRowContext(ctx, `SELECT created_at FROM moments ORDER BY id DESC LIMIT 1`).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return at, err
}

// Moments appends to dst up to limit whole moments of author older than
// before, newest first, bodies included: the plain, uncached read. The feed
// does not use it (it reads heads, then keys first); tests use it as the
// oracle of the feed and of heads, and the benchmark of the whole-rows shape.
func (s *Store) Moments(ctx context.Context, author string, before *nah.Cursor, limit int, dst []nah.Moment) ([]nah.Moment, error) {
	bound, op := nah.MomentIDCeiling, "<"
	if before != nil {
		var eq bool
		if bound, eq = nah.IDBound(before.At, before.ID, before.Inclusive(author, false)); eq {
			op = "<="
		}
	}
	err := s.useFile(ctx, author, false, func(f *personFile) error {
		rows, err := f.db.QueryContext(ctx, `SELECT id, created_at, body FROM moments
			WHERE id `+op+` ? ORDER BY id DESC LIMIT ?`, bound, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			m := nah.Moment{Author: author}
			if err := rows.Scan(&m.ID, &m.CreatedAt, &m.Body); err != nil {
				return err
			}
			dst = append(dst, m)
		}
		return rows.Err()
	})
	return dst, err
}

// MomentCount counts a person's moments in their file.
func (s *Store) MomentCount(ctx context.Context, id string) (int, error) {
	var n int
	err := s.useFile(ctx, id, false, func(f *personFile) error {
		return f.db.QueryRowContext(ctx, `SELECT count(*) FROM moments`).Scan(&n)
	})
	return n, err
}

// ImportMoments writes moments (with their own ids and times) into author's
// file in one transaction, for fixtures. Ids and times are the caller's; ids
// must be valid.
func (s *Store) ImportMoments(ctx context.Context, author string, ms []nah.Moment) error {
	n := s.graph.node(author)
	if n == nil {
		return nah.ErrNoPerson()
	}
	var newest int64
	err := s.useFile(ctx, author, true, func(f *personFile) error {
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
		for _, m := range ms {
			if !nah.ValidMomentID(m.ID) {
				return nah.Errorf(nah.Invalid, "invalid_id", "%q is not a moment id", m.ID)
			}
			if _, err := stmt.ExecContext(ctx, m.ID, m.CreatedAt, m.Body); err != nil {
				return err
			}
			newest = max(newest, m.CreatedAt)
		}
		return tx.Commit()
	})
	if err != nil {
		return err
	}
	n.raiseNewest(newest)
	s.markDirty(author, n.newest.Load(), int64(len(ms)))
	s.dropHead(n)
	return nil
}
