// Package backup keeps every database copied off the box: continuous
// replication with Litestream (replica.go), a nightly plain copy of every
// file (sweep.go) and the restores that bring them back (restore.go). It is
// the only package that imports Litestream, so the rest of the code sees
// "replicate this file, stop, sync now, status, restore" and nothing of the
// library's API, which upstream calls unstable.
//
// The seam with the store, one interface each way:
//
//   - The store speaks to replication through store.Replicator (declared
//     in the store, beside the cache that calls it): Watch, Sync, Unwatch,
//     Ship, Checkpoint, CheckpointShipped and Forget. *Replicator is it.
//   - Backup sees the live data through Source (what it reads: databases,
//     consistent copies, media, read transactions, the replication queue)
//     and Files (what it changes: a file brought back into replication, a
//     person's file swapped, the queue told of a sync), both declared in
//     source.go. *store.Store is both; store.AtRest is Source for a data
//     directory nobody serves (nah restore -check), so a caller wires one
//     object, never closures.
//   - Files waiting for the replica: one queue, the store's, holds every
//     person file written and not yet on the replica, watched or not,
//     each with the time of its oldest write the replica lacks, marked on
//     disk until its last sync. Its replicators ship one not watched
//     (Ship) or take it up (Watch), and sync a watched one (Sync) at most
//     once a second; Backups reads each file's since and the lag through
//     Source, and tells it through Files of the syncs it makes itself
//     (catch-up, "Sync now", a drill: ReplicationSynced). syncLoop here syncs the
//     directory, which the store writes without telling.
package backup
