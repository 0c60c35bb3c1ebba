package backup_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
)

// shipNode is a node whose every person file stays open and none is
// watched long: posts reach the replica by ships, or by take-ups when a
// ship cannot prove what it ships.
func shipNode(t *testing.T, dir string, tg *backup.Target) *node {
	t.Helper()
	return openNode(t, dir, tg, nodeOpts{maxOpen: 16, maxWatched: 1})
}

func fileTarget(t *testing.T) (*backup.Target, string) {
	t.Helper()
	replica := filepath.Join(t.TempDir(), "replica")
	tg, err := backup.ParseTarget(replica, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	return tg, replica
}

// drain waits for the replication queue to empty and the ship or take-up
// of the last file popped from it to be counted (the counts then stay
// put for 100 ms).
func drain(t *testing.T, n *node) {
	t.Helper()
	var last store.Stats
	stable := 0
	if !eventually(20*time.Second, func() bool {
		q, _ := n.s.ReplicationQueue()
		st := n.s.Stats()
		if q == 0 && st.Ships == last.Ships && st.TakeUps == last.TakeUps {
			stable++
		} else {
			stable = 0
		}
		last = st
		return stable >= 2
	}) {
		t.Fatal("the replication queue never drained")
	}
}

// postAll has each person post k moments, the queue drained after each round.
func postAll(t *testing.T, n *node, ids []string, k, from int) {
	t.Helper()
	for i := range k {
		for _, id := range ids {
			n.post(t, id, from+i)
		}
		drain(t, n)
	}
}

func rels(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = nah.PersonRel(id)
	}
	return out
}

// TestShipFirstSnapshotAndAcrossRuns: a person's first write in a run is
// shipped, not taken up, both for a file that was never replicated (a
// snapshot of its pages as the first LTX file) and for one replicated by
// an earlier run (its WAL carried on from the local LTX state, checked
// against the target's newest file, or a snapshot as the next TXID after a
// clean stop emptied the WAL). Every restore equals the live file, row by
// row, after each run. A shipped file's mark in the queue on disk goes
// with its ship: the second run takes nothing up at start.
func TestShipFirstSnapshotAndAcrossRuns(t *testing.T) {
	dir := t.TempDir()
	tg, _ := fileTarget(t)
	opts := nodeOpts{maxOpen: 16, maxWatched: 1, queue: true} // as shipNode, with the server's queue on disk
	n := openNode(t, dir, tg, opts)
	var ids []string
	for _, h := range []string{"ann", "bob", "cat", "dan"} {
		ids = append(ids, n.person(t, h))
	}
	// A new person's file is taken up at once (store.CreatePerson).
	if !eventually(10*time.Second, func() bool { return n.s.Stats().TakeUps >= 4 }) {
		t.Fatal("the new files were not taken up")
	}
	drain(t, n)
	before := n.s.Stats()
	postAll(t, n, ids, 5, 0)
	st := n.s.Stats()
	if d := st.TakeUps - before.TakeUps; d != 0 {
		t.Errorf("run 1: %d take-ups for 20 posts of 4 people, want every post shipped (%d ships)", d, st.Ships-before.Ships)
	}
	if st.Ships-before.Ships < 4 {
		t.Errorf("run 1: %d ships", st.Ships-before.Ships)
	}
	n.close() // replicates whatever is still under way
	restoreAll(t, n, tg, rels(ids))

	// A second run: nothing of the files is known but what is on disk.
	n2 := openNode(t, dir, tg, opts)
	drain(t, n2)
	before = n2.s.Stats()
	if before.TakeUps != 0 {
		t.Errorf("run 2 took up %d files at start: files shipped in run 1 were still marked as waiting", before.TakeUps)
	}
	postAll(t, n2, ids, 3, 100)
	st = n2.s.Stats()
	if d := st.TakeUps - before.TakeUps; d != 0 {
		t.Errorf("run 2: %d take-ups for 12 posts of files replicated by run 1 (%d ships)", d, st.Ships-before.Ships)
	}
	n2.close()
	restoreAll(t, n2, tg, rels(ids))
}

