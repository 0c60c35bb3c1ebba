package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/nah-app/nah"
)

// A person file from elsewhere (an import's person.db) is read like
// untrusted JSON: through one connection whose SQLite limits are set before
// its first statement, only when its schema is exactly the one this
// binary's migrations make, and with every value bounded in SQL (length,
// type) before it is read into Go. Its rows are copied into a file made by
// our own migrations; the file itself is never moved in.

// untrustedSchemaMaxBytes bounds one statement or value of the file's own
// schema and of the queries run on it: our migrations' longest statement
// is under 300 bytes.
const untrustedSchemaMaxBytes = 64 << 10

// untrustedDB is a person file from elsewhere, open for reading.
type untrustedDB struct {
	db *sql.DB
	*sql.Conn
	version int // PRAGMA user_version, once checkUntrustedSchema passed
}

func (u *untrustedDB) Close() error {
	u.Conn.Close()
	return u.db.Close()
}

// openUntrusted opens the person file at p read-only, with no pragma run
// before the limits: SQLITE_LIMIT_LENGTH at maxValue (the largest value a
// caller reads: a moment's body), statements and schema at
// untrustedSchemaMaxBytes, no attached databases, shallow expressions and
// triggers. A value over the length limit is then an error, never an
// allocation of its size, whatever the file's schema computes.
func openUntrusted(ctx context.Context, p string, maxValue int) (*untrustedDB, error) {
	if err := configureSQLite(); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", p)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	c, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, badExport("person.db cannot be opened: %v", err)
	}
	u := &untrustedDB{db: db, Conn: c}
	limits := []struct{ id, v int }{
		{sqlite3.SQLITE_LIMIT_LENGTH, max(maxValue, untrustedSchemaMaxBytes)},
		{sqlite3.SQLITE_LIMIT_SQL_LENGTH, untrustedSchemaMaxBytes},
		{sqlite3.SQLITE_LIMIT_SCHEMA, untrustedSchemaMaxBytes},
		{sqlite3.SQLITE_LIMIT_COLUMN, 64},
		{sqlite3.SQLITE_LIMIT_EXPR_DEPTH, 64},
		{sqlite3.SQLITE_LIMIT_PARSER_DEPTH, 64},
		{sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, 4},
		{sqlite3.SQLITE_LIMIT_FUNCTION_ARG, 8},
		{sqlite3.SQLITE_LIMIT_ATTACHED, 0},
		{sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH, 1},
		{sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 64},
		{sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 16},
	}
	for _, l := range limits {
		if _, err := sqlite.Limit(c, l.id, l.v); err != nil {
			u.Close()
			return nil, err
		}
	}
	// trusted_schema off: no function with side effects runs from the
	// file's schema; query_only: nothing we run writes it.
	for _, pragma := range []string{"PRAGMA trusted_schema = 0", "PRAGMA query_only = 1", "PRAGMA cache_size = -" + strconv.Itoa(personCacheKiB)} {
		if _, err := c.ExecContext(ctx, pragma); err != nil {
			u.Close()
			return nil, badExport("person.db is not a readable SQLite database: %v", err)
		}
	}
	return u, nil
}

// schemaEntry is one row of sqlite_schema.
type schemaEntry struct {
	typ, name, table string
	sql              sql.NullString
}

