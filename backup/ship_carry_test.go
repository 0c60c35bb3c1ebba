package backup_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/superfly/ltx"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
)

// newestLTX decodes the newest level-0 LTX file of database rel on the
// replica directory replica: its header, how many pages it holds, and
// how many files level 0 holds.
func newestLTX(t testing.TB, replica, rel string) (hdr ltx.Header, pages, files int) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(replica, filepath.FromSlash(rel), "ltx", "0", "*.ltx"))
	if len(names) == 0 {
		t.Fatalf("%s: no level-0 file on the replica", rel)
	}
	sort.Strings(names)
	f, err := os.Open(names[len(names)-1])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := ltx.NewDecoder(f)
	if err := dec.DecodeHeader(); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, dec.Header().PageSize)
	for {
		var ph ltx.PageHeader
		if err := dec.DecodePage(&ph, data); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", names[len(names)-1], err)
		}
		pages++
	}
	return dec.Header(), pages, len(names)
}

// nextLTX waits for a level-0 LTX file of database rel past TXID after
// on the replica and decodes the newest (newestLTX): drain may return while
// a ship is still writing, its counts moving only once it returns.
func nextLTX(t testing.TB, replica, rel string, after ltx.TXID) (hdr ltx.Header, pages int) {
	t.Helper()
	if !eventually(5*time.Second, func() bool {
		hdr, pages, _ = newestLTX(t, replica, rel)
		return hdr.MaxTXID > after
	}) {
		t.Fatalf("%s: nothing shipped past TXID %d", rel, after)
	}
	return hdr, pages
}

// post1k writes a moment of about 1 KiB, so that a file is more pages
// than a post writes.
func post1k(t testing.TB, n *node, id string, i int) {
	t.Helper()
	body := bytes.Repeat(fmt.Appendf(nil, "moment %d of %s. ", i, id), 40)
	if _, err := n.s.CreateMoment(context.Background(), id, body); err != nil {
		t.Fatal(err)
	}
}