// TestShipRefusesWhatItCannotProve plants, between two runs, each way the
// local state, the WAL and the target can stop agreeing, and checks that
// the next write is not shipped on a history it does not continue: the
// replica still restores equal to the live file.
func TestShipRefusesWhatItCannotProve(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		plant func(t *testing.T, dir, replica, id string)
		// takeUp: the write must be taken up (Litestream sorts it out),
		// not shipped.
		takeUp bool
	}{
		{
			// The target lost its newest LTX file (say, a bucket rule):
			// the local history's next file would leave a gap there.
			name: "target behind", takeUp: true,
			plant: func(t *testing.T, dir, replica, id string) {
				l0 := filepath.Join(replica, filepath.FromSlash(nah.PersonRel(id)), "ltx", "0")
				es, err := os.ReadDir(l0)
				if err != nil || len(es) < 2 {
					t.Fatalf("%s: %d files, %v", l0, len(es), err)
				}
				if err := os.Remove(filepath.Join(l0, es[len(es)-1].Name())); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			// Litestream's local state is gone (a new disk for it) while
			// the target holds the history: a first snapshot as TXID 1
			// would overwrite its start.
			name: "local state lost", takeUp: true,
			plant: func(t *testing.T, dir, replica, id string) {
				if err := os.RemoveAll(filepath.Join(dir, "replication", filepath.FromSlash(nah.PersonRel(id)))); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			// Written by a process without replication, and checkpointed:
			// those frames are in no LTX file and the WAL started again
			// (new salts). Its frames alone would leave the write out.
			name: "written behind replication's back",
			plant: func(t *testing.T, dir, replica, id string) {
				s, err := store.Open(ctx, store.Config{Dir: dir, Logger: testLogger(t)})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.CreateMoment(ctx, id, []byte("behind the back")); err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(dir, filepath.FromSlash(nah.PersonRel(id)))
				if err := store.CheckpointClosed(p); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			// Another connection empties the WAL, adds a media row (a page
			// no post writes), then writes another page again and again
			// (the file does not grow) past where the history stopped, and
			// stays open: the WAL is long enough for the old offset, but of
			// another generation, and the media row is in no LTX file.
			name: "WAL restarted and grown past the history's offset",
			plant: func(t *testing.T, dir, replica, id string) {
				p := filepath.Join(dir, filepath.FromSlash(nah.PersonRel(id)))
				before := walBytes(p)
				db, err := sql.Open("sqlite", "file:"+p+"?_pragma=busy_timeout(5000)&_pragma=wal_autocheckpoint(0)")
				if err != nil {
					t.Fatal(err)
				}
				db.SetMaxOpenConns(1)
				t.Cleanup(func() { db.Close() })
				for _, q := range []string{"PRAGMA wal_checkpoint(TRUNCATE)",
					"INSERT INTO media VALUES ('behind-the-back', 1, 'x', 'text/plain', 0)"} {
					if _, err := db.Exec(q); err != nil {
						t.Fatal(err)
					}
				}
				for i := 1; walBytes(p) < before+100<<10; i++ {
					if _, err := db.Exec("INSERT OR REPLACE INTO _litestream_seq VALUES (1, ?)", i); err != nil {
						t.Fatal(err)
					}
				}
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			tg, replica := fileTarget(t)
			n := shipNode(t, dir, tg)
			ann, bob := n.person(t, "ann"), n.person(t, "bob")
			ids := []string{ann, bob}
			drain(t, n)
			postAll(t, n, ids, 4, 0)
			n.close()

			c.plant(t, dir, replica, ann)

			n2 := shipNode(t, dir, tg)
			drain(t, n2)
			before := n2.s.Stats()
			n2.post(t, ann, 100)
			drain(t, n2)
			st := n2.s.Stats()
			took, shipped := st.TakeUps-before.TakeUps, st.Ships-before.Ships
			t.Logf("the write after the plant: %d take-ups, %d ships", took, shipped)
			if c.takeUp && (took != 1 || shipped != 0) {
				t.Errorf("the write after the plant: %d take-ups and %d ships, want it taken up", took, shipped)
			}
			postAll(t, n2, ids, 2, 200)
			n2.close()
			restoreAll(t, n2, tg, rels(ids))
		})
	}
}
