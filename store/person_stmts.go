package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"sync"

	"github.com/nah-app/nah"
)

// insertMoment is the post's one statement. It inserts nothing when the
// person has an MLS group (mls_moment.go): such a moment is checked first.
const insertMoment = `INSERT INTO moments(id, created_at, body) SELECT ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM mls_group)`

// The keys queries of a feed, in the primary key's order (the ids' is
// their times', migrations/person/0005_moments_by_id.sql). A bound
// includes the moment at exactly the cursor when nah.IDBound says so.
const (
	keysSelect = `SELECT id, created_at FROM moments `
	keysOrder  = `ORDER BY id DESC LIMIT ?`
)

// bodiesByID reads the bodies of a JSON array of ids: one statement for
// any count, where an IN list with a placeholder an id was a statement
// (and a parse) per count.
const bodiesByID = `SELECT m.id, m.body FROM json_each(?) AS j JOIN moments AS m ON m.id = j.value`

// stmt names a statement kept prepared on each open person file.
type stmt int

const (
	stmtInsert     stmt = iota
	stmtKeysAll         // the newest
	stmtKeysBefore      // + b2i(inclusive): id < ?, id <= ?
	_
	stmtKeysBetween // + 2*b2i(upper inclusive) + b2i(lower inclusive)
	_
	_
	_
	stmtBodies
	stmtCount
)

var stmtText = [stmtCount]string{
	stmtInsert:          insertMoment,
	stmtKeysAll:         keysSelect + keysOrder,
	stmtKeysBefore:      keysSelect + `WHERE id < ? ` + keysOrder,
	stmtKeysBefore + 1:  keysSelect + `WHERE id <= ? ` + keysOrder,
	stmtKeysBetween:     keysSelect + `WHERE id < ? AND id > ? ` + keysOrder,
	stmtKeysBetween + 1: keysSelect + `WHERE id < ? AND id >= ? ` + keysOrder,
	stmtKeysBetween + 2: keysSelect + `WHERE id <= ? AND id > ? ` + keysOrder,
	stmtKeysBetween + 3: keysSelect + `WHERE id <= ? AND id >= ? ` + keysOrder,
	stmtBodies:          bodiesByID,
}

// stmts keeps the post's and the feed's statements prepared on each open
// person file, each on first use: parsing and planning them again for
// every call was a fifth of the server's CPU at 50 feed readers on a
// restarted people-1k, and showed in the post's (bench/THRESHOLDS.md).
// One entry per open file (AfterClose forgets it); 1.9-2.8 KB of SQLite
// memory a statement (50 files measured), 20 KB for all nine, 6-7 KB for
// the two or three most files use: inside perFileBytes.
type stmts struct {
	mu sync.Mutex
	m  map[string]*fileStmts // by file path
}

// fileStmts is one open handle's statements.
type fileStmts struct {
	db *sql.DB
	s  [stmtCount]*sql.Stmt
}

// get returns statement which prepared on db, the open handle of path.
func (st *stmts) get(ctx context.Context, path string, db *sql.DB, which stmt) (*sql.Stmt, error) {
	st.mu.Lock()
	e := st.m[path]
	if e != nil && e.db == db && e.s[which] != nil {
		st.mu.Unlock()
		return e.s[which], nil
	}
	st.mu.Unlock()
	prepared, err := db.PrepareContext(ctx, stmtText[which])
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	if st.m == nil {
		st.m = make(map[string]*fileStmts)
	}
	e = st.m[path]
	var stale *fileStmts
	switch {
	case e != nil && e.db == db && e.s[which] != nil:
		// Two first uses on this handle prepared at once: one statement
		// is kept, and the other caller may be using it now.
		st.mu.Unlock()
		prepared.Close()
		return e.s[which], nil
	case e == nil || e.db != db:
		stale = e // of a handle since closed
		e = &fileStmts{db: db}
		st.m[path] = e
	}
	e.s[which] = prepared
	st.mu.Unlock()
	if stale != nil {
		for _, s := range stale.s {
			if s != nil {
				s.Close()
			}
		}
	}
	return prepared, nil
}

// forget drops path's statements once its handle is closed; the close
// finalized them on the connection. They are not closed here: a close
// that lands after the file was opened again would close the new
// handle's statements under a caller (the next get prepares again).
func (st *stmts) forget(path string) {
	st.mu.Lock()
	delete(st.m, path)
	st.mu.Unlock()
}

// idsJSON appends ids as a JSON array of strings to dst. An id of nah's
// alphabet (nah.ValidMomentID) needs no escaping; any other is read from
// a file, so it is encoded as JSON spells it.
func idsJSON(dst []byte, ids []string) []byte {
	dst = append(dst, '[')
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		if nah.ValidMomentID(id) {
			dst = append(dst, '"')
			dst = append(dst, id...)
			dst = append(dst, '"')
			continue
		}
		q, _ := json.Marshal(id)
		dst = append(dst, q...)
	}
	return append(dst, ']')
}
