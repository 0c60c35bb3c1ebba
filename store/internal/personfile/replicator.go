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
// Every person file written and not yet on the replica waits in one
// queue (queue.go), from the write to the replica: a replicator ships it
// (Ship) or takes it up (Watch) when nobody watches it, else syncs it
// (Sync), at most once a second. A file is either watched (Litestream
// follows it: Watch, Sync, Unwatch) or not (its new writes are shipped
// from the app's own connection: Ship, Checkpoint). Paths are absolute;
// rel is under the data directory. db is the app's connection to an open
// file, held by the caller; nil for a file nobody in this process has
// open. A nil Replicator: no replication.
type Replicator interface {
	// Watch has replication follow the file at path: register it and
	// sync once (locally: the upload is the next Sync's).
	Watch(ctx context.Context, path string) error
	// Sync ships watched file path's new writes and waits for the target;
	// an error (at once while the target is failing) leaves them behind.
	Sync(ctx context.Context, path string) error
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
