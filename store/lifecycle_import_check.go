package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/internal/integrity"
)

// openExportedDB opens the copied person.db as an untrusted file
// (lifecycle_untrusted.go) and checks it: SQLite at all, its own schema
// version (the manifest's is not trusted), exactly our schema at that
// version, brought to this binary's (migrateExported), and PRAGMA
// integrity_check. maxBody is the largest value read from it.
func openExportedDB(ctx context.Context, p string, maxBody int) (*untrustedDB, error) {
	u, err := openUntrusted(ctx, p, maxBody)
	if err != nil {
		return nil, err
	}
	if err := migrateExported(ctx, u, p, maxBody); err != nil {
		u.Close()
		return nil, err
	}
	// Sizes and values before the integrity check, which reads every row
	// of a table with an index whole, the length limit notwithstanding.
	if err := checkValues(ctx, u, maxBody); err != nil {
		u.Close()
		return nil, err
	}
	if err := checkSizes(ctx, u, maxBody); err != nil {
		u.Close()
		return nil, err
	}
	if err := checkMLS(ctx, u); err != nil {
		u.Close()
		return nil, err
	}
	if err := integrity.Check(ctx, u, 1); err != nil {
		u.Close()
		var ie *integrity.Error
		if errors.As(err, &ie) {
			return nil, badExport("person.db fails SQLite's integrity check: %s", short(ie.Problem))
		}
		return nil, badExport("person.db is not a readable SQLite database: %v", err)
	}
	return u, nil
}

// migrateExported brings the copied person.db of an export made by an
// older release up to this binary's schema, and checks it as untrusted
// either way. Before a statement of ours writes it, its schema must be
// exactly what our migrations made at its user_version (so no trigger,
// view or generated column of its own runs on our statements) and every
// value bounded (checkSizes); after, its schema must be exactly ours. p is
// the copy in the import's temporary folder, removed with it.
func migrateExported(ctx context.Context, u *untrustedDB, p string, maxBody int) error {
	v, err := checkUntrustedSchema(ctx, u)
	if err != nil || v == len(personMigrations) {
		return err
	}
	if err := checkSizes(ctx, u, maxBody); err != nil {
		return err
	}
	if _, err := u.ExecContext(ctx, "PRAGMA query_only = 0"); err != nil {
		return err
	}
	if err := migrate(ctx, u.Conn, p, personMigrations, nil); err != nil {
		return badExport("person.db of schema version %d cannot be brought to this server's %d: %v", v, len(personMigrations), err)
	}
	if _, err := u.ExecContext(ctx, "PRAGMA query_only = 1"); err != nil {
		return err
	}
	_, err = checkUntrustedSchema(ctx, u)
	return err
}

// untrustedValueMax bounds every value of an imported person.db but a
// moment's body: ids are 26 bytes, hashes 64, content types and idempotency
// keys at most 255, a stored answer under 600 (store/person_idem.go).
const untrustedValueMax = 4 << 10

