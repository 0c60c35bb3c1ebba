package store

import "context"

// testHooks are the tests' replication and open/close seams, set on a
// Config by config: Watch and Unwatch become its Replicator (nil ones do
// nothing), the rest its settings and unexported seams.
type testHooks struct {
	BeforeOpen func(path string) error
	AfterClose func(path string)
	Watch      func(ctx context.Context, path string) error
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
