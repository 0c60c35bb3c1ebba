package store

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/nah-app/nah"
)

// What the admin console reads. None of it is on a hot path.

// ListPeople returns up to limit people whose handle starts with prefix,
// by handle, after skipping offset; and how many match in all.
func (s *Store) ListPeople(ctx context.Context, prefix string, offset, limit int) ([]nah.Person, int, error) {
	like := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + "%"
	var total int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM people WHERE handle LIKE ? ESCAPE '\'`, like).Scan(&total); err != nil {
		return nil, 0, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+personCols+` FROM people WHERE handle LIKE ? ESCAPE '\' ORDER BY handle LIMIT ? OFFSET ?`, like, limit, offset)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var ps []nah.Person
	for rows.Next() {
		var p nah.Person
		if err := scanPerson(rows, &p); err != nil {
			return nil, 0, err
		}
		s.freshNewest(&p)
		ps = append(ps, p)
	}
	return ps, total, rows.Err()
}

// Totals are the overview's counts.
type Totals struct {
	People       int
	Moments      int64
	StorageBytes int64
}

// Totals counts people and moments (from the directory, up to a second
// behind) and the bytes of the data directory on disk.
func (s *Store) Totals(ctx context.Context) (Totals, error) {
	var t Totals
	if err := s.r.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(moments), 0) FROM people`).Scan(&t.People, &t.Moments); err != nil {
		return t, err
	}
	err := filepath.WalkDir(s.dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if e.Type().IsRegular() {
			if info, err := e.Info(); err == nil {
				t.StorageBytes += info.Size()
			}
		}
		return nil
	})
	return t, err
}

// MomentCount counts a person's moments in their file.
func (s *Store) MomentCount(ctx context.Context, id string) (int, error) {
	f, err := s.files.acquire(ctx, id, false)
	if err != nil {
		return 0, err
	}
	defer s.files.release(f)
	var n int
	err = f.db.QueryRowContext(ctx, `SELECT count(*) FROM moments`).Scan(&n)
	return n, err
}

// Session is one signed-in device of a person, named by a prefix of its
// token's hash (the token itself is never stored).
type Session struct {
	ID        string
	CreatedAt int64
}

// Sessions lists a person's sessions, newest first.
func (s *Store) Sessions(ctx context.Context, person string) ([]Session, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT token_hash, created_at FROM sessions WHERE person_id = ? ORDER BY created_at DESC`, person)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ss []Session
	for rows.Next() {
		var h []byte
		var se Session
		if err := rows.Scan(&h, &se.CreatedAt); err != nil {
			return nil, err
		}
		se.ID = hex.EncodeToString(h[:8])
		ss = append(ss, se)
	}
	return ss, rows.Err()
}

// RevokeSessions revokes a person's session id (from Sessions), or all of
// them when id is empty.
func (s *Store) RevokeSessions(ctx context.Context, person, id string) error {
	var err error
	if id == "" {
		_, err = s.w.ExecContext(ctx, `DELETE FROM sessions WHERE person_id = ?`, person)
	} else {
		b, herr := hex.DecodeString(id)
		if herr != nil || len(b) != 8 {
			return nah.Errorf(nah.NotFound, "", "no such session")
		}
		var res sql.Result
		res, err = s.w.ExecContext(ctx, `DELETE FROM sessions WHERE person_id = ? AND substr(token_hash, 1, 8) = ?`, person, b)
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

// JoinCodes lists join codes, newest first.
func (s *Store) JoinCodes(ctx context.Context, limit int) ([]JoinCode, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT hex(code_hash), hint, created_at, expires_at, coalesce(used_by, ''), coalesce(used_at, 0), coalesce(revoked_at, 0)
		FROM join_codes ORDER BY created_at DESC LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cs []JoinCode
	for rows.Next() {
		var c JoinCode
		var h string
		if err := rows.Scan(&h, &c.Hint, &c.CreatedAt, &c.ExpiresAt, &c.UsedBy, &c.UsedAt, &c.RevokedAt); err != nil {
			return nil, err
		}
		c.ID = strings.ToLower(h[:16])
		cs = append(cs, c)
	}
	return cs, rows.Err()
}

// RevokeJoinCode revokes an unused join code by its ID (from JoinCodes).
func (s *Store) RevokeJoinCode(ctx context.Context, id string) error {
	b, err := hex.DecodeString(id)
	if err != nil || len(b) != 8 {
		return nah.Errorf(nah.NotFound, "", "no such join code")
	}
	res, err := s.w.ExecContext(ctx, `UPDATE join_codes SET revoked_at = ? WHERE substr(code_hash, 1, 8) = ? AND revoked_at IS NULL AND used_by IS NULL`,
		s.now().UnixMilli(), b)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nah.Errorf(nah.NotFound, "", "no such unused join code")
	}
	return nil
}
