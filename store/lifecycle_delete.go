package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nah-app/nah"
)

// A person's deletion, its undo and its purge. DeletePerson marks the row
// (the handle stays reserved), ends sessions, connections, invites and reset
// links in one transaction and moves people/<id> to deleted/<id>; the sweep
// purges after DeleteGrace. RestorePerson brings back all but what it ended.

// DefaultDeleteGrace is Config.DeleteGrace when zero: a week to change
// one's mind, or for an operator to undo a deletion made by mistake.
const DefaultDeleteGrace = 7 * 24 * time.Hour

// sweepEvery is how often the sweep looks for deleted people due a purge.
const sweepEvery = time.Minute

func (s *Store) deletedDir(id string) string {
	return filepath.Join(s.dir, filepath.FromSlash(nah.DeletedDirRel(id)))
}

// DeletePerson deletes person id (see above). A person already deleted, or
// unknown, is NotFound.
func (s *Store) DeletePerson(ctx context.Context, id string) error {
	if !nah.ValidPersonID(id) {
		return nah.ErrNoPerson()
	}
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	// connMu: a redeem that commits before us has its connection removed
	// below, graph included; one after us finds the invite gone.
	s.connMu.Lock()
	var others []string
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE people SET deleted_at = ? WHERE id = ? AND deleted_at IS NULL`, s.now().UnixMilli(), id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nah.ErrNoPerson()
		}
		rows, err := tx.QueryContext(ctx, `SELECT other_id FROM connections WHERE person_id = ?`, id)
		if err != nil {
			return err
		}
		for rows.Next() {
			var o string
			if err := rows.Scan(&o); err != nil {
				rows.Close()
				return err
			}
			others = append(others, o)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, q := range []string{
			`DELETE FROM connections WHERE person_id = ?1 OR other_id = ?1`,
			`DELETE FROM sessions WHERE person_id = ?1`,
			`DELETE FROM invites WHERE person_id = ?1 AND used_by IS NULL`,
			`DELETE FROM links WHERE person_id = ?1`,
			// Push tokens are secrets: they go at once, not at the purge.
			`DELETE FROM devices WHERE person_id = ?1`,
		} {
			if _, err := tx.ExecContext(ctx, q, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.connMu.Unlock()
		return err
	}
	s.sessions.removePerson(id) // no grace: cached tokens stop now
	n := s.graph.remove(id)
	s.connMu.Unlock()
	s.noteReadable(id) // no longer a problem to list

	err = s.files.WhileHidden(id, func() error {
		if n != nil {
			// After hide: a feed that still holds the node can no longer load
			// a head onto it, so the head budget gets back all it gave.
			s.dropHead(n)
		}
		return s.moveFolder(s.mustPersonDir(id), s.deletedDir(id))
	})
	if err != nil {
		// The deletion stands (the row says so); the purge removes the
		// folder from people/ or deleted/, wherever it is.
		s.log.Error("move a deleted person's folder", "person", id, "err", err)
	}
	if s.deleteGrace == 0 {
		return s.purge(ctx, id)
	}
	return nil
}

func (s *Store) mustPersonDir(id string) string {
	return filepath.Join(s.dir, filepath.FromSlash(nah.PersonDirRel(id)))
}

// moveFolder renames from to to (an atomic rename on one file system),
// making to's parent if needed. A missing from is not an error: the folder
// may have been moved already by an earlier try.
func (s *Store) moveFolder(from, to string) error {
	if _, err := os.Stat(from); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(to), privateDir); err != nil {
		return err
	}
	return os.Rename(from, to)
}

// RestorePerson undoes the deletion of person id before the purge: their
// folder comes back with every moment, and they can sign in again with
// their password. Sessions stay revoked and connections do not come back.
func (s *Store) RestorePerson(ctx context.Context, id string) error {
	notFound := nah.Errorf(nah.NotFound, "", "no such deleted person")
	if !nah.ValidPersonID(id) {
		return notFound
	}
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	var newest int64
	err := s.r.QueryRowContext(ctx, `SELECT newest_at FROM people WHERE id = ? AND deleted_at IS NOT NULL`, id).Scan(&newest)
	if errors.Is(err, sql.ErrNoRows) {
		return notFound
	}
	if err != nil {
		return err
	}
	err = s.files.WhileHidden(id, func() error {
		if err := s.moveFolder(s.deletedDir(id), s.mustPersonDir(id)); err != nil {
			return err
		}
		// Sessions stay revoked: also one a sign-in made while the deletion
		// committed (its password check ran before, its insert after).
		err := s.writeTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE person_id = ?`, id); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `UPDATE people SET deleted_at = NULL WHERE id = ?`, id)
			return err
		})
		if err != nil {
			if err2 := s.moveFolder(s.mustPersonDir(id), s.deletedDir(id)); err2 != nil {
				s.log.Error("move a person's folder back after a failed undo", "person", id, "err", err2)
			}
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Replication let go of the file when it was hidden, and a write still
	// queued for it then was dropped with the folder gone: it watches the
	// file again, as a write would.
	if err := s.watchPerson(ctx, id, false); err != nil {
		s.log.Warn("replication: watch a restored person", "person", id, "err", err)
	}
	s.addedMedia(id) // the sweep may have let go of their mirror meanwhile
	// The directory's newest time is a hint: read the file's.
	n := s.graph.add(id, newest, s.now().UnixMilli())
	if _, err := s.withFile(ctx, id, func(f *personFile) error {
		t, err := readNewest(ctx, f.db)
		if err == nil {
			n.raiseNewest(t)
		}
		return err
	}); err != nil {
		s.log.Error("read a restored person's newest time", "person", id, "err", err)
		n.checked.Store(0) // re-read at the next feed
	}
	return nil
}

