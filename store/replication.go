package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/internal/integrity"
	"github.com/nah-app/nah/store/internal/personfile"
)

// Replicator is everything the store asks of replication (package
// backup's Replicator), declared beside the cache that calls most of it
// (personfile.Replicator, which draws the seam). Each call runs off the
// request path.
type Replicator = personfile.Replicator

// What backup needs from the store (backup.Source, what it reads, and
// backup.Files, what it changes; drill.go has the drill's part): the files
// to copy, consistent copies of them, a way to bring a file back into the
// watched set, and a person's file swapped for a restored one while the
// server runs. Paths are relative to the data directory, slash-separated:
// directory.db and people/<id>/person.db.

// Path is rel's path on this machine.
func (s *Store) Path(rel string) string { return filepath.Join(s.dir, filepath.FromSlash(rel)) }

// Databases lists every database of the data directory: the directory and
// every person's file (deleted people waiting for their purge included:
// an undo needs them), sorted.
func (s *Store) Databases(ctx context.Context) ([]string, error) {
	return listDatabases(s.dir, false)
}

// listDatabases is Databases of data directory dir; with noPeopleOK a
// directory without a people folder holds the directory alone.
func listDatabases(dir string, noPeopleOK bool) ([]string, error) {
	es, err := os.ReadDir(filepath.Join(dir, nah.PeopleRel))
	if err != nil && !(noPeopleOK && errors.Is(err, fs.ErrNotExist)) {
		return nil, err
	}
	out := []string{nah.DirectoryRel}
	for _, e := range es {
		if !e.IsDir() || !nah.ValidPersonID(e.Name()) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(nah.PersonRel(e.Name())))); err == nil {
			out = append(out, nah.PersonRel(e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// Backup makes a consistent copy of database rel with SQLite's online
// backup API (one read transaction: no writer of an open file waits; a
// post to a closed one waits for its copy, see below) and returns it open
// for reading and already unlinked. A person's file is copied through the
// open-file cache, like an export.
func (s *Store) Backup(ctx context.Context, rel string) (*os.File, error) {
	if rel == nah.DirectoryRel {
		f, _, err := backupUnlinked(ctx, s.Path(rel))
		return f, err
	}
	id := nah.PersonOfRel(rel)
	if id == "" {
		return nil, fmt.Errorf("store: not a database: %q", rel)
	}
	// A file nobody has open is copied without entering the open-file
	// cache: a sweep of every file through it would close the hot ones
	// (and those replication watches) to make room, and slow the feeds.
	// The file is claimed while it is copied, so that replication does not
	// take it up (and let go of it, dropping this process's locks) under
	// the copy's own connection.
	if _, hidden := s.files.State(id); hidden {
		return nil, nah.ErrNoPerson()
	}
	var out *os.File
	var err error
	if s.files.WithClosed(id, func(p string) {
		if _, err = os.Stat(p); err != nil {
			err = nah.ErrNoPerson()
			return
		}
		out, _, err = backupUnlinked(ctx, p)
	}) {
		return out, err
	}
	err = s.useFile(ctx, id, false, func(f *personFile) error {
		var err error
		out, _, err = backupUnlinked(ctx, f.path)
		return err
	})
	return out, err
}

// Rewatch brings person file rel back into replication's watched set, as
// a write would: for a file whose last sync failed while the target was
// away, so that it catches up once the target is back.
func (s *Store) Rewatch(ctx context.Context, rel string) error {
	id := nah.PersonOfRel(rel)
	if id == "" {
		return fmt.Errorf("store: not a person's file: %q", rel)
	}
	return s.watchPerson(ctx, id, false)
}

// WatchNow brings person file rel into replication's watched set now and
// returns once replication has it (its first sync done): "Sync now" takes
// up the files waiting in the queue rather than wait for a replicator.
func (s *Store) WatchNow(ctx context.Context, rel string) error {
	id := nah.PersonOfRel(rel)
	if id == "" {
		return fmt.Errorf("store: not a person's file: %q", rel)
	}
	return s.watchPerson(ctx, id, true)
}

// watchPerson has replication watch person id's file as a write would;
// with wait, it returns once replication has the file.
func (s *Store) watchPerson(ctx context.Context, id string, wait bool) error {
	f, err := s.acquire(ctx, id, false)
	if err != nil {
		return err
	}
	if wait {
		s.files.WatchWait(ctx, f)
	} else {
		s.files.Watch(ctx, f)
	}
	s.files.Release(f)
	return nil
}

// CheckpointClosed empties the WAL of database p, which nobody in this
// process has open any more: Litestream's close leaves it at its largest.
func CheckpointClosed(p string) error { return checkpointClosed(p) }

func checkpointClosed(p string) error {
	if st, err := os.Stat(p + "-wal"); err != nil || st.Size() == 0 {
		return nil
	}
	db, err := openDB(p, false, 1, 64, SyncFull, false)
	if err != nil {
		return err
	}
	_, err = db.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	return errors.Join(err, db.Close())
}

// IntegrityCheck runs SQLite's full integrity check on the database at p
// (a restored file) and says what it found.
func IntegrityCheck(ctx context.Context, p string) error {
	db, err := openDB(p, true, 1, 256, SyncFull, false)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := integrity.Check(ctx, db, 0); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

// ReplacePersonFile swaps person id's file for another while the server
// runs, for a restore to a point in time. Their file is closed first (its
// users finish; replication lets go of it), and opens of
// it wait meanwhile; make is then called with the path the new file must
// be made at (beside the old one, same disk) and makes it. The new file
// takes the old one's place, the old -wal and -shm go, and the person's
// cached head and newest time are read again from the new file. Everyone
// else goes on posting and reading. A failing make leaves the old file.
//
// The replaced file is kept for an undo (UndoReplacePersonFile) until the
// delete grace ends, unless deletions purge at once; while one is kept, a
// further restore keeps it rather than the file it replaces.
func (s *Store) ReplacePersonFile(ctx context.Context, id string, make func(path string) error) error {
	return s.replacePersonFile(ctx, id, make, false)
}

func (s *Store) replacePersonFile(ctx context.Context, id string, make func(path string) error, undo bool) error {
	if !nah.ValidPersonID(id) || s.graph.node(id) == nil {
		return nah.ErrNoPerson()
	}
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	p, err := s.personPath(id)
	if err != nil {
		return err
	}
	// Their requests are told to come back (a swap takes seconds) rather
	// than that they do not exist; everyone else's feed leaves them out.
	s.files.HideWith(id, errRestoring(id))
	defer s.files.Unhide(id)
	tmp := p + ".restoring"
	for _, q := range []string{tmp, tmp + "-wal", tmp + "-shm"} {
		os.Remove(q)
	}
	if err := make(tmp); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, privateFile); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := checkRestoredCopy(ctx, tmp); err != nil {
		os.Remove(tmp)
		return err
	}
	// The old file was closed with a checkpoint; its WAL must be empty now,
	// or removing it would lose what it holds should the swap fail.
	if st, err := os.Stat(p + "-wal"); err == nil && st.Size() > 0 {
		if err := checkpointClosed(p); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("checkpoint before the swap: %w", err)
		}
	}
	for _, q := range []string{p + "-wal", p + "-shm"} {
		if err := os.Remove(q); err != nil && !errors.Is(err, os.ErrNotExist) {
			os.Remove(tmp)
			return err
		}
	}
	// A restore while an earlier one can still be undone keeps that
	// one's file, not this: an undo goes back to before the first of them.
	if _, pending := s.ReplacedUntil(id); !undo && !pending && s.deleteGrace > 0 {
		if err := s.keepReplaced(id, p); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("keep the replaced file for an undo: %w", err)
		}
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := syncDir(filepath.Dir(p)); err != nil { // the rename is durable before the restore is reported
		s.log.Warn("restore: sync the folder after the swap", "path", p, "err", err)
	}
	if undo {
		s.undoneReplaced(id)
	}
	n := s.graph.node(id)
	if n == nil {
		return nil
	}
	// The media lock is taken before the file is seen again, so that no
	// upload or delete counts against the old file's usage; then the
	// restored rows and the files on disk are made to agree.
	n.usage.mu.Lock()
	s.files.Unhide(id)
	s.dropHead(n)
	err = s.reconcileMedia(ctx, id, &n.usage)
	n.usage.mu.Unlock()
	if err != nil {
		n.checked.Store(0)
		return err
	}
	var newest, count int64
	if _, err := s.withFile(ctx, id, func(f *personFile) error {
		var err error
		if newest, err = readNewest(ctx, f.db); err != nil {
			return err
		}
		return f.db.QueryRowContext(ctx, `SELECT count(*) FROM moments`).Scan(&count)
	}); err != nil {
		n.checked.Store(0) // re-read at the next feed
		return err
	}
	n.newest.Store(newest)
	n.checked.Store(s.now().UnixMilli())
	// The directory's row says what the new file holds, not the old one.
	s.dirtyMu.Lock()
	delete(s.dirty, id)
	s.dirtyMu.Unlock()
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE people SET newest_at = ?, moments = ? WHERE id = ?`, newest, count, id)
		return err
	})
	if err != nil {
		return err
	}
	// The restore is done once replication has the new file: until then
	// the replica's newest copy is the old file, and a whole restore would
	// bring back what this one replaced.
	return s.watchPerson(ctx, id, true)
}

// MediaOf calls fn with the names of person owner's media files, a
// batch of at most sweepBatch at a time as the folder reads them (no set
// order), so that a walk of everyone's media holds one batch, whatever the
// count. fn must not keep the slice. A person with no folder has none.
func (s *Store) MediaOf(ctx context.Context, owner string, fn func(names []string) error) error {
	return mediaOf(ctx, s.dir, owner, fn)
}

// mediaOf is MediaOf in data directory dir.
func mediaOf(ctx context.Context, dir, owner string, fn func(names []string) error) error {
	if !nah.ValidPersonID(owner) {
		return fmt.Errorf("store: not a person: %q", owner)
	}
	d, err := os.Open(filepath.Join(dir, filepath.FromSlash(nah.MediaDirRel(owner))))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	names := make([]string, 0, sweepBatch)
	for {
		es, rerr := d.ReadDir(sweepBatch)
		names = names[:0]
		for _, e := range es {
			if e.Type().IsRegular() && nah.ValidMediaID(e.Name()) {
				names = append(names, e.Name())
			}
		}
		if len(names) > 0 {
			if err := fn(names); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// OpenMediaFile opens media file rel (as MediaFiles names it) for reading.
func (s *Store) OpenMediaFile(rel string) (*os.File, error) { return openMediaFile(s.dir, rel) }

func openMediaFile(dir, rel string) (*os.File, error) {
	if owner, _ := nah.MediaOfRel(rel); owner == "" {
		return nil, fmt.Errorf("store: not a media file: %q", rel)
	}
	return os.Open(filepath.Join(dir, filepath.FromSlash(rel)))
}

// ConfigureSQLite applies the store's process-wide SQLite settings now.
// They can only be set before SQLite's first use, so a tool that lets
// Litestream open SQLite before the store does (nah restore) calls this
// first; else every later open of the store fails.
func ConfigureSQLite() error { return configureSQLite() }
