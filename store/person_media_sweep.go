package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"github.com/nah-app/nah"
)

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
