package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/nah-app/nah"
)

// A person `nah restore` could not restore is not left missing (that reads
// as empty): person.db becomes text SQLite refuses (unreadable, faults.go),
// and restore-failed/<id> says why, one folder so Open need not stat every
// person (a glob of people/ costs milliseconds a start at 1,000 people).
// Open lists them in FileProblems; a sound person.db heals it.

func restoreFailedPath(dir, id string) string {
	return filepath.Join(dir, filepath.FromSlash(nah.RestoreFailedMarkerRel(id)))
}

// maxRestoreFailed bounds the sentence read from a marker: it is shown on
// the console, and the restore writes a few hundred bytes.
const maxRestoreFailed = 2 << 10

// placeholder is the person.db of a person whose restore failed.
const placeholder = "This is not a database. nah restore could not restore this person's file:\n" +
	"see restore-failed/<id> in the data directory. Put a sound person.db here to mend it.\n"

// MarkRestoreFailed leaves, in the data directory dir being restored, the
// placeholder and the marker of person id (see above); why is the
// restore's sentence. Any part of a file the restore left goes first.
func MarkRestoreFailed(dir, id, why string) error {
	if !nah.ValidPersonID(id) {
		return fmt.Errorf("mark a failed restore: not a person id: %q", id)
	}
	folder := filepath.Join(dir, filepath.FromSlash(nah.PersonDirRel(id)))
	if err := os.MkdirAll(folder, privateDir); err != nil {
		return err
	}
	p := filepath.Join(folder, nah.PersonFileName)
	for _, q := range []string{p, p + "-wal", p + "-shm"} {
		if err := os.Remove(q); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.WriteFile(p, []byte(placeholder), privateFile); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, nah.RestoreFailedRel), privateDir); err != nil {
		return err
	}
	return os.WriteFile(restoreFailedPath(dir, id), []byte(why+"\n"), privateFile)
}

// RestoreFailed says whether data directory dir holds the marker of a
// failed restore of person id.
func RestoreFailed(dir, id string) bool {
	_, err := os.Stat(restoreFailedPath(dir, id))
	return err == nil
}

// errRestoreFailed is the fault of a person listed from their marker.
var errRestoreFailed = errors.New("nah restore could not restore this person's file")

// loadRestoreFailed lists the people of the graph whose folder holds a
// marker, at Open. A marker of someone the directory does not know (purged,
// or a folder from elsewhere) is left alone.
func (s *Store) loadRestoreFailed() {
	es, err := os.ReadDir(filepath.Join(s.dir, nah.RestoreFailedRel))
	if err != nil {
		return // none: the folder is only made by a restore that failed someone
	}
	for _, e := range es {
		id := e.Name()
		if !nah.ValidPersonID(id) || s.graph.node(id) == nil {
			continue
		}
		m := restoreFailedPath(s.dir, id)
		why := "(the marker could not be read)"
		if f, err := os.Open(m); err == nil {
			b, _ := io.ReadAll(io.LimitReader(f, maxRestoreFailed))
			f.Close()
			why = strings.TrimSpace(strings.ToValidUTF8(string(b), string(utf8.RuneError)))
		}
		s.problems.mu.Lock()
		if s.problems.restoreFailed == nil {
			s.problems.restoreFailed = make(map[string]string)
		}
		s.problems.restoreFailed[id] = "nah restore could not restore it, and left a placeholder: " + why
		s.problems.mu.Unlock()
		s.noteUnreadable(id, errRestoreFailed)
	}
}

// PeopleOf lists the people (not deleted) of the directory database at p,
// for a restore to find those the replica holds no file of. A directory
// older than deletions has no deleted_at column, and no one deleted.
func PeopleOf(ctx context.Context, p string) ([]string, error) {
	db, err := openDB(p, true, 1, 256, SyncFull, false)
	if err != nil {
		return nil, err
	}
	defer func() {
		db.Close()
		for _, q := range []string{p + "-wal", p + "-shm"} {
			if st, err := os.Stat(q); err == nil && (st.Size() == 0 || strings.HasSuffix(q, "-shm")) {
				os.Remove(q)
			}
		}
	}()
	rows, err := db.QueryContext(ctx, `SELECT id FROM people WHERE deleted_at IS NULL`)
	if err != nil && strings.Contains(err.Error(), "no such column") {
		rows, err = db.QueryContext(ctx, `SELECT id FROM people`)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
