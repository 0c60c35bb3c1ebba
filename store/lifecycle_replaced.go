package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/nah-app/nah"
)

// The file a restore of a person to a time replaced is kept, with hard
// links to their media files then, in nah.ReplacedDirRel(id) until the
// delete grace ends: UndoReplacePersonFile swaps it back. Restores that
// follow while it is kept keep it, so the undo goes back to before the
// first of them. The folder's person.db carries the time it was kept as
// its modification time, so the grace survives a restart; the sweep
// purges it after.

func (s *Store) replacedDir(id string) string { return s.Path(nah.ReplacedDirRel(id)) }

// keepReplaced keeps person id's file p, which is about to be replaced (it
// is closed, its WAL empty), and their media, replacing an earlier one.
// The caller holds lifeMu and has the person hidden.
func (s *Store) keepReplaced(id, p string) error {
	dir := s.replacedDir(id)
	tmp := dir + ".new"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(tmp, nah.MediaDirName), privateDir); err != nil {
		return err
	}
	err := func() error {
		kept := filepath.Join(tmp, nah.PersonFileName)
		if err := linkOrCopy(p, kept); err != nil {
			return err
		}
		now := s.now()
		if err := os.Chtimes(kept, now, now); err != nil {
			return err
		}
		media, err := s.mediaDir(id)
		if err != nil {
			return err
		}
		es, err := os.ReadDir(media)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		for _, e := range es {
			if e.Type().IsRegular() && nah.ValidMediaID(e.Name()) {
				if err := linkOrCopy(filepath.Join(media, e.Name()), filepath.Join(tmp, nah.MediaDirName, e.Name())); err != nil {
					return err
				}
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		return os.Rename(tmp, dir)
	}()
	if err != nil {
		os.RemoveAll(tmp)
		return err
	}
	return syncDir(filepath.Dir(dir))
}

// ReplacedUntil says whether person id has a file kept from a restore to
// a time, and until when an undo can bring it back.
func (s *Store) ReplacedUntil(id string) (time.Time, bool) {
	if !nah.ValidPersonID(id) || s.deleteGrace == 0 {
		return time.Time{}, false
	}
	st, err := os.Stat(filepath.Join(s.replacedDir(id), nah.PersonFileName))
	if err != nil {
		return time.Time{}, false
	}
	until := st.ModTime().Add(s.deleteGrace)
	return until, s.now().Before(until)
}

// errNothingToUndo is UndoReplacePersonFile's answer when person id has
// no kept file.
func errNothingToUndo() error {
	return nah.Errorf(nah.NotFound, "", "there is no restore of this person to undo (an undo is possible until the delete grace after the restore ends)")
}

// UndoReplacePersonFile swaps back the file the first of person id's
// pending restores replaced, as ReplacePersonFile swaps one in: then is
// called with the kept file at the path it is swapped in from (for
// replication's state). Their media files of then come back; those
// uploaded since go with their rows.
func (s *Store) UndoReplacePersonFile(ctx context.Context, id string, then func(path string) error) error {
	if _, ok := s.ReplacedUntil(id); !ok {
		return errNothingToUndo()
	}
	return s.replacePersonFile(ctx, id, func(tmp string) error {
		if _, ok := s.ReplacedUntil(id); !ok { // purged while this waited for lifeMu
			return errNothingToUndo()
		}
		// A link or a copy: the kept file stays should the swap fail.
		if err := linkOrCopy(filepath.Join(s.replacedDir(id), nah.PersonFileName), tmp); err != nil {
			return err
		}
		if then == nil {
			return nil
		}
		return then(tmp)
	}, true)
}

// undoneReplaced brings person id's kept media back beside the file just
// swapped back in and removes the kept folder. A media file that cannot
// come back leaves its row to the reconcile that follows.
func (s *Store) undoneReplaced(id string) {
	dir := s.replacedDir(id)
	media, err := s.mediaDir(id)
	if err == nil {
		err = os.MkdirAll(media, privateDir)
	}
	if err == nil {
		es, _ := os.ReadDir(filepath.Join(dir, nah.MediaDirName))
		for _, e := range es {
			to := filepath.Join(media, e.Name())
			if _, err := os.Lstat(to); err == nil || !nah.ValidMediaID(e.Name()) {
				continue
			}
			if err := linkOrCopy(filepath.Join(dir, nah.MediaDirName, e.Name()), to); err != nil {
				s.log.Warn("undo a restore: bring a media file back", "person", id, "media", e.Name(), "err", err)
			}
		}
		if err := syncDir(media); err != nil {
			s.log.Warn("undo a restore: sync the media folder", "person", id, "err", err)
		}
		s.addedMedia(id)
	}
	if err != nil {
		s.log.Warn("undo a restore: the media folder", "person", id, "err", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		s.log.Warn("undo a restore: remove the kept file", "person", id, "err", err)
	}
}

// purgeReplaced removes every kept file whose grace has passed by the
// store's clock, and what an interrupted keep left; it returns how many
// kept files went. The sweep runs it with PurgeDeleted.
func (s *Store) purgeReplaced(ctx context.Context) (int, error) {
	es, err := os.ReadDir(s.Path(nah.ReplacedRel))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range es {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		id := e.Name()
		s.lifeMu.Lock()
		_, keep := s.ReplacedUntil(id)
		if !keep {
			if err := os.RemoveAll(filepath.Join(s.Path(nah.ReplacedRel), id)); err != nil {
				s.lifeMu.Unlock()
				return n, fmt.Errorf("purge the kept file of %s: %w", id, err)
			}
			if nah.ValidPersonID(id) {
				n++
			}
		}
		s.lifeMu.Unlock()
	}
	return n, nil
}

// link is os.Link; tests make it fail.
var link = os.Link

// linkOrCopy makes to the same file as from: a hard link (no space, no
// time), or a synced copy where the file system has no hard links.
func linkOrCopy(from, to string) error {
	if err := link(from, to); err == nil {
		return nil
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, privateFile)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(to)
	}
	return err
}