// DeleteGrace is how long a deletion can be undone before the purge; 0
// when deletions purge at once.
func (s *Store) DeleteGrace() time.Duration { return s.deleteGrace }

// DeletedPerson is a deleted person waiting for the purge.
type DeletedPerson struct {
	ID        string
	Handle    string
	DeletedAt int64 // unix ms
	PurgeAt   int64 // unix ms: when the sweep purges them
}

// DeletedPeople lists up to limit deleted people, those purged soonest first.
func (s *Store) DeletedPeople(ctx context.Context, limit int) ([]DeletedPerson, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, handle, deleted_at FROM people WHERE deleted_at IS NOT NULL ORDER BY deleted_at, id LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ds []DeletedPerson
	for rows.Next() {
		var d DeletedPerson
		if err := rows.Scan(&d.ID, &d.Handle, &d.DeletedAt); err != nil {
			return nil, err
		}
		d.PurgeAt = d.DeletedAt + s.deleteGrace.Milliseconds()
		ds = append(ds, d)
	}
	return ds, rows.Err()
}

// PurgeDeleted purges every deleted person whose grace has passed by the
// store's clock, and returns how many. The sweep runs it once a minute and
// at start; tests call it after moving the clock.
func (s *Store) PurgeDeleted(ctx context.Context) (int, error) {
	cutoff := s.now().Add(-s.deleteGrace).UnixMilli()
	rows, err := s.r.QueryContext(ctx, `SELECT id FROM people WHERE deleted_at IS NOT NULL AND deleted_at <= ?`, cutoff)
	if err != nil {
		return 0, err
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		s.lifeMu.Lock()
		err := s.purge(ctx, id)
		s.lifeMu.Unlock()
		if err != nil {
			return n, fmt.Errorf("purge %s: %w", id, err)
		}
		n++
	}
	return n, nil
}

