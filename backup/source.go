package backup

import (
	"context"
	"database/sql"
	"os"
	"time"
)

// What backup needs of the live data, one interface for what it reads
// (and the replication queue it tells of its own syncs) and one for what
// it changes (the other way, the store speaks to replication through
// store.Replicator):
//
//	backup ──Source, Files──▶ *store.Store   (the server)
//	backup ──Source─────────▶ store.AtRest   (nah restore -check)
//
// Paths named rel are under the data directory, slash-separated:
// directory.db, people/<id>/person.db and the media files (nah.MediaRel).

// Source is what backup reads of the data directory. Sweeper, MediaMirror,
// Drill and Backups read through it.
type Source interface {
	// Databases lists every database now, sorted.
	Databases(ctx context.Context) ([]string, error)
	// Backup makes a consistent copy of database rel and returns it open
	// for reading; closing it releases the copy.
	Backup(ctx context.Context, rel string) (*os.File, error)
	// MediaOf calls fn with the names of person owner's media files, a
	// bounded batch at a time, in no set order; fn must not keep the slice.
	// OpenMediaFile opens one (nah.MediaRel).
	MediaOf(ctx context.Context, owner string, fn func(names []string) error) error
	OpenMediaFile(rel string) (*os.File, error)
	// LiveRead runs fn in a read transaction on the live database rel;
	// ReadFile on the SQLite file at path (a restored copy), and
	// IntegrityCheck runs SQLite's full integrity check on it.
	LiveRead(ctx context.Context, rel string, fn func(tx *sql.Tx) error) error
	ReadFile(ctx context.Context, path string, fn func(tx *sql.Tx) error) error
	IntegrityCheck(ctx context.Context, path string) error
	// HandleOf names the person of database rel in messages ("" if unknown).
	HandleOf(ctx context.Context, rel string) string
	// LastWrite is when database rel last changed on disk.
	LastWrite(rel string) time.Time
	// The replication queue: every person file written and not yet on
	// the replica, watched or not, one since per file (its oldest write
	// the replica lacks). ReplicationQueued says whether rel waits there,
	// ReplicationSince since when; ReplicationQueue is how many wait, and
	// how long the oldest has waited.
	ReplicationQueued(rel string) bool
	ReplicationSince(rel string) (time.Time, bool)
	ReplicationQueue() (n int, oldest time.Duration)
}

// Files is what backup changes of the live data.
type Files interface {
	// Rewatch brings person file rel back into replication's watched set,
	// as a write would, so that a file whose last sync failed catches up;
	// WatchNow does the same and returns once replication has the file.
	Rewatch(ctx context.Context, rel string) error
	WatchNow(ctx context.Context, rel string) error
	// ReplacePersonFile hides person id, closes their file (replication
	// lets go of it), calls make with the path the new file must be made
	// at, swaps it in, reconciles their media and returns once replication
	// has the new file; a failing make leaves the old file.
	// UndoReplacePersonFile swaps back the file the last of those swaps
	// replaced, in the same way, calling then before it is swapped in.
	ReplacePersonFile(ctx context.Context, id string, make func(path string) error) error
	UndoReplacePersonFile(ctx context.Context, id string, then func(path string) error) error
	// ReplicationSynced tells the replication queue that backup synced
	// person file rel itself (the catch-up loop, "Sync now", a drill) in
	// a sync that began at began: its writes queued before then are on
	// the replica, and leave the queue.
	ReplicationSynced(rel string, began time.Time)
}
