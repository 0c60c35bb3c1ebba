package store

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/nah-app/nah"
)

// Nothing under the data directory is for other users. Every SQLite file is
// created privateFile before SQLite opens it (openDB), so its -wal and -shm,
// which take the database's mode, are private too.
const (
	privateDir  fs.FileMode = 0o700
	privateFile fs.FileMode = 0o600
)

// tightenDataDir takes group and other permissions off the data directory,
// people/ and directory.db, warning only if directory.db existed. No walk of
// person folders: people/ at 0700 shuts them off. A failure is logged, not fatal.
func tightenDataDir(dir string, log *slog.Logger) {
	_, err := os.Stat(filepath.Join(dir, nah.DirectoryRel))
	existing := err == nil
	var changed []string
	for _, p := range []struct {
		path string
		mode fs.FileMode
	}{
		{dir, privateDir},
		{filepath.Join(dir, nah.PeopleRel), privateDir},
		{filepath.Join(dir, nah.DirectoryRel), privateFile},
		{filepath.Join(dir, nah.DirectoryRel+"-wal"), privateFile},
		{filepath.Join(dir, nah.DirectoryRel+"-shm"), privateFile},
	} {
		info, err := os.Stat(p.path)
		if err != nil || info.Mode().Perm()&^p.mode == 0 {
			continue // missing (not made yet), or private already
		}
		if err := os.Chmod(p.path, p.mode); err != nil {
			log.Warn("the data directory is readable by others and could not be made private", "path", p.path, "mode", info.Mode().Perm().String(), "err", err)
			continue
		}
		changed = append(changed, fmt.Sprintf("%s %s->%s", p.path, info.Mode().Perm(), p.mode))
	}
	if len(changed) > 0 && existing {
		log.Warn("made the data directory private: it was readable by other users", "changed", changed)
	}
}

// writtenByKey is the directory's meta row naming the version of nah that
// created the directory or last migrated its schema: the oldest version
// that reads it.
const writtenByKey = "written_by"

// recordWriter records version as the directory's writer, in the
// transaction of its migration.
func recordWriter(ctx context.Context, tx *sql.Tx, version string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO meta(key, value) VALUES (?1, ?2)
		ON CONFLICT(key) DO UPDATE SET value = excluded.value`, writtenByKey, cmp.Or(version, "dev"))
	return err
}

// directoryTooNew is the refusal of a directory whose schema a newer
// binary wrote, in one sentence naming that binary's version (its first
// 64 bytes), when it recorded one.
func directoryTooNew(ctx context.Context, db *sql.DB, dir, version string, e *tooNewError) error {
	var writer string
	err := db.QueryRowContext(ctx, `SELECT CAST(substr(value, 1, 64) AS TEXT) FROM meta WHERE key = ?`, writtenByKey).Scan(&writer)
	install := "a newer nah"
	if err == nil && writer != "" {
		install = "nah " + writer + " or newer"
		writer = "nah " + writer
	} else {
		writer = "a newer nah"
	}
	return sentence{fmt.Sprintf("the data in %s was written by %s (directory schema %d); this binary is nah %s and reads schema up to %d: install %s",
		dir, writer, e.version, cmp.Or(version, "dev"), e.known, install), ErrTooNew}
}

// sentence is an error said in full by its text, which wraps err.
type sentence struct {
	text string
	err  error
}

func (e sentence) Error() string { return e.text }

func (e sentence) Unwrap() error { return e.err }
