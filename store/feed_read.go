package store

import (
	"context"
	"database/sql"
	"strings"

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
			rows, err = f.db.QueryContext(ctx, keysBetween[b2i(hiEq)][b2i(!loEq)], hi, lo, limit)
		case before == nil:
			rows, err = f.db.QueryContext(ctx, keysAll, limit)
		default:
			b, eq := nah.IDBound(before.At, before.ID, before.Inclusive(author, false))
			rows, err = f.db.QueryContext(ctx, keysBefore[b2i(eq)], b, limit)
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

// The keys queries, in the primary key's order (the ids' is their times',
// migrations/person/0005_moments_by_id.sql). A bound includes the moment
// at exactly the cursor when nah.IDBound says so: keysBefore[1] is `<=`,
// keysBetween[i][1] is `>=`.
const (
	keysSelect = `SELECT id, created_at FROM moments `
	keysOrder  = `ORDER BY id DESC LIMIT ?`
	keysAll    = keysSelect + keysOrder
)

var (
	keysBefore  = [2]string{keysSelect + `WHERE id < ? ` + keysOrder, keysSelect + `WHERE id <= ? ` + keysOrder}
	keysBetween = [2][2]string{
		{keysSelect + `WHERE id < ? AND id > ? ` + keysOrder, keysSelect + `WHERE id < ? AND id >= ? ` + keysOrder},
		{keysSelect + `WHERE id <= ? AND id > ? ` + keysOrder, keysSelect + `WHERE id <= ? AND id >= ? ` + keysOrder},
	}
)

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
		p.args = p.args[:0]
		for _, id := range ids {
			p.args = append(p.args, id)
		}
		rows, err := f.db.QueryContext(ctx, bodiesQuery(len(ids)), p.args...)
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

// bodiesQueries holds the IN (...) query text for each count up to the
// largest page, built once.
var bodiesQueries = func() []string {
	qs := make([]string, nah.FeedPageMax+2)
	for n := 1; n < len(qs); n++ {
		qs[n] = `SELECT id, body FROM moments WHERE id IN (?` + strings.Repeat(",?", n-1) + `)`
	}
	return qs
}()

func bodiesQuery(n int) string {
	if n < len(bodiesQueries) {
		return bodiesQueries[n]
	}
	return `SELECT id, body FROM moments WHERE id IN (?` + strings.Repeat(",?", n-1) + `)`
}