// purge removes every trace of deleted person id: their folder (under
// deleted/, or still under people/ if its move failed) and every directory
// row holding their id, with secure_delete so that the freed pages hold no
// copy of it either. The caller holds lifeMu.
func (s *Store) purge(ctx context.Context, id string) error {
	var deleted int
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM people WHERE id = ? AND deleted_at IS NOT NULL`, id).Scan(&deleted)
	if err != nil {
		return err
	}
	if deleted == 0 {
		return nil // restored, or purged already
	}
	return s.files.WhileHidden(id, func() error { return s.purgeHidden(ctx, id) })
}

// purgeHidden is purge's work, done while person id is hidden.
func (s *Store) purgeHidden(ctx context.Context, id string) error {
	if err := os.RemoveAll(s.deletedDir(id)); err != nil {
		return err
	}
	if err := os.RemoveAll(s.mustPersonDir(id)); err != nil {
		return err
	}
	if err := os.RemoveAll(s.replacedDir(id)); err != nil {
		return err
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{
			`DELETE FROM sessions WHERE person_id = ?1`,
			`DELETE FROM connections WHERE person_id = ?1 OR other_id = ?1`,
			`DELETE FROM invites WHERE person_id = ?1 OR used_by = ?1`,
			`DELETE FROM join_codes WHERE used_by = ?1`,
			`DELETE FROM links WHERE person_id = ?1`,
			`DELETE FROM former_connections WHERE person_id = ?1`,
			`DELETE FROM devices WHERE person_id = ?1`,
			`DELETE FROM digests WHERE person_id = ?1`,
			`DELETE FROM people WHERE id = ?1`,
		} {
			if _, err := tx.ExecContext(ctx, q, id); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.dirtyMu.Lock()
	delete(s.dirty, id)
	s.dirtyMu.Unlock()
	if s.repl != nil { // replication's copies of their file go too
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		if err := s.repl.Forget(fctx, nah.PersonRel(id)); err != nil {
			s.log.Warn("replication: forget a purged person", "path", nah.PersonRel(id), "err", err)
		}
		cancel()
	}
	// The WAL still holds the deleted rows' old pages until a checkpoint;
	// a reader in progress may keep it from completing, and then the next
	// one (or the close) does.
	if err := s.checkpointDirectory(ctx); err != nil {
		s.log.Warn("checkpoint after a purge", "err", err)
	}
	return nil
}

// purgeCheckpointWait bounds how long the checkpoint after a purge waits
// for readers. Litestream keeps a read transaction open on the directory
// it watches, so the busy timeout's 10 s would hold every write of the
// directory (the one writer connection) that long at each purge.
const purgeCheckpointWait = 100 // ms

// checkpointDirectory empties the directory's WAL, waiting at most
// purgeCheckpointWait for its readers.
func (s *Store) checkpointDirectory(ctx context.Context) error {
	c, err := s.w.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", purgeCheckpointWait)); err != nil {
		return err
	}
	_, err = c.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	_, rerr := c.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", busyTimeout))
	return errors.Join(err, rerr)
}

// sweepFirstAfter is how long after Open the sweep's first pass waits: its
// walk of people/*/media was a large share of the CPU people-1k spent from
// exec to the first feed (bench/THRESHOLDS.md), and the first requests
// after a restart need not share the two cores with it.
const sweepFirstAfter = 2 * time.Second

// sweepLoop purges deleted people and the files restores replaced when due,
// and removes expired resumable uploads (person_uploads.go) and sessions
// (dir_sessions.go): sweepFirstAfter after start, then every minute. Its first
// pass also removes what interrupted uploads left (person_media.go).
func (s *Store) sweepLoop() {
	defer close(s.swept)
	first := time.NewTimer(sweepFirstAfter)
	defer first.Stop()
	select {
	case <-first.C:
	case <-s.stop:
		return
	}
	s.sweepUploads()
	s.sweepExpiredAtStart(context.Background())
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		if _, err := s.PurgeDeleted(context.Background()); err != nil {
			s.log.Error("purge deleted people", "err", err)
		}
		if _, err := s.purgeReplaced(context.Background()); err != nil {
			s.log.Error("purge the files restores replaced", "err", err)
		}
		s.Resumables().Sweep(context.Background())
		if _, err := s.DeleteExpiredSessions(context.Background()); err != nil {
			s.log.Error("delete expired sessions", "err", err)
		}
		select {
		case <-t.C:
		case <-s.stop:
			return
		}
	}
}
