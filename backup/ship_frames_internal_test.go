package backup

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"

	"github.com/nah-app/nah/store"
)

// twoCommits is a real WAL of two commits: the first creates table a and,
// last, table b (the file's last page); the second adds a row to a alone.
type twoCommits struct {
	wal      *os.File
	size     int64  // the WAL's size after both
	offset   int64  // where the first commit ends
	commit   uint32 // the file's pages after the first
	pageSize uint32
	salt1    uint32
	salt2    uint32
}

func newTwoCommits(t *testing.T) twoCommits {
	t.Helper()
	if err := store.ConfigureSQLite(); err != nil { // before any connection, as the store needs
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "f.db")
	db, err := sql.Open("sqlite", "file:"+p+"?_pragma=journal_mode(WAL)&_pragma=wal_autocheckpoint(0)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{"CREATE TABLE a(x)", "INSERT INTO a VALUES ('x')", "CREATE TABLE b(x)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	var w twoCommits
	if err := db.QueryRow("SELECT page_size, page_count FROM pragma_page_size, pragma_page_count").Scan(&w.pageSize, &w.commit); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	w.offset = st.Size()
	if _, err := db.Exec("INSERT INTO a VALUES ('y')"); err != nil {
		t.Fatal(err)
	}
	if w.wal, err = os.Open(p + "-wal"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.wal.Close() })
	if st, err = w.wal.Stat(); err != nil {
		t.Fatal(err)
	}
	w.size = st.Size()
	var hdr [litestream.WALHeaderSize]byte
	if _, err := w.wal.ReadAt(hdr[:], 0); err != nil {
		t.Fatal(err)
	}
	w.salt1, w.salt2 = binary.BigEndian.Uint32(hdr[16:]), binary.BigEndian.Uint32(hdr[20:])
	return w
}

// header is the header of an LTX file that ends with the first commit,
// its page count said to be commit.
func (w twoCommits) header(txid ltx.TXID, commit uint32) ltx.Header {
	return ltx.Header{
		Version: ltx.Version, Flags: ltx.HeaderFlagNoChecksum, PageSize: w.pageSize, Commit: commit,
		MinTXID: txid, MaxTXID: txid, Timestamp: time.Now().UnixMilli(),
		WALOffset: litestream.WALHeaderSize, WALSize: w.offset - litestream.WALHeaderSize,
		WALSalt1: w.salt1, WALSalt2: w.salt2,
	}
}

// TestShipFramesRefusesAGrownPageWithoutAFrame: when the history ends one
// page short of the file the second commit leaves, and no frame since holds
// that last page, the frames alone would restore a file without it: not
// shipped. The history that ends at the right size ships.
func TestShipFramesRefusesAGrownPageWithoutAFrame(t *testing.T) {
	w := newTwoCommits(t)
	ctx := context.Background()
	for _, c := range []struct {
		commit uint32
		want   bool
	}{{w.commit, true}, {w.commit - 1, false}} {
		prev := w.header(2, c.commit)
		_, shipped, _, err := shipFrames(ctx, w.wal, w.size, &prev, nil, io.Discard, 3)
		if err != nil || shipped != c.want {
			t.Errorf("history of %d pages, file of %d after the next commit (its last page in no frame since): shipped %v, %v; want %v",
				c.commit, w.commit, shipped, err, c.want)
		}
	}
}

// TestShipFramesComparesTheLastFrame: a base LTX file read from disk
// (not followed in this run) whose page differs from the WAL's frame that
// ends where it stops is another WAL's history under the same salts: not
// shipped. The base that holds the frame's bytes ships.
func TestShipFramesComparesTheLastFrame(t *testing.T) {
	w := newTwoCommits(t)
	ctx := context.Background()
	frame := make([]byte, litestream.WALFrameHeaderSize+int(w.pageSize))
	if _, err := w.wal.ReadAt(frame, w.offset-int64(len(frame))); err != nil {
		t.Fatal(err)
	}
	pgno, data := binary.BigEndian.Uint32(frame), frame[litestream.WALFrameHeaderSize:]
	for _, c := range []struct {
		name    string
		changed bool
	}{{"the frame's page", false}, {"one byte changed", true}} {
		page := bytes.Clone(data)
		if c.changed {
			page[len(page)-1] ^= 0xff
		}
		var buf bytes.Buffer
		if err := writeLTX(&buf, w.header(2, w.commit), func(lw *ltxWriter) error { return lw.page(pgno, page) }); err != nil {
			t.Fatal(err)
		}
		base := filepath.Join(t.TempDir(), ltx.FormatFilename(2, 2))
		if err := os.WriteFile(base, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(base)
		if err != nil {
			t.Fatal(err)
		}
		_, shipped, _, err := shipFrames(ctx, w.wal, w.size, nil, f, io.Discard, 3)
		f.Close()
		if err != nil || shipped == c.changed {
			t.Errorf("base holding %s of page %d: shipped %v, %v; want %v", c.name, pgno, shipped, err, !c.changed)
		}
	}
}

// TestFetchLTXVerifies: the target's newest file fetched to mend the local
// state is kept only when it decodes whole; a torn one (a crash or a
// broken target) would be the base the next ship carries on from.
func TestFetchLTXVerifies(t *testing.T) {
	ctx := context.Background()
	tg, err := ParseTarget(filepath.Join(t.TempDir(), "replica"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(ctx); err != nil {
		t.Fatal(err)
	}
	client, err := tg.client("people/x/person.db")
	if err != nil {
		t.Fatal(err)
	}
	h := ltx.Header{Version: ltx.Version, Flags: ltx.HeaderFlagNoChecksum, PageSize: 4096, Commit: 1,
		MinTXID: 1, MaxTXID: 1, Timestamp: time.Now().UnixMilli()}
	var whole bytes.Buffer
	if err := writeLTX(&whole, h, func(lw *ltxWriter) error { return lw.page(1, make([]byte, 4096)) }); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		body []byte
		keep bool
	}{{"whole", whole.Bytes(), true}, {"torn", whole.Bytes()[:whole.Len()-9], false}} {
		level0 := filepath.Join(t.TempDir(), "ltx", "0")
		if _, err := client.WriteLTXFile(ctx, 0, 1, 1, bytes.NewReader(c.body)); err != nil {
			t.Fatal(err)
		}
		err := fetchLTX(ctx, client, level0, 1)
		_, serr := os.Stat(filepath.Join(level0, ltx.FormatFilename(1, 1)))
		if kept := serr == nil; kept != c.keep || (err == nil) != c.keep {
			t.Errorf("%s file on the target: kept %v, fetch error %v; want kept %v", c.name, kept, err, c.keep)
		}
	}
}
