package store

import (
	"context"
	"database/sql"

	"github.com/nah-app/nah"
)

// momentKeys appends to dst up to limit keys of author's moments strictly
// older than before and newer than after (no bound when nil), newest
// first, through the primary key alone.
func (s *Store) momentKeys(ctx context.Context, author string, before, after *nah.Cursor, limit int, dst []momentKey) ([]momentKey, error) {
	_, err := s.withFile(ctx, author, func(f *personFile) error {
		s.fileReads.Add(1)
		var rows *sql.Rows
		var err error
		switch {
		case after != nil:
			hi, hiEq := nah.MomentIDCeiling, false
			if before != nil {
				hi, hiEq = nah.IDBound(before.At, before.ID, before.Inclusive(author, false))
			}
			// Newer than after (or at it when inclusive) is the complement of
			// older or at it (older only).
			lo, loEq := nah.IDBound(after.At, after.ID, !after.Inclusive(author, true))
			rows, err = s.query(ctx, f, stmtKeysBetween+stmt(2*b2i(hiEq)+b2i(!loEq)), hi, lo, limit)
		case before == nil:
			rows, err = s.query(ctx, f, stmtKeysAll, limit)
		default:
			b, eq := nah.IDBound(before.At, before.ID, before.Inclusive(author, false))
			rows, err = s.query(ctx, f, stmtKeysBefore+stmt(b2i(eq)), b, limit)
		}
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			k := momentKey{Author: author}
			if err := rows.Scan(&k.ID, &k.CreatedAt); err != nil {
				return err
			}
			dst = append(dst, k)
		}
		return rows.Err()
	})
	return dst, err
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// momentBodies reads the bodies of moments ids of author and calls fn for
// each one found (a moment deleted since its key was read is skipped) until
// fn returns false. The body passed to fn is only valid during the call.
func (s *Store) momentBodies(ctx context.Context, p *Page, author string, ids []string, fn func(id string, body []byte) bool) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := s.withFile(ctx, author, func(f *personFile) error {
		p.idsJSON = idsJSON(p.idsJSON[:0], ids)
		rows, err := s.query(ctx, f, stmtBodies, p.idsJSON)
		if err != nil {
			return err
		}
		defer rows.Close()
		var id string
		var body sql.RawBytes
		for rows.Next() {
			if err := rows.Scan(&id, &body); err != nil {
				return err
			}
			if !fn(id, body) {
				return nil
			}
		}
		return rows.Err()
	})
	return err
}

// query runs statement which, kept prepared on f (stmts), with args.
func (s *Store) query(ctx context.Context, f *personFile, which stmt, args ...any) (*sql.Rows, error) {
	st, err := s.stmts.get(ctx, f.path, f.db, which)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}
