package backup_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/superfly/ltx"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
)

// shippedPeople starts a node on a directory target with a person of
// each name, whose posts are shipped (bob, made last, is the one
// watched), and once the test ends restores them, before and after the
// node's clean stop, equal to the live data.
func shippedPeople(t *testing.T, names ...string) (n *node, replica, dir string, ids []string) {
	t.Helper()
	dir = t.TempDir()
	tg, replica := fileTarget(t)
	n = shipNode(t, dir, tg)
	for _, name := range names {
		ids = append(ids, n.person(t, name))
	}
	n.person(t, "bob")
	drain(t, n)
	t.Cleanup(func() {
		restoreAll(t, n, tg, rels(ids))
		n.close()
		restoreAll(t, n, tg, rels(ids))
	})
	return n, replica, dir, ids
}

// postUntilEmptied posts 32 KiB moments as id, each shipped, until a
// ship's checkpoint empties the WAL; it returns the newest LTX file then.
func postUntilEmptied(t *testing.T, n *node, replica, id string, from int) ltx.Header {
	t.Helper()
	p := n.s.Path(nah.PersonRel(id))
	body := bytes.Repeat([]byte("0123456789abcdef"), 2<<10)
	for i := range 40 {
		if _, err := n.s.CreateMoment(context.Background(), id, append(fmt.Appendf(nil, "%d ", from+i), body...)); err != nil {
			t.Fatal(err)
		}
		drain(t, n)
		if walBytes(p) == 0 {
			h, _, _ := newestLTX(t, replica, nah.PersonRel(id))
			return h
		}
	}
	t.Fatalf("%s: 40 posts of 32 KiB and the WAL (%d bytes) was never emptied", id, walBytes(p))
	return ltx.Header{}
}

// TestShipCarriesOnInRunWithoutTheMark: once a ship's own checkpoint
// emptied a WAL it had whole, the next post is shipped as its few pages
// from the next WAL on what the run knows (SQLite's next WAL has the
// first salt one past), not on the mark, which is for the next run: here
// it is removed each time, and no ship snapshots. The replica restores
// equal.
func TestShipCarriesOnInRunWithoutTheMark(t *testing.T) {
	n, replica, dir, ids := shippedPeople(t, "ann", "cat", "dan")
	for _, id := range ids {
		last := postUntilEmptied(t, n, replica, id, 0)
		if err := os.Remove(filepath.Join(dir, "replication", filepath.FromSlash(nah.PersonRel(id)), "wal-emptied")); err != nil {
			t.Fatalf("%s: the checkpoint left no mark: %v", id, err)
		}
		post1k(t, n, id, 0)
		drain(t, n)
		h, pages := nextLTX(t, replica, nah.PersonRel(id), last.MaxTXID)
		t.Logf("%s: the post after the checkpoint shipped TXID %d, %d of %d pages, WAL offset %d", id, h.MaxTXID, pages, h.Commit, h.WALOffset)
		if h.IsSnapshot() || pages >= int(h.Commit)/2 || h.WALOffset != 32 {
			t.Errorf("%s: the post after the checkpoint shipped %d of %d pages from WAL offset %d, want the post's few from the new WAL's first frame", id, pages, h.Commit, h.WALOffset)
		}
	}
}

// TestShipSnapshotsAWALRestartedBehindItsBack: between the checkpoint
// that emptied ann's WAL and her next post, another connection writes
// her file and empties the WAL it wrote: her next WAL has the first salt
// two past, which proves nothing in the run, so her next post is a
// snapshot, not a carry-on that would leave that write out of the
// replica. Cat's write left in her WAL is shipped with her post. The
// replica restores equal.
func TestShipSnapshotsAWALRestartedBehindItsBack(t *testing.T) {
	n, replica, _, ids := shippedPeople(t, "ann", "cat")
	for i, qs := range [][]string{
		{"INSERT INTO media VALUES ('behind-the-back', 1, 'x', 'text/plain', 0)", "PRAGMA wal_checkpoint(TRUNCATE)"},
		{"INSERT INTO media VALUES ('left-in-the-wal', 1, 'x', 'text/plain', 0)"},
	} {
		id := ids[i]
		last := postUntilEmptied(t, n, replica, id, 0)
		db, err := sql.Open("sqlite", "file:"+n.s.Path(nah.PersonRel(id))+"?_pragma=busy_timeout(5000)")
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if _, err := db.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
		post1k(t, n, id, 0)
		drain(t, n)
		h, pages := nextLTX(t, replica, nah.PersonRel(id), last.MaxTXID)
		t.Logf("%s (%q): the next post shipped TXID %d, %d of %d pages, WAL offset %d", id, qs, h.MaxTXID, pages, h.Commit, h.WALOffset)
		if len(qs) == 2 && pages != int(h.Commit) {
			t.Errorf("%s's WAL was restarted behind replication's back, and the next LTX file holds %d of %d pages: carried on, not snapshotted", id, pages, h.Commit)
		}
	}
}

// TestShipSnapshotsACommitBeforeTheCheckpoint: another connection
// commits to ann's file after her ship's checkpoint found the WAL covered
// by the history and before it empties the WAL, which copies that commit
// into the file. The run has no proof of the next WAL then, and the file
// no mark: her next post is a snapshot, and the replica restores equal.
func TestShipSnapshotsACommitBeforeTheCheckpoint(t *testing.T) {
	n, replica, dir, ids := shippedPeople(t, "ann")
	ann := ids[0]
	p := n.s.Path(nah.PersonRel(ann))
	var once atomic.Bool
	backup.BeforeTruncate(func(path string) {
		if path != p || !once.CompareAndSwap(false, true) {
			return
		}
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
		if err != nil {
			t.Error(err)
			return
		}
		defer db.Close()
		if _, err := db.Exec("INSERT INTO media VALUES ('before-the-checkpoint', 1, 'x', 'text/plain', 0)"); err != nil {
			t.Error(err)
		}
	})
	defer backup.BeforeTruncate(nil)
	last := postUntilEmptied(t, n, replica, ann, 0)
	if !once.Load() {
		t.Fatal("no checkpoint of ann's file ran")
	}
	if _, err := os.Stat(filepath.Join(dir, "replication", filepath.FromSlash(nah.PersonRel(ann)), "wal-emptied")); err == nil {
		t.Error("the checkpoint left a mark though another connection committed before it")
	}
	post1k(t, n, ann, 0)
	drain(t, n)
	h, pages := nextLTX(t, replica, nah.PersonRel(ann), last.MaxTXID)
	t.Logf("the next post shipped TXID %d, %d of %d pages, WAL offset %d", h.MaxTXID, pages, h.Commit, h.WALOffset)
	if pages != int(h.Commit) {
		t.Errorf("a commit landed before the checkpoint, and the next LTX file holds %d of %d pages: carried on, not snapshotted", pages, h.Commit)
	}
}
