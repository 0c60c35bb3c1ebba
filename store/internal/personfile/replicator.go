package personfile

import (
	"context"
	"database/sql"
)

// Replicator is everything the store asks of replication (package
// backup's Replicator); store.Replicator is this type. The seam:
//
//	store ──Replicator──▶ backup      (this interface: the store's writes)
//	store ◀──Source, Files── backup   (declared in backup: what it reads, what it changes)
//
// A file is either watched (Litestream follows it: Watch, Wrote, Unwatch)
// or not (its new writes are shipped from the app's own connection: Ship,
// Checkpoint). Paths are absolute; rel is under the data directory. db is
// the app's connection to an open file, held by the caller; nil for a file
// nobody in this process has open. A nil Replicator: no replication.
type Replicator interface {
	// Watch has replication follow the file at path: register it and
	// sync once.
	Watch(ctx context.Context, path string) error
	// Wrote says that watched file path was just written: it is shipped
	// within a second.
	Wrote(path string)
	// Unwatch lets go of path after a last sync, whose failure it returns
	// (the replica then lacks some of the file).
	Unwatch(path string) error
	// Ship ships the new writes of path, not watched, without taking it
	// up; false when it cannot prove the file's history carries on, and
	// the file must be taken up (Watch).
	Ship(ctx context.Context, path string, db *sql.DB) (bool, error)
	// Checkpoint empties path's WAL and, when the history has every frame
	// of it, records what the next ship needs to carry on from the next
	// WAL; CheckpointShipped empties it only when the history has it whole.
	Checkpoint(ctx context.Context, path string, db *sql.DB) error
	CheckpointShipped(ctx context.Context, path string, db *sql.DB) (bool, error)
	// Forget removes what the replica holds of a purged person's file.
	// The store calls it; the cache does not.
	Forget(ctx context.Context, rel string) error
}
