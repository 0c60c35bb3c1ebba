package store

import (
	"context"
	"database/sql"
	"sync"
)

// insertMoment is the post's one statement. It inserts nothing when the
// person has an MLS group (mls_moment.go): such a moment is checked first.
const insertMoment = `INSERT INTO moments(id, created_at, body) SELECT ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM mls_group)`

// inserts keeps insertMoment prepared on each open person file: parsing it
// again for every post showed in the server's CPU in the 16-writer phase
// (bench/THRESHOLDS.md). One entry per open file
// (AfterClose forgets it), ~2.2 KB of SQLite memory each (50 files
// measured), inside perFileBytes.
type inserts struct {
	mu sync.Mutex
	m  map[string]preparedInsert // by file path
}

type preparedInsert struct {
	db   *sql.DB
	stmt *sql.Stmt
}

// get returns insertMoment prepared on db, the open handle of path.
func (in *inserts) get(ctx context.Context, path string, db *sql.DB) (*sql.Stmt, error) {
	in.mu.Lock()
	e, ok := in.m[path]
	in.mu.Unlock()
	if ok && e.db == db {
		return e.stmt, nil
	}
	stmt, err := db.PrepareContext(ctx, insertMoment)
	if err != nil {
		return nil, err
	}
	in.mu.Lock()
	if in.m == nil {
		in.m = make(map[string]preparedInsert)
	}
	old, had := in.m[path]
	if had && old.db == db {
		// Two first posts to this handle prepared at once: one statement
		// is kept, and the other post may be using it now.
		in.mu.Unlock()
		stmt.Close()
		return old.stmt, nil
	}
	in.m[path] = preparedInsert{db: db, stmt: stmt}
	in.mu.Unlock()
	if had {
		old.stmt.Close() // of a handle since closed
	}
	return stmt, nil
}

// forget drops path's statement once its handle is closed; the close
// finalized it on the connection. It is not closed here: a close that
// lands after the file was opened again would close the new handle's
// statement under a post (the next get prepares one again).
func (in *inserts) forget(path string) {
	in.mu.Lock()
	delete(in.m, path)
	in.mu.Unlock()
}
