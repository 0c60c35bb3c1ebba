package store

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/nah-app/nah"
)

// AtRest is data directory Dir read where it lies, with no store open: a
// stopped server's, or a running one's (its files are only read), for
// `nah restore -check`. It is backup.Source as *Store is, for a server
// nobody runs here: nothing waits for replication, and it makes no copies.
// ConfigureSQLite must have run.
type AtRest struct{ Dir string }

func (a AtRest) path(rel string) string { return filepath.Join(a.Dir, filepath.FromSlash(rel)) }

// Databases is Store.Databases; a data directory nobody posted to yet has
// no people folder, and holds the directory alone.
func (a AtRest) Databases(ctx context.Context) ([]string, error) { return listDatabases(a.Dir, true) }

// Backup is refused: a copy is made in the folder of the file it copies,
// and a directory at rest is only read.
func (a AtRest) Backup(ctx context.Context, rel string) (*os.File, error) {
	return nil, errors.New("store: a data directory at rest is only read: no copies")
}

// MediaOf is Store.MediaOf.
func (a AtRest) MediaOf(ctx context.Context, owner string, fn func(names []string) error) error {
	return mediaOf(ctx, a.Dir, owner, fn)
}

// OpenMediaFile is Store.OpenMediaFile.
func (a AtRest) OpenMediaFile(rel string) (*os.File, error) { return openMediaFile(a.Dir, rel) }

// LiveRead runs fn in a read transaction on database rel.
func (a AtRest) LiveRead(ctx context.Context, rel string, fn func(tx *sql.Tx) error) error {
	return readTx(ctx, a.path(rel), fn)
}

// ReadFile and IntegrityCheck are the package's.
func (a AtRest) ReadFile(ctx context.Context, p string, fn func(tx *sql.Tx) error) error {
	return readTx(ctx, p, fn)
}

func (a AtRest) IntegrityCheck(ctx context.Context, p string) error { return IntegrityCheck(ctx, p) }

// HandleOf reads the handle of the person of rel from the directory.
func (a AtRest) HandleOf(ctx context.Context, rel string) (handle string) {
	readTx(ctx, a.path(nah.DirectoryRel), func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT handle FROM people WHERE id = ?`, nah.PersonOfRel(rel)).Scan(&handle)
	})
	return handle
}

// LastWrite is Store.LastWrite.
func (a AtRest) LastWrite(rel string) time.Time { return lastWrite(a.path(rel)) }

// ReplicationQueued, ReplicationSince and ReplicationQueue: no server
// here queues a file.
func (a AtRest) ReplicationQueued(rel string) bool { return false }

func (a AtRest) ReplicationSince(rel string) (time.Time, bool) { return time.Time{}, false }

func (a AtRest) ReplicationQueue() (int, time.Duration) { return 0, 0 }
