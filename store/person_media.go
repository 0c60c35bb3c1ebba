package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"hash"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nah-app/nah"
)

// Media: files under people/<id>/media/<id>, a row each (migrations/person/0002).
// An upload streams to a locked upload-*.tmp, fsynced, renamed, folder fsynced,
// then its row is committed; a delete drops the row first: no row ever points to
// a missing file, and sweepMedia and sweepUploads remove what a crash leaves.

const uploadPrefix = "upload-"

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

// CommitOnce is Commit under an idempotency key (person_idem.go; nil for
// none), stored in the row's transaction. When the key was used before for
// the same request, the upload is dropped and replay is the first answer.
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
