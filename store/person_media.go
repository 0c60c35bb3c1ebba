package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/nah-app/nah"
)

// Media: files under people/<id>/media/<id>, a row each (migrations/person/0002).
// An upload streams to a locked upload-*.tmp, fsynced, renamed, folder fsynced,
// then its row is committed; a delete drops the row first: no row ever points to
// a missing file, and sweepMedia and sweepUploads remove what a crash leaves.

const uploadPrefix = "upload-"

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

func errNoMedia() error { return nah.Errorf(nah.NotFound, "", "no such media") }

// ErrEmptyMedia refuses a media of no bytes: it would be a row and a file
// that no phone can use.
func ErrEmptyMedia() error {
	return nah.Errorf(nah.Invalid, "empty_media", "a media file has at least one byte: this one is empty")
}

func errTooManyMedia() error {
	return nah.Errorf(nah.QuotaExceeded, "", "you keep %d media files, the most a person may: delete some first", nah.MaxMediaCount)
}

func errOverQuota(quota int64) error {
	return nah.Errorf(nah.QuotaExceeded, "", "this upload would take your storage past your quota of %d bytes (a file counts at least %d bytes): delete some media first", quota, nah.MediaChargeBytes)
}

func (s *Store) mediaDir(id string) (string, error) {
	d, err := s.personDir(id)
	if err != nil {
		return "", err
	}
	return filepath.Join(d, nah.MediaDirName), nil
}

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

// sweepBatch is how many names of a media folder the sweep reads, and
// asks db about, at a time: its memory is one batch, whatever the count.
const sweepBatch = 256

// sweepMedia removes from dir the temporary files that no upload holds
// and the media files that have no row in db, a batch of names at a time.
func (s *Store) sweepMedia(ctx context.Context, dir string, db *sql.DB) {
	d, err := os.Open(dir)
	if err != nil {
		return // no media yet
	}
	defer d.Close()
	ids := make([]string, 0, sweepBatch)
	for {
		es, rerr := d.ReadDir(sweepBatch)
		ids = ids[:0]
		for _, e := range es {
			switch name := e.Name(); {
			case strings.HasPrefix(name, uploadPrefix):
				s.removeLeft(filepath.Join(dir, name))
			case nah.ValidMediaID(name):
				ids = append(ids, name)
			}
		}
		if len(ids) > 0 {
			s.removeOrphans(ctx, dir, db, ids)
		}
		if rerr != nil {
			return // io.EOF, or a folder that cannot be read: the next load tries again
		}
	}
}

// goneMedia reads the page of up to sweepBatch media rows of db after id
// after and returns the last id read ("" for none) and the ids among them
// whose file in dir is missing or not of the row's size.
func goneMedia(ctx context.Context, db *sql.DB, dir, after string) (last string, gone []string, err error) {
	r, err := db.QueryContext(ctx, `SELECT id, size FROM media WHERE id > ? ORDER BY id LIMIT ?`, after, sweepBatch)
	if err != nil {
		return "", nil, err
	}
	defer r.Close()
	var size int64
	for r.Next() {
		if err := r.Scan(&last, &size); err != nil {
			return "", nil, err
		}
		if st, err := os.Lstat(filepath.Join(dir, last)); err != nil || !st.Mode().IsRegular() || st.Size() != size {
			gone = append(gone, last)
		}
	}
	return last, gone, r.Err()
}

