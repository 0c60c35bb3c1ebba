// Package integrity runs SQLite's integrity check on an open database and
// says what it found, the same way for every caller: a person's export and
// import in store, a restore and the restore drill in backup. It does not
// open the file, since each caller opens it its own way (read-only, with
// or without the store's pragmas), and it imports no driver.
package integrity

import (
	"context"
	"database/sql"
	"fmt"
)

// Querier is what Check needs of a database: *sql.DB, *sql.Conn and *sql.Tx
// have it.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Error is a database that SQLite's check found unsound. Problem is the
// first problem it named.
type Error struct {
	Problem string
}

func (e *Error) Error() string { return "integrity check: " + e.Problem }

// Check runs PRAGMA integrity_check on db: nil when SQLite answers "ok", an
// *Error naming the first problem when it does not, and the query's error,
// wrapped, when the check could not run (not a database, ctx done). The
// check stops after limit problems; 0 is SQLite's own bound of 100, and 1
// stops at the first, the cheapest answer for a file that may be hostile.
func Check(ctx context.Context, db Querier, limit int) error {
	q := "PRAGMA integrity_check"
	if limit > 0 {
		q = fmt.Sprintf("PRAGMA integrity_check(%d)", limit)
	}
	var res string
	if err := db.QueryRowContext(ctx, q).Scan(&res); err != nil {
		return fmt.Errorf("integrity check: %w", err)
	}
	if res != "ok" {
		return &Error{Problem: res}
	}
	return nil
}
