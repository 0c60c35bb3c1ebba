package store

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"

	"github.com/nah-app/nah"
)

// roomCheckEvery is how many moments are copied between two checks of the
// new file's size against the room left in the quota: at 64 KiB a body,
// the copy passes the quota by at most 4 MiB before it stops.
const roomCheckEvery = 64

// fileBytes is the size of dst's database as its transaction q sees it,
// uncommitted pages included: what the copy has written.
func fileBytes(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (int64, error) {
	var pages, size int64
	err := q.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages)
	if err == nil {
		err = q.QueryRowContext(ctx, "PRAGMA page_size").Scan(&size)
	}
	return pages * size, err
}

func overQuota(quota int64) error {
	return nah.Errorf(nah.QuotaExceeded, "", "the export holds more than the quota of %d bytes", quota)
}

// copyMoments copies every moment of src into dst in one transaction and
// returns how many and the newest time. Every value is bounded in SQL
// before it is read, and ids are checked again here: they come from
// another machine. The copy stops with QuotaExceeded once dst's database
// passes room bytes.
func copyMoments(ctx context.Context, src *untrustedDB, dst *sql.DB, maxBody int, latest, room, quota int64) (n int, newest int64, err error) {
	var (
		id string
		at int64
	)
	rows, err := src.QueryContext(ctx, `SELECT id, created_at, body FROM moments WHERE `+momentBounded, maxBody, nah.IDLen)
	if err != nil {
		return 0, 0, badExport("person.db has no readable moments: %v", err)
	}
	defer rows.Close()
	tx, err := dst.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO moments(id, created_at, body) VALUES (?, ?, ?)`)
	if err != nil {
		return 0, 0, err
	}
	defer stmt.Close()
	var body []byte
	for rows.Next() {
		if err := rows.Scan(&id, &at, &body); err != nil {
			return 0, 0, badExport("a moment of person.db: %v", err)
		}
		t, ok := nah.MomentTime(id)
		if !ok || at <= 0 || at > latest || len(body) < 1 || len(body) > maxBody {
			return 0, 0, badExport("a moment of person.db has an invalid id or time (%s)", short(id))
		}
		// Pages are in the ids' order, which is the times' only when each
		// time is its id's (migrations/person/0005_moments_by_id.sql).
		if t != at {
			return 0, 0, badExport("moment %s of person.db has the time %d, not its id's %d", short(id), at, t)
		}
		if _, err := stmt.ExecContext(ctx, id, at, body); err != nil {
			if isUniqueViolation(err) {
				return 0, 0, badExport("person.db holds moment %s twice", short(id))
			}
			return 0, 0, err
		}
		n++
		newest = max(newest, at)
		if n%roomCheckEvery == 0 {
			if written, err := fileBytes(ctx, tx); err != nil {
				return 0, 0, err
			} else if written > room {
				return 0, 0, overQuota(quota)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, badExport("reading person.db's moments: %v", err)
	}
	if written, err := fileBytes(ctx, tx); err != nil {
		return 0, 0, err
	} else if written > room {
		return 0, 0, overQuota(quota)
	}
	return n, newest, tx.Commit()
}

// mediaBounded is the SQL test of a media row of an untrusted file, as
// momentBounded: ?1 is nah.IDLen.
const mediaBounded = `typeof(id) = 'text' AND octet_length(id) = ?1 AND typeof(size) = 'integer' AND size > 0
	AND typeof(sha256) = 'text' AND octet_length(sha256) = 64
	AND typeof(content_type) = 'text' AND octet_length(content_type) BETWEEN 1 AND 255
	AND typeof(created_at) = 'integer'`

// copyMedia copies the media rows of src into dst, one row at a time,
// moving each one's file from tmp into the person's folder dir: every row
// must have its file, with the size and sha256 it says, and every file a
// row. The rows commit after every file is moved and dir fsynced, so a row
// never points to a missing file.
func copyMedia(ctx context.Context, src *untrustedDB, dst *sql.DB, files *tarMedia, tmp, dir string, latest int64) error {
	if src.version < mediaVersion {
		if files.count != 0 {
			return badExport("the tar holds %d media files and person.db has no media", files.count)
		}
		return nil
	}
	rows, err := src.QueryContext(ctx, `SELECT id, size, sha256, content_type, created_at FROM media WHERE `+mediaBounded, nah.IDLen)
	if err != nil {
		return badExport("person.db has no readable media: %v", err)
	}
	defer rows.Close()
	tx, err := dst.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO media(id, size, sha256, content_type, created_at) VALUES (?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	n := 0
	var m nah.Media
	for rows.Next() {
		if err := rows.Scan(&m.ID, &m.Size, &m.SHA256, &m.ContentType, &m.CreatedAt); err != nil {
			return badExport("a media row of person.db: %v", err)
		}
		f, ok, err := files.get(ctx, m.ID)
		if err != nil {
			return err
		}
		if !ok || f.Size != m.Size || f.SHA256 != m.SHA256 {
			return badExport("media %s of person.db has no file of its size and sha256 in the tar", short(m.ID))
		}
		if strings.ContainsFunc(m.ContentType, func(r rune) bool { return r < ' ' || r > '~' }) || m.CreatedAt <= 0 || m.CreatedAt > latest {
			return badExport("media %s of person.db has an invalid type or time", short(m.ID))
		}
		if _, err := stmt.ExecContext(ctx, m.ID, m.Size, m.SHA256, m.ContentType, m.CreatedAt); err != nil {
			if isUniqueViolation(err) {
				return badExport("person.db holds media %s twice", short(m.ID))
			}
			return err
		}
		if n == 0 {
			if err := os.Mkdir(dir, privateDir); err != nil {
				return err
			}
		}
		if err := os.Rename(filepath.Join(tmp, m.ID), filepath.Join(dir, m.ID)); err != nil {
			return err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return badExport("reading person.db's media: %v", err)
	}
	if n != files.count {
		return badExport("the tar holds %d media files for %d rows", files.count, n)
	}
	if n == 0 {
		return nil
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	return tx.Commit()
}