// removeOrphans removes the files among ids (names in dir) that have no
// row in db. A failed query removes nothing.
func (s *Store) removeOrphans(ctx context.Context, dir string, db *sql.DB, ids []string) {
	list, _ := json.Marshal(ids)
	rows, err := db.QueryContext(ctx, `SELECT value FROM json_each(?) WHERE value NOT IN (SELECT id FROM media)`, string(list))
	if err != nil {
		s.log.Warn("sweep media files without a row", "dir", dir, "err", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if rows.Scan(&id) == nil && nah.ValidMediaID(id) {
			s.removeLeft(filepath.Join(dir, id))
		}
	}
}

// removeLeft removes what an interrupted upload or delete left at p,
// unless an upload holds it.
func (s *Store) removeLeft(p string) {
	if removeUnlocked(p) {
		s.log.Info("removed what an interrupted upload or delete left", "path", p)
	}
}

// removeUnlocked removes the file at p unless an upload holds it.
func removeUnlocked(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	if tryLock(f) != nil {
		return false
	}
	return os.Remove(p) == nil
}

// sweepUploads removes, once at start, the temporary files of uploads
// that a crash cut off, for everyone: a person who never comes back must
// not keep them. It reads people/*/media only; files without a row wait
// for their person's next use of media, which needs their database.
func (s *Store) sweepUploads() {
	dirs, _ := filepath.Glob(filepath.Join(s.dir, filepath.FromSlash(nah.MediaDirsPattern), uploadPrefix+"*"))
	for _, p := range dirs {
		id := filepath.Base(filepath.Dir(filepath.Dir(p)))
		n := s.graph.node(id)
		if n == nil {
			continue // a folder being made or deleted; its own paths clean it
		}
		n.usage.mu.Lock() // so that no upload of this process is between its create and its lock
		if removeUnlocked(p) {
			s.log.Info("removed the temporary file of an interrupted upload", "path", p)
		}
		n.usage.mu.Unlock()
	}
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

// Upload is one media upload in progress: Write the bytes, then Commit or
// Abort (Abort after Commit does nothing, so it can be deferred).
type Upload struct {
	s        *Store
	u        *mediaUsage
	owner    string
	dir, tmp string
	f        *os.File
	h        hash.Hash
	size     int64
	reserved int64
	base     int64 // the database's bytes at the start
	quota    int64
	done     bool
}

// StartUpload opens a temporary file for a new media file of owner, whose
// storage may not pass quota bytes.
func (s *Store) StartUpload(ctx context.Context, owner string, quota int64) (*Upload, error) {
	dir, err := s.mediaDir(owner)
	if err != nil {
		return nil, err
	}
	up := &Upload{s: s, owner: owner, dir: dir, h: sha256.New(), quota: quota}
	if up.base, err = s.databaseBytes(owner); err != nil {
		return nil, nah.ErrNoPerson()
	}
	err = s.withUsage(ctx, owner, func(u *mediaUsage) error {
		up.u = u
		if u.count+u.uploading+u.unfinished() >= nah.MaxMediaCount {
			return errTooManyMedia()
		}
		// Mkdir, not MkdirAll: a person deleted meanwhile has no folder,
		// and must not get one back.
		if err := os.Mkdir(dir, privateDir); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		f, err := os.CreateTemp(dir, uploadPrefix+"*.tmp")
		if err != nil {
			return err
		}
		if err := tryLock(f); err != nil {
			f.Close()
			os.Remove(f.Name())
			return err
		}
		up.f, up.tmp = f, f.Name()
		u.uploading++
		return nil
	})
	if err != nil {
		return nil, s.spaceErr(err)
	}
	return up, nil
}

// Size is how many bytes have been written.
func (up *Upload) Size() int64 { return up.size }

// SHA256 is the sha256 of the bytes written so far.
func (up *Upload) SHA256() []byte { return up.h.Sum(nil) }

// Reserve takes quota for total bytes of this upload ahead of writing
// them (at least nah.MediaChargeBytes), or fails with QuotaExceeded: for a
// Content-Length known at once.
func (up *Upload) Reserve(total int64) error {
	charge := nah.MediaCharge(total)
	if charge <= up.reserved {
		return nil
	}
	up.u.mu.Lock()
	defer up.u.mu.Unlock()
	need := charge - up.reserved
	if up.base+up.u.charged+up.u.pending+up.u.staged+need > up.quota {
		return errOverQuota(up.quota)
	}
	up.u.pending += need
	up.reserved += need
	return nil
}

// Write reserves quota for p, then writes it to the temporary file.
func (up *Upload) Write(p []byte) (int, error) {
	if err := up.Reserve(up.size + int64(len(p))); err != nil {
		return 0, err
	}
	n, err := up.f.Write(p)
	up.h.Write(p[:n])
	up.size += int64(n)
	if err != nil {
		return n, up.s.spaceErr(err)
	}
	return n, nil
}

// Commit makes the upload a media file of contentType: fsynced, renamed
// to its new id, and its row committed, in that order.
func (up *Upload) Commit(ctx context.Context, contentType string) (nah.Media, error) {
	m, _, err := up.CommitOnce(ctx, contentType, nil)
	return m, err
}

// CommitOnce is Commit under an idempotency key (person_idem.go; nil for none),
// stored in the row's transaction. When the key was used before for the
// same request, the upload is dropped and replay is the first answer.
func (up *Upload) CommitOnce(ctx context.Context, contentType string, idem *Idem) (m nah.Media, replay []byte, err error) {
	if up.size == 0 {
		up.Abort()
		return nah.Media{}, nil, ErrEmptyMedia()
	}
	if err := up.f.Sync(); err != nil {
		up.Abort()
		return nah.Media{}, nil, up.s.spaceErr(err)
	}
	now := up.s.now().UnixMilli()
	m = nah.Media{ID: nah.NewMediaID(now), Owner: up.owner, Size: up.size,
		SHA256: hex.EncodeToString(up.h.Sum(nil)), ContentType: contentType, CreatedAt: now}
	final := filepath.Join(up.dir, m.ID)
	up.u.mu.Lock()
	defer up.u.mu.Unlock()
	err = os.Rename(up.tmp, final)
	if err == nil {
		err = syncDir(up.dir)
		if err == nil {
			err = up.s.useFile(ctx, up.owner, true, func(f *personFile) error {
				tx, err := f.db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				if idem != nil {
					if replay, err = idemFind(ctx, tx, idem); err != nil || replay != nil {
						return err
					}
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO media(id, size, sha256, content_type, created_at) VALUES (?, ?, ?, ?, ?)`,
					m.ID, m.Size, m.SHA256, m.ContentType, m.CreatedAt); err != nil {
					return err
				}
				if idem != nil {
					if err := idemSave(ctx, tx, idem, m, now); err != nil {
						return err
					}
				}
				return tx.Commit()
			})
		}
		if err != nil || replay != nil {
			os.Remove(final)
		}
	}
	up.done = true
	up.u.pending -= up.reserved
	up.u.uploading--
	if err != nil || replay != nil {
		os.Remove(up.tmp)
		up.f.Close()
		if err != nil {
			return nah.Media{}, nil, up.s.spaceErr(err)
		}
		return nah.Media{}, replay, nil
	}
	up.u.bytes += m.Size
	up.u.charged += nah.MediaCharge(m.Size)
	up.u.count++
	up.f.Close() // the lock goes with it, once the row is there
	up.s.addedMedia(up.owner)
	return m, nil, nil
}

// addedMedia tells backups that person id's media folder gained files.
func (s *Store) addedMedia(id string) {
	if s.mediaAdded != nil {
		s.mediaAdded(id)
	}
}

// Abort removes the temporary file and gives back the reserved quota.
func (up *Upload) Abort() {
	if up.done {
		return
	}
	up.done = true
	os.Remove(up.tmp)
	up.f.Close()
	up.u.mu.Lock()
	up.u.pending -= up.reserved
	up.u.uploading--
	up.u.mu.Unlock()
}

// dirSynced, when set (by tests only), runs after each syncDir.
var dirSynced func(dir string)

// syncDir fsyncs a folder, so that a rename in it survives a power cut.
// Every folder sync of the store goes through it.
func syncDir(dir string) error {
	if dirSynced != nil {
		defer dirSynced(dir)
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// OpenMedia returns media id of owner and its file, open for reading: the
// caller closes it. A missing media, or one deleted meanwhile, is NotFound.
func (s *Store) OpenMedia(ctx context.Context, owner, id string) (*os.File, nah.Media, error) {
	if !nah.ValidMediaID(id) || s.graph.node(owner) == nil {
		return nil, nah.Media{}, errNoMedia()
	}
	m := nah.Media{ID: id, Owner: owner}
	err := s.useFile(ctx, owner, false, func(f *personFile) error {
		err := f.db.QueryRowContext(ctx, `SELECT size, sha256, content_type, created_at FROM media WHERE id = ?`, id).
			Scan(&m.Size, &m.SHA256, &m.ContentType, &m.CreatedAt)
		if errors.Is(err, sql.ErrNoRows) {
			return errNoMedia()
		}
		return err
	})
	if err != nil {
		return nil, nah.Media{}, err
	}
	dir, _ := s.mediaDir(owner)
	f, err := os.Open(filepath.Join(dir, id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nah.Media{}, errNoMedia() // deleted since the row was read
	}
	if err != nil {
		return nil, nah.Media{}, err
	}
	return f, m, nil
}

// DeleteMedia deletes owner's media id: the row, then the file. Another
// person's media, or a missing one, is NotFound.
func (s *Store) DeleteMedia(ctx context.Context, owner, id string) error {
	if !nah.ValidMediaID(id) {
		return errNoMedia()
	}
	return s.withUsage(ctx, owner, func(u *mediaUsage) error {
		var size int64
		err := s.useFile(ctx, owner, true, func(f *personFile) error {
			err := f.db.QueryRowContext(ctx, `DELETE FROM media WHERE id = ? RETURNING size`, id).Scan(&size)
			if errors.Is(err, sql.ErrNoRows) {
				return errNoMedia()
			}
			return err
		})
		if err != nil {
			return err
		}
		u.bytes -= size
		u.charged -= nah.MediaCharge(size)
		u.count--
		dir, _ := s.mediaDir(owner)
		if err := os.Remove(filepath.Join(dir, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// The row is gone, so no one can read it; the file is removed
			// by the next sweep.
			s.log.Error("remove a deleted media file", "person", owner, "err", err)
		}
		return nil
	})
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