// readSchema returns db's sqlite_schema, by name. Every value is bounded
// by the connection's length limit.
func readSchema(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) ([]schemaEntry, error) {
	rows, err := q.QueryContext(ctx, `SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name, type`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var es []schemaEntry
	for rows.Next() {
		var e schemaEntry
		if err := rows.Scan(&e.typ, &e.name, &e.table, &e.sql); err != nil {
			return nil, err
		}
		es = append(es, e)
		if len(es) > 64 {
			return nil, fmt.Errorf("more than 64 schema entries")
		}
	}
	return es, rows.Err()
}

// schemaAt returns the schema migs make at version v (want) and at their
// last (all), made in a database in memory.
func schemaAt(ctx context.Context, migs []migration, v int) (want, all []schemaEntry, err error) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return nil, nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for i, m := range migs {
		if i == v {
			if want, err = readSchema(ctx, db); err != nil {
				return nil, nil, err
			}
		}
		if _, err := db.ExecContext(ctx, m.sql); err != nil {
			return nil, nil, fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	if all, err = readSchema(ctx, db); err != nil {
		return nil, nil, err
	}
	if v == len(migs) {
		want = all
	}
	return want, all, nil
}

// litestreamTables is Litestream's two tables among es (person migration
// 3's statements, Litestream's own).
func litestreamTables(es []schemaEntry) []schemaEntry {
	var out []schemaEntry
	for _, e := range es {
		if e.name == "_litestream_seq" || e.name == "_litestream_lock" {
			out = append(out, e)
		}
	}
	return out
}

// personSchema returns the schema our migrations make at version v, made
// in a database in memory. extra is what may be there besides at v:
// Litestream's two tables (migration 3's statements), which Litestream
// itself made in files watched before that migration.
func personSchema(ctx context.Context, v int) (want, extra []schemaEntry, err error) {
	want, all, err := schemaAt(ctx, personMigrations, v)
	if err != nil || v == len(personMigrations) {
		return want, nil, err
	}
	return want, litestreamTables(all), nil
}

// sameSchema refuses got, file's schema, unless it is want with any of
// extra besides.
func sameSchema(got, want, extra []schemaEntry, file string, bad func(format string, args ...any) error) error {
	for _, e := range got {
		if !slices.Contains(want, e) && !slices.Contains(extra, e) {
			return bad("%s's schema is not this server's: %s %s is %s", file, e.typ, short(e.name), short(e.sql.String))
		}
	}
	for _, e := range want {
		if !slices.Contains(got, e) {
			return bad("%s's schema is not this server's: %s %s is missing", file, e.typ, e.name)
		}
	}
	return nil
}

// checkUntrustedSchema refuses a file whose schema is not exactly what our
// migrations make at its own user_version: any other table, column
// (generated or not), index, view, virtual table or trigger, or any other
// statement for ours.
func checkUntrustedSchema(ctx context.Context, u *untrustedDB) (version int, err error) {
	return checkSchemaAs(ctx, u, badExport)
}

// checkSchemaAs is checkUntrustedSchema with bad making its errors.
func checkSchemaAs(ctx context.Context, u *untrustedDB, bad func(format string, args ...any) error) (version int, err error) {
	if err := u.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return 0, bad("person.db is not a readable SQLite database: %v", err)
	}
	if version > len(personMigrations) {
		return 0, nah.Errorf(nah.Invalid, "export_too_new",
			"person.db's schema version is %d and this server knows up to %d: upgrade this server first", version, len(personMigrations))
	}
	if version < 1 {
		return 0, bad("person.db's schema version is %d: not a person file", version)
	}
	got, err := readSchema(ctx, u)
	if err != nil {
		return 0, bad("person.db's schema cannot be read within this server's bounds: %v", err)
	}
	want, extra, err := personSchema(ctx, version)
	if err != nil {
		return 0, err
	}
	if err := sameSchema(got, want, extra, nah.PersonFileName, bad); err != nil {
		return 0, err
	}
	u.version = version
	return version, nil
}

// checkRestoredCopy checks a person file restored from a replica, which
// whoever can write the bucket could have written, as an import's: its
// schema must be exactly ours at its version, so that no trigger, view or
// generated column of theirs runs on the server's own writes to it.
func checkRestoredCopy(ctx context.Context, p string) error {
	bad := func(format string, args ...any) error {
		return nah.Errorf(nah.Unavailable, "bad_copy", "the restored copy is not a person file of this server: "+format, args...)
	}
	u, err := openUntrusted(ctx, p, nah.DefaultMaxMomentBytes)
	if err != nil {
		return bad("%v", err)
	}
	defer u.Close()
	_, err = checkSchemaAs(ctx, u, bad)
	return err
}

// CheckRestoredDirectory checks a directory.db restored from a replica as
// checkRestoredCopy does a person's file: exactly our directory schema at
// its version (the server migrates it on), Litestream's tables besides.
func CheckRestoredDirectory(ctx context.Context, p string) error {
	bad := func(format string, args ...any) error {
		return nah.Errorf(nah.Unavailable, "bad_copy", "the restored copy is not a directory of this server: "+format, args...)
	}
	u, err := openUntrusted(ctx, p, nah.DefaultMaxMomentBytes)
	if err != nil {
		return bad("%v", err)
	}
	defer u.Close()
	var v int
	if err := u.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return bad("not a readable SQLite database: %v", err)
	}
	if v < 1 || v > len(directoryMigrations) {
		return bad("schema version %d; this server knows 1 to %d", v, len(directoryMigrations))
	}
	got, err := readSchema(ctx, u)
	if err != nil {
		return bad("its schema cannot be read within this server's bounds: %v", err)
	}
	want, _, err := schemaAt(ctx, directoryMigrations, v)
	if err != nil {
		return err
	}
	_, person, err := schemaAt(ctx, personMigrations, len(personMigrations))
	if err != nil {
		return err
	}
	return sameSchema(got, want, litestreamTables(person), nah.DirectoryRel, bad)
}

// CheckRestoredCopy is checkRestoredCopy for `nah restore`, which puts a
// whole data directory together from a replica before any server opens it.
func CheckRestoredCopy(ctx context.Context, p string) error { return checkRestoredCopy(ctx, p) }

// shortMax is how much of an untrusted value an error message repeats.
const shortMax = 64

// short returns s quoted and, past shortMax bytes, cut with its length
// said: an error page never echoes unbounded input.
func short(s string) string {
	if len(s) <= shortMax {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:shortMax]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}
