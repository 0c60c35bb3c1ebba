package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"

	"github.com/nah-app/nah"
)

// What the restore drill (backup/drill.go) needs from the store, as part
// of backup.Source: the live file read in a read transaction while the
// server runs, a plain file read the same way, whether a file still waits
// for replication, and whose file it is.

// drillCacheKiB caps the page cache of the drill's own connections: one
// file at a time, so the drill holds at most two of them.
const drillCacheKiB = 256

// LiveRead runs fn in a read transaction on a connection of its own to
// database rel. A person's file is held in the open-file cache meanwhile,
// so neither the cache nor replication closes it (and drops the process's
// locks) under the read; the connection is closed before the file is let
// go of. WAL mode: writers to the file go on while fn reads.
func (s *Store) LiveRead(ctx context.Context, rel string, fn func(tx *sql.Tx) error) error {
	if rel == nah.DirectoryRel {
		return readTx(ctx, s.Path(rel), fn)
	}
	id := nah.PersonOfRel(rel)
	if id == "" {
		return fmt.Errorf("store: not a database: %q", rel)
	}
	if _, hidden := s.files.State(id); hidden {
		return nah.ErrNoPerson()
	}
	f, err := s.acquire(ctx, id, false)
	if err != nil {
		return err
	}
	defer s.files.Release(f)
	return readTx(ctx, f.Path, fn)
}

// ReadFile runs fn in a read transaction on a connection of its own to
// the SQLite file at p (a restored copy, or a data directory's file).
func (s *Store) ReadFile(ctx context.Context, p string, fn func(tx *sql.Tx) error) error {
	return readTx(ctx, p, fn)
}

// IntegrityCheck is the package's IntegrityCheck, for backup.Source.
func (s *Store) IntegrityCheck(ctx context.Context, p string) error { return IntegrityCheck(ctx, p) }

// HandleOf is the handle of the person whose database is rel ("" for the
// directory, or a person not found).
func (s *Store) HandleOf(ctx context.Context, rel string) string {
	p, err := s.FindPersonByID(ctx, nah.PersonOfRel(rel))
	if err != nil {
		return ""
	}
	return p.Handle
}

// ReadFile is Store.ReadFile, with no store open.
func ReadFile(ctx context.Context, p string, fn func(tx *sql.Tx) error) error {
	return readTx(ctx, p, fn)
}

// readTx is LiveRead's and ReadFile's read. The connection never writes,
// so it never checkpoints either (the rule of openDB's replicated).
func readTx(ctx context.Context, p string, fn func(tx *sql.Tx) error) error {
	if _, err := os.Stat(p); err != nil {
		return err
	}
	db, err := openDB(p, true, 1, drillCacheKiB, SyncFull, false)
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(tx)
}

// ReplicationQueue is how many written person files the replica lacks
// some of (watched or not), and how long the oldest write among them has
// waited.
func (s *Store) ReplicationQueue() (n int, oldest time.Duration) { return s.files.Queue() }

// ReplicationQueued says whether person file rel was written and waits in
// the replication queue: its replica is behind until a replicator ships
// it, takes it up or syncs it.
func (s *Store) ReplicationQueued(rel string) bool {
	_, ok := s.ReplicationSince(rel)
	return ok
}

// ReplicationSince is since when person file rel has waited in the
// replication queue (its oldest write the replica lacks), and whether it
// waits.
func (s *Store) ReplicationSince(rel string) (time.Time, bool) {
	id := nah.PersonOfRel(rel)
	if id == "" {
		return time.Time{}, false
	}
	return s.files.QueuedSince(id)
}

// ReplicationSynced records that replication synced person file rel, in a
// sync that began at began, outside the queue: its writes queued before
// then are on the replica, and leave the queue.
func (s *Store) ReplicationSynced(rel string, began time.Time) {
	if id := nah.PersonOfRel(rel); id != "" {
		s.files.Synced(id, began)
	}
}

// LastWrite is when database rel last changed on disk: the newer of the
// file's and its WAL's modification times (zero if it is gone).
func (s *Store) LastWrite(rel string) time.Time { return lastWrite(s.Path(rel)) }

func lastWrite(p string) (t time.Time) {
	for _, q := range []string{p, p + "-wal"} {
		if st, err := os.Stat(q); err == nil && st.ModTime().After(t) {
			t = st.ModTime()
		}
	}
	return t
}
