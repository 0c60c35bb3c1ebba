package store

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/nah-app/nah"
)

// mediaUsage is one person's media on disk and in flight. Each chunk is
// reserved under the person's lock before it is written, so concurrent
// uploads never together pass the quota, and usage never walks the media.
type mediaUsage struct {
	mu sync.Mutex // held to load, reserve, commit and delete
	// counted: bytes, charged and count are the rows' (countUsage);
	// loaded: counted, and the folder swept against the rows (loadUsage).
	counted, loaded bool
	bytes           int64 // sum of the sizes of the person's media rows
	// charged is what the rows count against the quota: each at least
	// nah.MediaChargeBytes (nah.MediaCharge).
	charged int64
	count   int
	pending int64 // charge reserved by this process's uploads in flight
	// uploading is this process's one-request uploads in flight, each one
	// media more against nah.MaxMediaCount once it commits.
	uploading int
	// staged is the charge of the unfinished resumable uploads at their
	// declared length, resumables those uploads and the finished ones kept
	// (person_uploads.go).
	staged     int64
	resumables map[string]*resumable
}

// Storage is what a person's folder holds.
type Storage struct {
	Database int64 // person.db with its -wal and -shm (every file at the top of the folder)
	Media    int64 // bytes of their media files
	// MediaCharged is what their media files count against the quota:
	// each its bytes, and at least nah.MediaChargeBytes (nah.MediaCharge).
	MediaCharged int64
	MediaCount   int
	Uploads      int64 // unfinished resumable uploads at their declared length (nah.MediaCharge), held against the quota
}

// Used is what their database and media count against the quota (the
// unfinished uploads, Uploads, besides).
func (s Storage) Used() int64 { return s.Database + s.MediaCharged }

// withUsage runs fn with person id's usage locked and loaded.
func (s *Store) withUsage(ctx context.Context, id string, fn func(u *mediaUsage) error) error {
	n := s.graph.node(id)
	if n == nil {
		return nah.ErrNoPerson()
	}
	u := &n.usage
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.loaded {
		if err := s.loadUsage(ctx, id, u); err != nil {
			return err
		}
	}
	return fn(u)
}

// loadUsage reads person id's media count and bytes into u with one
// query, and sweeps their folder against the rows. u.mu is held: no upload
// commits and no delete runs meanwhile.
func (s *Store) loadUsage(ctx context.Context, id string, u *mediaUsage) error {
	dir, _ := s.mediaDir(id)
	err := s.useFile(ctx, id, false, func(f *personFile) error {
		if err := countUsage(ctx, f.db, u); err != nil {
			return err
		}
		s.sweepMedia(ctx, dir, f.db)
		return nil
	})
	if err != nil {
		return err
	}
	if u.resumables == nil {
		s.loadResumables(id, u)
	}
	u.loaded = true
	return nil
}

// countUsage reads the count and bytes of db's media rows into u with one
// query. u.mu is held.
func countUsage(ctx context.Context, db *sql.DB, u *mediaUsage) error {
	err := db.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(size), 0), coalesce(sum(max(size, ?)), 0) FROM media`,
		nah.MediaChargeBytes).Scan(&u.count, &u.bytes, &u.charged)
	u.counted = err == nil
	return err
}

// countedMedia is the bytes of person id's media rows: their usage's
// figure once counted (kept up to date by every upload and delete from
// then on), else one query, kept. Their folder is not swept, so this is
// cheap enough for the overview's sum over everyone.
func (s *Store) countedMedia(ctx context.Context, id string) (int64, error) {
	n := s.graph.node(id)
	if n == nil {
		return 0, nah.ErrNoPerson()
	}
	u := &n.usage
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.counted {
		return u.bytes, nil
	}
	// A file nobody has open is read without entering the open-file cache,
	// as Store.Backup does: the overview's sum over everyone through it
	// would close the hot files to make room.
	var err error
	if !s.files.WithClosed(id, func(p string) { err = countClosed(ctx, p, u) }) {
		err = s.useFile(ctx, id, false, func(f *personFile) error { return countUsage(ctx, f.db, u) })
	}
	if err != nil {
		return 0, err
	}
	return u.bytes, nil
}

// countClosed is countUsage on the database at p, which nobody in this
// process has open, through a read-only connection that closes without a
// checkpoint: as the file's last, its close would checkpoint the WAL
// replication carries on from (query_only does not stop that;
// TestClosedReadsKeepTheWAL).
func countClosed(ctx context.Context, p string, u *mediaUsage) error {
	db, err := openDB(p, true, 1, 64, SyncFull, false)
	if err != nil {
		return err
	}
	if err := noCheckpointOnClose(db); err != nil {
		db.Close()
		return err
	}
	defer db.Close()
	return countUsage(ctx, db, u)
}

// StorageOf returns what person id's folder holds.
func (s *Store) StorageOf(ctx context.Context, id string) (Storage, error) {
	var st Storage
	err := s.withUsage(ctx, id, func(u *mediaUsage) error {
		st.Media, st.MediaCharged, st.MediaCount, st.Uploads = u.bytes, u.charged, u.count, u.staged
		return nil
	})
	if err != nil {
		return st, err
	}
	st.Database, err = s.databaseBytes(id)
	return st, err
}

// databaseBytes is what person id's database counts against the quota:
// person.db alone. Its -wal and -shm are the server's working files, which
// checkpoints empty into it when replication says (100,000 keyed posts left
// 26.3 MB of them beside a 5.9 MB file), so a burst would take quota its
// next checkpoint gives back; the disk they take is in Totals. A folder
// without its file yet holds nothing.
func (s *Store) databaseBytes(id string) (int64, error) {
	d, err := s.personDir(id)
	if err != nil {
		return 0, err
	}
	info, err := os.Stat(filepath.Join(d, nah.PersonFileName))
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(d); err != nil {
			return 0, err
		}
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return info.Size(), nil
}

// reconcileMedia makes person id's media rows and files agree once their
// file was replaced by an older copy: a row whose file is gone (deleted
// after the copy's time) is deleted, a file with no row (uploaded after
// it) is removed, and the usage is what is left, so it never counts a
// file twice or one that is gone. u.mu is held.
func (s *Store) reconcileMedia(ctx context.Context, id string, u *mediaUsage) error {
	dir, err := s.mediaDir(id)
	if err != nil {
		return err
	}
	u.loaded, u.counted = false, false // read again by loadUsage below, or at the next use
	removed := 0
	err = s.useFile(ctx, id, true, func(f *personFile) error {
		// A page of sweepBatch rows at a time, by id: the memory is one
		// page, whatever the number of media.
		after := ""
		for {
			last, gone, err := goneMedia(ctx, f.db, dir, after)
			if err != nil || last == "" {
				return err
			}
			after = last
			if len(gone) == 0 {
				continue
			}
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			for _, mid := range gone {
				if _, err := tx.ExecContext(ctx, `DELETE FROM media WHERE id = ?`, mid); err != nil {
					tx.Rollback()
					return err
				}
			}
			if err := tx.Commit(); err != nil {
				return err
			}
			removed += len(gone)
		}
	})
	if removed > 0 {
		s.log.Info("restore: media rows without their file removed", "person", id, "rows", removed)
	}
	if err != nil {
		return err
	}
	return s.loadUsage(ctx, id, u) // the rows left, and a sweep of files without one
}
