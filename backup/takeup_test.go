package backup_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
)

// walSalts reads the two salts of the WAL header of database p: SQLite
// changes them each time it starts the WAL again from its first frame.
func walSalts(t testing.TB, p string) [2]uint32 {
	t.Helper()
	b, err := os.ReadFile(p + "-wal")
	if err != nil || len(b) < 32 {
		t.Fatalf("%s-wal: %d bytes, %v", p, len(b), err)
	}
	return [2]uint32{binary.BigEndian.Uint32(b[16:]), binary.BigEndian.Uint32(b[20:])}
}

func walBytes(p string) int64 {
	st, err := os.Stat(p + "-wal")
	if err != nil {
		return 0
	}
	return st.Size()
}

// TestTakeUpOfAWALRestartedWhileNotWatched is the corrupt replica of
// ../shared/evidence/replica-corrupt made on purpose, with SQLite's own
// settings as any app has them (auto-checkpoint at 1,000 pages): a file is
// watched and written, let go of with its WAL left, then written while
// not watched until SQLite's auto-checkpoint copies the WAL into the
// database and the next commit starts the WAL again from its first frame.
// When the file is watched again, Litestream finds its last page still in
// the old frames beyond the new ones and carries on from the new WAL's
// start: the frames between its last position and the checkpoint are in
// no LTX file, and the replica restores corrupt or short. A take-up must
// hand Litestream a WAL that its history can be continued from, or make
// it start afresh.
func TestTakeUpOfAWALRestartedWhileNotWatched(t *testing.T) {
	ctx := context.Background()
	// A person id by the root rule: the restore takes no other.
	bf := newBareFile(t, "pbbbbbbbbbbbbbbbbbbbbbbbba", 0)
	r, target, rel, p := bf.r, bf.target, bf.rel, bf.path
	open := func() *sql.DB { return bf.open(t) }
	n := 0
	insert := func(db *sql.DB, k int) {
		t.Helper()
		for range k {
			n++
			if _, err := db.Exec(`INSERT INTO moments (at, body) VALUES (?, randomblob(400))`, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	db := open()
	if _, err := db.Exec(`CREATE TABLE moments (id INTEGER PRIMARY KEY, at INTEGER NOT NULL, body BLOB NOT NULL); CREATE INDEX moments_at ON moments (at)`); err != nil {
		t.Fatal(err)
	}
	insert(db, 20)
	if err := r.Watch(ctx, p); err != nil {
		t.Fatal(err)
	}
	// Watched: a few hundred commits, fewer frames than Litestream's own
	// checkpoint waits for, so the WAL it lets go of is long.
	insert(db, 150)
	if err := r.Sync(ctx, p); err != nil {
		t.Fatal(err)
	}
	db.Close() // the app's handle first, then Litestream's, as the cache does
	if err := r.Unwatch(p); err != nil {
		t.Fatal(err)
	}
	left, old := walBytes(p), walSalts(t, p)

	// Not watched: written until the WAL starts again, then a little more,
	// far less than the WAL Litestream last saw.
	db = open()
	for walSalts(t, p) == old {
		insert(db, 1)
		if walBytes(p) > 16<<20 {
			t.Fatal("the WAL never started again: no auto-checkpoint?")
		}
	}
	insert(db, 3)
	t.Logf("the WAL Litestream let go of: %d bytes; started again since", left)

	if err := r.Watch(ctx, p); err != nil {
		t.Fatal(err)
	}
	insert(db, 2)
	if err := r.Sync(ctx, p); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := r.Unwatch(p); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(t.TempDir(), "restored.db")
	from, err := backup.RestoreFile(ctx, target, rel, out, time.Time{})
	if err != nil {
		t.Fatalf("restore of a file taken up after its WAL started again behind Litestream: %v", err)
	}
	if from.String() != "history" {
		t.Errorf("restored from %s, want its history", from)
	}
	if err := store.IntegrityCheck(ctx, out); err != nil {
		t.Fatal(err)
	}
	sameRows(t, p, out)
}
