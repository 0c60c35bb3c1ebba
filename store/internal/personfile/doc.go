// Package personfile is the mechanism behind person files: a bounded cache
// of open SQLite handles, one per person, and the queue that hands written
// files to replication. It keeps no rules of its own: who may read what,
// the feed and the directory stay in package store, which says where a
// person's file lives and how one is opened (Config).
//
// It is a package of its own so that its locks stay its own: store and its
// tests drive it through Acquire, Release, Watch, Wrote, Hide and the
// gauges, never through its fields; internal, because nothing outside
// store may open a person file behind the store's rules. It speaks to
// replication through Replicator (replicator.go), the store's one
// interface to it, and keeps the one queue of written files the replica
// lacks, watched or not (queue.go): its replicators ship or take up the
// ones not watched and sync the watched ones (watch.go).
package personfile