// checkSizes refuses a file with a value over its bound in any column of
// any table, the tables the import does not copy included: maxBody for a
// moment's body, untrustedValueMax for every other. octet_length reads a
// size from the record's header, so nothing is read whole before this
// passes: SQLite's integrity check reads whole every row of a table with
// an index, past SQLITE_LIMIT_LENGTH (a 300 MB idempotency answer took an
// import from 23 to 318 MB of resident memory, measured with
// TestImportHugeIdempotencyValue's file).
func checkSizes(ctx context.Context, u *untrustedDB, maxBody int) error {
	var tables []string
	rows, err := u.QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name`)
	if err != nil {
		return badExport("person.db's tables cannot be listed: %v", err)
	}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return badExport("person.db's tables cannot be listed: %v", err)
		}
		tables = append(tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return badExport("person.db's tables cannot be listed: %v", err)
	}
	quote := func(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }
	for _, t := range tables {
		var cols []string
		rows, err := u.QueryContext(ctx, `SELECT name FROM pragma_table_info(?1) ORDER BY cid`, t)
		if err != nil {
			return badExport("person.db's table %s cannot be read: %v", short(t), err)
		}
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				rows.Close()
				return badExport("person.db's table %s cannot be read: %v", short(t), err)
			}
			cols = append(cols, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return badExport("person.db's table %s cannot be read: %v", short(t), err)
		}
		if len(cols) == 0 {
			continue
		}
		var which, over []string
		for _, c := range cols {
			limit := untrustedValueMax
			if t == "moments" && c == "body" {
				limit = maxBody
			} else if l, ok := mlsColumnMax[t+"."+c]; ok {
				limit = l
			}
			test := fmt.Sprintf("octet_length(%s) > %d", quote(c), limit)
			which = append(which, fmt.Sprintf("WHEN %s THEN '%s' || ' of ' || octet_length(%s) || ' bytes, over %d'", test, strings.ReplaceAll(c, "'", "''"), quote(c), limit))
			over = append(over, test)
		}
		var what string
		err = u.QueryRowContext(ctx, `SELECT CASE `+strings.Join(which, " ")+` END FROM `+quote(t)+
			` WHERE `+strings.Join(over, " OR ")+` LIMIT 1`).Scan(&what)
		switch {
		case err == nil:
			return badExport("a value of person.db is too large: %s.%s", t, what)
		case !errors.Is(err, sql.ErrNoRows):
			return badExport("person.db's table %s cannot be read: %v", short(t), err)
		}
	}
	return nil
}

// momentBounded is the SQL test of a moment row of an untrusted file, run
// before any of its values is read: ?1 is the largest body, ?2 nah.IDLen.
// octet_length reads a value's size from its record header, not the value.
const momentBounded = `typeof(id) = 'text' AND octet_length(id) = ?2 AND typeof(created_at) = 'integer'
	AND typeof(body) = 'blob' AND octet_length(body) BETWEEN 1 AND ?1`

// mediaVersion is the schema version that has media
// (migrations/person/0002_media.sql).
const mediaVersion = 2

// checkValues refuses a file with any row that is not bounded as
// momentBounded and mediaBounded say, naming the first one, with no more
// of its id than its first 64 bytes, read only when it is that short.
func checkValues(ctx context.Context, u *untrustedDB, maxBody int) error {
	var (
		id               string
		size             sql.NullInt64
		atType, bodyType string
	)
	err := u.QueryRowContext(ctx, `SELECT CASE WHEN typeof(id) = 'text' AND octet_length(id) <= 64 THEN id
			ELSE typeof(id) || ' of ' || octet_length(id) || ' bytes' END,
		typeof(created_at), typeof(body), octet_length(body)
		FROM moments WHERE NOT (`+momentBounded+`) LIMIT 1`, maxBody, nah.IDLen).Scan(&id, &atType, &bodyType, &size)
	switch {
	case err == nil:
		return badExport("moment %s of person.db is not a moment: an id (text of %d bytes), a time (integer, not %s) and a body of 1 to %d bytes (blob, not %s of %d)",
			short(id), nah.IDLen, atType, maxBody, bodyType, size.Int64)
	case !errors.Is(err, sql.ErrNoRows):
		return badExport("person.db has no readable moments: %v", err)
	}
	if u.version < mediaVersion {
		return nil
	}
	err = u.QueryRowContext(ctx, `SELECT CASE WHEN typeof(id) = 'text' AND octet_length(id) <= 64 THEN id
		ELSE typeof(id) || ' of ' || octet_length(id) || ' bytes' END FROM media WHERE NOT (`+mediaBounded+`) LIMIT 1`, nah.IDLen).Scan(&id)
	switch {
	case err == nil:
		return badExport("media %s of person.db is not a media row (an id, a size of at least 1 byte as an upload's, a sha256, a content type of 1 to 255 bytes, a time)", short(id))
	case !errors.Is(err, sql.ErrNoRows):
		return badExport("person.db has no readable media: %v", err)
	}
	return nil
}
