package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store/internal/personfile"
)

// personCacheKiB caps one person connection's page cache. A feed touches a
// dozen pages of a file; the global soft heap limit bounds the sum.
const personCacheKiB = 256

// personFile is one open person database as the store's reads and writes
// see it. db has exactly one connection.
type personFile struct {
	id   string
	path string
	db   *sql.DB
}

// newFileCache is the open-file cache of a store opened with cfg: the
// mechanism is package personfile's; where a file lives and how it is
// opened are the store's.
func (s *Store) newFileCache(cfg Config) *personfile.Cache {
	replicated := cfg.Replicator != nil
	return personfile.New(personfile.Config{
		Max:  cfg.MaxOpenFiles,
		Path: s.personPath,
		Open: func(ctx context.Context, p string, create bool) (*sql.DB, error) {
			db, migrated, err := openPerson(ctx, p, create, cfg.Sync, replicated)
			if migrated {
				s.migrated.Store(p, struct{}{})
			}
			return db, err
		},
		Checkpoint:      checkpointClosed,
		CloseKeepingWAL: closeKeepingWAL,
		Replicator:      cfg.Replicator,
		MaxWatched:      cfg.MaxWatched,
		QueueDir:        cfg.QueueDir,
		WALIdle:         cfg.WALIdle,
		BeforeOpen:      cfg.beforeOpen,
		AfterClose: func(p string) {
			s.stmts.forget(p)
			if cfg.afterClose != nil {
				cfg.afterClose(p)
			}
		},
		Log: cfg.Logger,
	})
}

// personDir is the folder of one person. id must be valid: it is checked
// here again because this is where an id becomes a path.
func (s *Store) personDir(id string) (string, error) {
	if !nah.ValidPersonID(id) {
		return "", nah.ErrNoPerson()
	}
	return filepath.Join(s.dir, filepath.FromSlash(nah.PersonDirRel(id))), nil
}

func (s *Store) personPath(id string) (string, error) {
	if _, err := s.personDir(id); err != nil {
		return "", err
	}
	return s.Path(nah.PersonRel(id)), nil
}

// openPerson opens (or creates) one person file and brings its schema up
// to date. The schema version is read once; migrate runs only when it is
// not this binary's (it reads it again inside its transaction). migrated
// says it ran on a file of an older schema: the file was written.
func openPerson(ctx context.Context, p string, create bool, mode Sync, replicated bool) (db *sql.DB, migrated bool, err error) {
	db, err = openDB(p, false, 1, personCacheKiB, mode, replicated)
	if err != nil {
		return nil, false, err
	}
	v, err := schemaVersion(ctx, db, p, create)
	if err == nil && v != len(personMigrations) {
		migrated = v > 0 // a new file is written by what created it
		err = migrate(ctx, db, p, personMigrations, nil)
	}
	if err != nil {
		db.Close()
		return nil, false, err
	}
	return db, migrated, nil
}

// acquire is s.files.Acquire, and a file its open migrated counts as
// written: an upgrade migrates each file at its first open, a read as
// often as not, and a migration no ship took left the replica on the old
// schema (the restore drill failed that person until they wrote).
func (s *Store) acquire(ctx context.Context, id string, create bool) (*personfile.File, error) {
	f, err := s.files.Acquire(ctx, id, create)
	if err == nil {
		if _, ok := s.migrated.LoadAndDelete(f.Path); ok {
			s.files.Wrote(f)
		}
	}
	return f, err
}

// schemaVersion reads the file's user_version and, unless it is being
// created, checks that it has a schema. One emptied or truncated to
// nothing reads as a new, empty database, which migrate would set up
// again, and the person's moments would be lost without a word: it is a
// file that cannot be read instead (faults.go).
func schemaVersion(ctx context.Context, db *sql.DB, p string, create bool) (int, error) {
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("%s: read schema version: %w", p, err)
	}
	if v == 0 && !create {
		return 0, fmt.Errorf("%s: %w", p, errNoSchema)
	}
	return v, nil
}

// openSnapshot opens person file p read-only without its WAL and its
// shared-memory index, for reads on a full disk: the usual opening of a
// closed file makes a 32 KB index, and a full disk has no room for it. It
// is the whole database only while the WAL holds nothing, which is how a
// file is left when its last handle closes, so it refuses otherwise; and
// immutable promises SQLite that nobody writes the file while it reads,
// which holds on a full disk for the one read the handle lives for. The
// handle is the caller's to close; it is outside the cache's bound, but
// only one is open per read in progress, and only while the disk is full.
func openSnapshot(ctx context.Context, p string) (*sql.DB, error) {
	if st, err := os.Stat(p + "-wal"); err == nil && st.Size() > 0 {
		return nil, fmt.Errorf("%s: snapshot: the WAL holds %d bytes", p, st.Size())
	}
	if err := configureSQLite(); err != nil {
		return nil, err
	}
	if strings.ContainsAny(p, "?#") {
		return nil, fmt.Errorf("sqlite: path %q must not contain '?' or '#'", p)
	}
	// immutable: no lock, no WAL, no index; SQLite reads the file alone.
	uri := "file:" + strings.ReplaceAll(p, "%", "%25") + "?mode=ro&immutable=1&_pragma=cache_size(-" + strconv.Itoa(personCacheKiB) + ")"
	db, err := sql.Open("sqlite", uri)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: snapshot: %w", p, err)
	}
	if v != len(personMigrations) {
		db.Close()
		return nil, fmt.Errorf("%s: snapshot: schema version %d, want %d", p, v, len(personMigrations))
	}
	return db, nil
}

// useFile runs fn on the open file of person id, and turns what goes wrong
// with the file into the caller's answer (faults.go): a file that cannot be
// read is Unavailable and listed, and its handle leaves the cache so that
// the next use opens the file afresh; a full disk is InsufficientStorage,
// except that a read goes on through a snapshot of a file that could not be
// opened for lack of space. write says whether fn writes.
func (s *Store) useFile(ctx context.Context, id string, write bool, fn func(f *personFile) error) error {
	pf, err := s.acquire(ctx, id, false)
	if err != nil {
		if !write && s.kindOf(err) == noSpace && s.readSnapshot(ctx, id, fn) == nil {
			s.noteReadable(id)
			return nil
		}
		return s.fileErr(id, err)
	}
	err = fn(&personFile{id: pf.ID, path: pf.Path, db: pf.DB})
	if err != nil && s.kindOf(err) == unreadable {
		s.files.Drop(pf)
	}
	if write {
		// Even after an error: the write may have committed before what
		// failed next (a read after it, a cancelled request).
		s.files.Wrote(pf)
	}
	s.files.Release(pf)
	if err != nil {
		return s.fileErr(id, err)
	}
	s.noteReadable(id)
	if write {
		s.noteWrote()
	}
	return nil
}

// readSnapshot runs fn on a snapshot of person id's file (openSnapshot).
func (s *Store) readSnapshot(ctx context.Context, id string, fn func(f *personFile) error) error {
	p, err := s.personPath(id)
	if err != nil {
		return err
	}
	db, err := openSnapshot(ctx, p)
	if err != nil {
		return err
	}
	defer db.Close()
	return fn(&personFile{id: id, path: p, db: db})
}
