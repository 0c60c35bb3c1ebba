package store

import (
	"context"
	"database/sql"
)

// testHooks are the tests' replication and open/close seams, set on a
// Config by config: Watch, Sync and Unwatch become its Replicator (nil
// ones do nothing), the rest its settings and unexported seams.
type testHooks struct {
	BeforeOpen func(path string) error
	AfterClose func(path string)
	Watch      func(ctx context.Context, path string) error
	Sync       func(ctx context.Context, path string) error
	Unwatch    func(path string) error
	MaxWatched int
	QueueDir   string
}

func (h testHooks) config(c Config) Config {
	if h.Watch != nil {
		c.Replicator = funcReplicator{h}
	}
	c.MaxWatched, c.QueueDir = h.MaxWatched, h.QueueDir
	c.beforeOpen, c.afterClose = h.BeforeOpen, h.AfterClose
	return c
}

// funcReplicator is a Replicator made of testHooks' functions.
type funcReplicator struct{ h testHooks }

func (r funcReplicator) Watch(ctx context.Context, p string) error { return r.h.Watch(ctx, p) }

func (r funcReplicator) Unwatch(p string) error {
	if r.h.Unwatch == nil {
		return nil
	}
	return r.h.Unwatch(p)
}

func (funcReplicator) Forget(context.Context, string) error { return nil }

// The rest ships nothing without a take-up and leaves every WAL to the
// store: a closed file's is emptied as the store empties it, an open
// file's by its close.
func (r funcReplicator) Sync(ctx context.Context, p string) error {
	if r.h.Sync == nil {
		return nil
	}
	return r.h.Sync(ctx, p)
}

func (funcReplicator) Ship(context.Context, string, *sql.DB) (bool, error) { return false, nil }

func (funcReplicator) Checkpoint(_ context.Context, p string, db *sql.DB) error {
	if db != nil {
		return nil
	}
	return checkpointClosed(p)
}

func (funcReplicator) CheckpointShipped(context.Context, string, *sql.DB) (bool, error) {
	return false, nil
}