// TestShipCarriesOnAfterACleanStop: a clean stop empties every WAL; the
// first post of each person in the next run is shipped as the next LTX
// file of their history holding the post's few pages, read from the new
// WAL (its salts in the header), not a snapshot of the file; and the
// replica restores equal to the live file, in the second run and after.
// A file changed between the runs by a connection of its own (a moment
// added and checkpointed into the database file) is snapshotted instead;
// a mark in the first format (an earlier nah's) is carried on from.
func TestShipCarriesOnAfterACleanStop(t *testing.T) {
	dir := t.TempDir()
	tg, replica := fileTarget(t)
	n := shipNode(t, dir, tg)
	ann, bob, cat, dan := n.person(t, "ann"), n.person(t, "bob"), n.person(t, "cat"), n.person(t, "dan")
	ids := []string{ann, bob, cat, dan}
	drain(t, n)
	for i := range 30 {
		for _, id := range ids {
			post1k(t, n, id, i)
		}
	}
	drain(t, n)
	n.close()
	for _, id := range ids {
		if b := walBytes(n.s.Path(nah.PersonRel(id))); b != 0 {
			t.Fatalf("%s: %d bytes of WAL after a clean stop", id, b)
		}
	}
	restoreAll(t, n, tg, rels(ids))

	// cat's mark as an earlier nah wrote it (its first format): still
	// carried on from.
	if err := backup.MarkV1(filepath.Join(dir, "replication", filepath.FromSlash(nah.PersonRel(cat))), n.s.Path(nah.PersonRel(cat))); err != nil {
		t.Fatal(err)
	}

	// Behind replication's back: ann's file gets a row and a checkpoint.
	annPath := n.s.Path(nah.PersonRel(ann))
	db, err := sql.Open("sqlite", "file:"+annPath+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"INSERT INTO media VALUES ('behind-the-back', 1, 'x', 'text/plain', 0)", "PRAGMA wal_checkpoint(TRUNCATE)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	n2 := shipNode(t, dir, tg)
	drain(t, n2)
	before := n2.s.Stats()
	last := map[string]ltx.TXID{}
	for _, id := range ids {
		h, _, _ := newestLTX(t, replica, nah.PersonRel(id))
		last[id] = h.MaxTXID
		post1k(t, n2, id, 100)
	}
	drain(t, n2)
	for _, id := range ids {
		h, pages := nextLTX(t, replica, nah.PersonRel(id), last[id])
		t.Logf("%s: the first post of the run shipped TXID %d: %d of %d pages, WAL offset %d", id, h.MaxTXID, pages, h.Commit, h.WALOffset)
		if id == ann {
			if pages != int(h.Commit) {
				t.Errorf("ann's file was changed behind replication's back, and its next LTX file holds %d of %d pages: carried on, not snapshotted", pages, h.Commit)
			}
			continue
		}
		if h.IsSnapshot() || pages >= int(h.Commit)/2 || pages > 8 {
			t.Errorf("%s: the first post after a clean stop shipped %d of %d pages, want the post's few", id, pages, h.Commit)
		}
		if h.WALOffset != 32 {
			t.Errorf("%s: the first post's LTX file starts at WAL offset %d, want the new WAL's first frame", id, h.WALOffset)
		}
	}
	if took := n2.s.Stats().TakeUps - before.TakeUps; took != 0 {
		t.Errorf("%d take-ups for the first posts of the second run, want them shipped", took)
	}
	restoreAll(t, n2, tg, rels(ids))
	for i := range 3 {
		for _, id := range ids {
			post1k(t, n2, id, 200+i)
		}
		drain(t, n2)
	}
	n2.close()
	restoreAll(t, n2, tg, rels(ids))
}

// TestShipBoundsTheWAL: a person posting many large moments has their
// WAL emptied once shipped past the bound (the file's size, at least
// 256 KiB), every ship after carries on from the new WAL (no snapshot),
// the WAL stays under the bound plus a post, and the replica restores
// equal.
func TestShipBoundsTheWAL(t *testing.T) {
	dir := t.TempDir()
	tg, replica := fileTarget(t)
	n := shipNode(t, dir, tg)
	ann := n.person(t, "ann")
	n.person(t, "bob") // watched in ann's place: ann's posts are shipped
	drain(t, n)
	if !eventually(10*time.Second, func() bool {
		names, _ := filepath.Glob(filepath.Join(replica, filepath.FromSlash(nah.PersonRel(ann)), "ltx", "0", "*.ltx"))
		return len(names) > 0
	}) {
		t.Fatal("the new file never reached the replica")
	}
	p := n.s.Path(nah.PersonRel(ann))
	before := n.s.Stats()
	body := bytes.Repeat([]byte("0123456789abcdef"), 2<<10) // 32 KiB
	var peak, over int64
	snapshots, emptied := 0, 0
	last, _, _ := newestLTX(t, replica, nah.PersonRel(ann))
	for i := range 24 {
		if _, err := n.s.CreateMoment(context.Background(), ann, append(fmt.Appendf(nil, "%d ", i), body...)); err != nil {
			t.Fatal(err)
		}
		drain(t, n)
		h, pages := nextLTX(t, replica, nah.PersonRel(ann), last.MaxTXID)
		last = h
		// At most the bound and a post (nine frames), before its checkpoint.
		wal, bound := walBytes(p), max(int64(h.Commit)*int64(h.PageSize), 256<<10)
		peak, over = max(peak, wal), max(over, wal-bound)
		if wal == 0 {
			emptied++
		}
		if h.IsSnapshot() || pages == int(h.Commit) {
			snapshots++
		}
	}
	t.Logf("24 posts of 32 KiB: WAL at most %d bytes after a ship, %d past the bound; emptied %d times, %d snapshots", peak, over, emptied, snapshots)
	if over > 40<<10 {
		t.Errorf("the WAL reached %d bytes past the bound", over)
	}
	if emptied == 0 {
		t.Errorf("the WAL was never emptied in 24 posts of 32 KiB (at most %d bytes)", peak)
	}
	if snapshots > 0 {
		t.Errorf("%d of 24 ships were snapshots", snapshots)
	}
	if st := n.s.Stats(); st.TakeUps != before.TakeUps {
		t.Errorf("%d take-ups", st.TakeUps-before.TakeUps)
	}
	restoreAll(t, n, tg, rels([]string{ann}))
	n.close()
	restoreAll(t, n, tg, rels([]string{ann}))
}

// TestShipEmptiesAnIdleWAL: a file left open after its posts were shipped
// has its WAL emptied once idle (store.Config.WALIdle), and the next post
// is shipped as the post's few pages from the next WAL; the replica
// restores equal.
func TestShipEmptiesAnIdleWAL(t *testing.T) {
	dir := t.TempDir()
	tg, replica := fileTarget(t)
	n := openNode(t, dir, tg, nodeOpts{maxOpen: 16, maxWatched: 1, walIdle: 400 * time.Millisecond})
	ann := n.person(t, "ann")
	n.person(t, "bob") // watched in ann's place: ann's posts are shipped
	drain(t, n)
	p := n.s.Path(nah.PersonRel(ann))
	for i := range 5 {
		post1k(t, n, ann, i)
		drain(t, n)
	}
	if walBytes(p) == 0 {
		t.Fatal("no WAL after five posts")
	}
	if !eventually(5*time.Second, func() bool { return walBytes(p) == 0 }) {
		t.Fatalf("the WAL still holds %d bytes, idle for 5 s", walBytes(p))
	}
	prev, _, _ := newestLTX(t, replica, nah.PersonRel(ann))
	post1k(t, n, ann, 5)
	drain(t, n)
	h, pages := nextLTX(t, replica, nah.PersonRel(ann), prev.MaxTXID)
	t.Logf("the post after the idle checkpoint: TXID %d, %d of %d pages, WAL offset %d", h.MaxTXID, pages, h.Commit, h.WALOffset)
	if h.IsSnapshot() || pages >= int(h.Commit)/2 || h.WALOffset != 32 {
		t.Errorf("the post after the idle checkpoint shipped %d of %d pages from WAL offset %d, want the post's few from the next WAL", pages, h.Commit, h.WALOffset)
	}
	restoreAll(t, n, tg, rels([]string{ann}))
	n.close()
	restoreAll(t, n, tg, rels([]string{ann}))
}

// TestIdleCheckpointLetsPostsThrough: a reader of its own holds a read
// transaction on a person's file (as the drill's does) while the file's
// WAL is due to be emptied: the checkpoint, through the app's connection,
// gives up within walBusyWait rather than hold the person's posts for the
// connection's 10 s busy timeout, and the replica still restores equal.
func TestIdleCheckpointLetsPostsThrough(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tg, _ := fileTarget(t)
	n := openNode(t, dir, tg, nodeOpts{maxOpen: 16, maxWatched: 1, walIdle: 200 * time.Millisecond})
	ann := n.person(t, "ann")
	n.person(t, "bob") // watched in ann's place: ann's posts are shipped
	drain(t, n)
	post1k(t, n, ann, 0)
	drain(t, n)
	db, err := sql.Open("sqlite", "file:"+n.s.Path(nah.PersonRel(ann))+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var k int
	if err := tx.QueryRow("SELECT count(*) FROM moments").Scan(&k); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the idle checkpoint finds the reader
	var worst time.Duration
	for i := range 5 {
		worst = max(worst, n.post(t, ann, 10+i))
		time.Sleep(100 * time.Millisecond)
	}
	tx.Rollback()
	t.Logf("posts while a reader held the file: the slowest took %v", worst)
	if worst > time.Second {
		t.Errorf("a post waited %v behind the checkpoint of its file", worst)
	}
	drain(t, n)
	time.Sleep(500 * time.Millisecond)
	drain(t, n)
	restoreAll(t, n, tg, rels([]string{ann}))
	n.close()
	restoreAll(t, n, tg, rels([]string{ann}))
}

// TestLetGoWALIsEmptied: a watched file written fast (Litestream
// checkpoints it at the bound but leaves its WAL as large as the posts of
// a second made it) is let go of when another file is watched: its WAL is
// emptied then, with its mark, and its next post is shipped as the post's
// few pages from the next WAL, read after Litestream's own history; the
// replica restores equal.
func TestLetGoWALIsEmptied(t *testing.T) {
	dir := t.TempDir()
	tg, replica := fileTarget(t)
	n := shipNode(t, dir, tg)
	ann := n.person(t, "ann") // watched
	drain(t, n)
	p := n.s.Path(nah.PersonRel(ann))
	body := bytes.Repeat([]byte("0123456789abcdef"), 2<<10) // 32 KiB
	for i := range 24 {
		if _, err := n.s.CreateMoment(context.Background(), ann, append(fmt.Appendf(nil, "%d ", i), body...)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1500 * time.Millisecond) // Litestream syncs, and checkpoints past the bound
	peak := walBytes(p)
	n.person(t, "bob") // watched in ann's place
	drain(t, n)
	if !eventually(5*time.Second, func() bool { return walBytes(p) <= 256<<10 }) {
		t.Fatalf("ann's WAL holds %d bytes after Litestream let go of it", walBytes(p))
	}
	t.Logf("ann's WAL: %d bytes while watched, %d once let go of", peak, walBytes(p))
	prev, _, _ := newestLTX(t, replica, nah.PersonRel(ann))
	post1k(t, n, ann, 100)
	drain(t, n)
	h, pages := nextLTX(t, replica, nah.PersonRel(ann), prev.MaxTXID)
	t.Logf("the next post: TXID %d, %d of %d pages, WAL offset %d", h.MaxTXID, pages, h.Commit, h.WALOffset)
	if h.IsSnapshot() || pages >= int(h.Commit)/2 {
		t.Errorf("the post after the let-go shipped %d of %d pages, want the post's few", pages, h.Commit)
	}
	restoreAll(t, n, tg, rels([]string{ann}))
	n.close()
	restoreAll(t, n, tg, rels([]string{ann}))
}
