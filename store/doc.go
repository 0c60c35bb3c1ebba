// Package store owns SQLite: the directory database (accounts, sessions,
// codes, connections) and one database file per person under
// Dir/people/<id>/, with the in-memory graph the feed reads.
//
// It is the only package that imports the SQLite driver and knows nothing of
// HTTP. It owns the stored form of secrets (secrets.go, passwords.go).
//
// Its files are named for the layer they belong to. A layer calls the ones
// below it; the calls upwards are a post or a delete keeping the feed's
// memory of its author current (feed_head.go, feed_settle.go).
//
//	app (HTTP), backup (replication), cmd/nah
//	  │
//	lifecycle_*.go  moves a person's whole file: import (lifecycle_import*:
//	  │             its folder, tar, checks, copy), export, delete and
//	  │             restore, the file a restore replaced
//	  ▼
//	feed*.go        the feed read: the circle's files merged newest poster
//	  │             first, over each person's newest moments kept in memory
//	  ▼
//	person_*.go     a person's file and its tables: moments, media, uploads,
//	mls*.go         idempotency keys; MLS clients, groups and key log
//	dir_*.go        directory.db: people, sessions, admins, join codes,
//	  │             links, invites, connections, devices, digests, settings
//	  ▼
//	the base        store.go (Open, Close, stats), graph.go (a node per
//	                person), files.go (the open-file cache,
//	                internal/personfile), flush.go (newest times to the
//	                directory), datadir.go, sqlite.go, faults.go, runs.go
//	replication.go, drill.go: what backup reads and is told
//
// A table that callers use as a whole hangs on a value of its own that
// *Store hands out, so that *Store lists what is about the store: Admins
// and JoinCodes (the directory), Devices (push tokens), Resumables (a
// person's tus uploads), HeldImports (exports kept for a second try).
package store
