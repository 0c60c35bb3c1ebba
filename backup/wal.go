package backup

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// Litestream carries a file's history on from the WAL generation (salts)
// its last LTX file was read from; a WAL started again while nobody
// watched would hide frames it never read, and the replica restores
// corrupt (docs/design.md, Replication). So a take-up of a WAL of another generation
// empties it first, and Litestream starts the file afresh with a snapshot.

// walEmptyTimeout bounds the wait for readers of the file to finish
// before its WAL can be emptied; the app holds a read for a feed's few
// milliseconds, never longer.
const walEmptyTimeout = 5 * time.Second

// resumeCheck makes sure Litestream can carry db's history on from its WAL
// as the WAL is now, emptying the WAL when it cannot (above).
func resumeCheck(ctx context.Context, db *litestream.DB) error {
	// Litestream writes the history from here on: a mark of an earlier
	// checkpoint is no proof of what it writes.
	if err := os.Remove(markPath(db.MetaPath())); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	salts, ok, err := walSalts(db.WALPath())
	if err != nil || !ok {
		return err // no WAL, or one without frames: nothing to mistake
	}
	last, err := lastSalts(db)
	if err != nil {
		return err
	}
	if last != nil && *last == salts {
		return nil // the same WAL the history stopped in
	}
	if err := emptyWAL(ctx, db.Path()); err != nil {
		return fmt.Errorf("empty the WAL before replication takes the file up: %w", err)
	}
	return nil
}

// walSalts reads the salts of the WAL at p; ok is false when there is no
// WAL or only its header.
func walSalts(p string) (salts [2]uint32, ok bool, err error) {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return salts, false, nil
	} else if err != nil {
		return salts, false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return salts, false, err
	}
	var hdr [litestream.WALHeaderSize]byte
	if st.Size() <= litestream.WALHeaderSize {
		return salts, false, nil
	}
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return salts, false, err
	}
	return [2]uint32{binary.BigEndian.Uint32(hdr[16:]), binary.BigEndian.Uint32(hdr[20:])}, true, nil
}

// lastSalts reads the WAL salts of db's last local LTX file, nil when it
// has none (never replicated from here, or its local state was cleared).
func lastSalts(db *litestream.DB) (*[2]uint32, error) {
	minTXID, maxTXID, err := db.MaxLTX()
	if err != nil || maxTXID == 0 {
		return nil, err
	}
	f, err := os.Open(db.LTXPath(0, minTXID, maxTXID))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := ltx.NewDecoder(f)
	if err := dec.DecodeHeader(); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	h := dec.Header()
	return &[2]uint32{h.WALSalt1, h.WALSalt2}, nil
}

// emptyWAL checkpoints the WAL of database p into it and truncates it,
// through a connection of its own, waiting for readers to finish.
func emptyWAL(ctx context.Context, p string) error {
	db, err := sql.Open("sqlite", fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=synchronous(FULL)", p, walEmptyTimeout.Milliseconds()))
	if err != nil {
		return err
	}
	defer db.Close()
	var busy, frames, done int
	if err := db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &done); err != nil {
		return err
	}
	if busy != 0 {
		return fmt.Errorf("%s: the WAL is still in use after %v", p, walEmptyTimeout)
	}
	return nil
}

// A clean stop, the close of an evicted file, a WAL past shipWALBound or
// idle (personfile's WALIdle) each empty a WAL whose every frame is in the
// history; the next WAL starts with new salts, which prove nothing about
// the database file under it.
// So the checkpoint that empties it records a mark beside the local state:
// the newest LTX file's header and a sum of every page of the file just
// after (pageSum). The next ship carries on from the new WAL's header
// only when that LTX file is still the newest and every page the new WAL
// does not hold still has its sum (carryOn):
// the file is then exactly the state the history ends at. Litestream
// carries on across its own checkpoints from memory (db.go, verify,
// syncedToWALEnd); the mark does so across runs and closes, proven by the
// file itself.

// walMarkName is the mark's file in a database's local state folder,
// beside ltx/: clearState, Forget and a take-up (resumeCheck) remove it.
const walMarkName = "wal-emptied"

// walMark is what the mark holds: the header of the LTX file the database
// file was equal to when the WAL was emptied, and the sum of each page.
type walMark struct {
	last ltx.Header
	sums []ltx.Checksum // page 1 first; the lock page's is 0
	v1   bool           // read from a mark of the first format: ltx.ChecksumPage sums
}

// A mark of the first format (walMarkMagicV1) summed each page with LTX's
// CRC64; a mark now uses pageSum, and one left by an earlier nah is still
// carried on from.
var (
	walMarkMagic   = [8]byte{'n', 'a', 'h', 'w', 'm', 'k', '0', '2'}
	walMarkMagicV1 = [8]byte{'n', 'a', 'h', 'w', 'm', 'k', '0', '1'}
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// pageSum is the sum of page pgno in a mark: its CRC-32C and its CRC-32
// (IEEE), each of its number and bytes. Both are done in hardware here,
// 0.23 against 2.4 µs a 4 KiB page for LTX's CRC64, which was 8 % of the
// server's CPU in the bench's mixed burst (the mark and the proof read
// every page of a heavy poster's file; bench/THRESHOLDS.md).
func pageSum(pgno uint32, data []byte) ltx.Checksum {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], pgno)
	c := crc32.Update(crc32.Update(0, castagnoli, n[:]), castagnoli, data)
	i := crc32.Update(crc32.ChecksumIEEE(n[:]), crc32.IEEETable, data)
	return ltx.Checksum(uint64(c)<<32 | uint64(i))
}

// sum is page pgno's sum as m's format has it.
func (m *walMark) sum(h hash.Hash64, pgno uint32, data []byte) ltx.Checksum {
	if m.v1 {
		return ltx.ChecksumPageWithHasher(h, pgno, data)
	}
	return pageSum(pgno, data)
}

// markPath is the mark of the database whose local state is in meta.
func markPath(meta string) string { return filepath.Join(meta, walMarkName) }

// readMark reads the mark in meta; nil when there is none, or it does not
// decode whole (a crash tore it: the next ship snapshots).
func readMark(meta string) *walMark {
	b, err := os.ReadFile(markPath(meta))
	if err != nil || len(b) < 8+ltx.HeaderSize+4+8 {
		return nil
	}
	var m walMark
	switch {
	case bytes.Equal(b[:8], walMarkMagic[:]):
	case bytes.Equal(b[:8], walMarkMagicV1[:]):
		m.v1 = true
	default:
		return nil
	}
	body, sum := b[:len(b)-8], binary.BigEndian.Uint64(b[len(b)-8:])
	if crc64.Checksum(body, crcISO) != sum {
		return nil
	}
	if err := m.last.UnmarshalBinary(body[8 : 8+ltx.HeaderSize]); err != nil {
		return nil
	}
	rest := body[8+ltx.HeaderSize:]
	n := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	if n != m.last.Commit || len(rest) != 8*int(n) {
		return nil
	}
	m.sums = make([]ltx.Checksum, n)
	for i := range m.sums {
		m.sums[i] = ltx.Checksum(binary.BigEndian.Uint64(rest[8*i:]))
	}
	return &m
}

// write writes the mark to meta, in one rename and unsynced: a crash may
// lose or tear it, and readMark then finds none.
func (m *walMark) write(meta string) error {
	b := make([]byte, 0, 8+ltx.HeaderSize+4+8*len(m.sums)+8)
	if m.v1 {
		b = append(b, walMarkMagicV1[:]...)
	} else {
		b = append(b, walMarkMagic[:]...)
	}
	h, err := m.last.MarshalBinary()
	if err != nil {
		return err
	}
	b = append(b, h...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.sums)))
	for _, s := range m.sums {
		b = binary.BigEndian.AppendUint64(b, uint64(s))
	}
	b = binary.BigEndian.AppendUint64(b, crc64.Checksum(b, crcISO))
	tmp := markPath(meta) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, markPath(meta))
}

var crcISO = crc64.MakeTable(crc64.ISO)

// beforeTruncate, when set (by a test), runs just before a checkpoint
// empties the WAL, as another connection's commit may.
var beforeTruncate func(path string)

// walBusyWait bounds how long a checkpoint through the app's connection
// waits for readers: a feed reads for a few milliseconds.
const walBusyWait = 200 * time.Millisecond

// Checkpoint empties the WAL of the database at path, which Litestream
// does not watch, through db (the app's only connection to it, held for
// the whole of it so that nothing commits meanwhile) or, with db nil, a
// connection of its own to a file nobody in this process has open. When
// the newest LTX file provably covers the WAL whole (its salts, its end
// the WAL's, the frame it ends with in it), it records the mark (above),
// so that the next ship carries on from the WAL started afresh.
func (r *Replicator) Checkpoint(ctx context.Context, path string, db *sql.DB) error {
	rel, err := r.rel(path)
	if err != nil {
		return err
	}
	r.mu.Lock()
	st := r.files[rel]
	r.mu.Unlock()
	if st == nil {
		// Not replicated in this run (the Backups page lists those): no
		// state kept, and nothing in step. The caller holds the file, so
		// no ship of it runs meanwhile.
		st = &fileState{}
	}
	st.op.Lock()
	defer st.op.Unlock()
	_, err = r.checkpoint(ctx, st, rel, path, db, true)
	return err
}

// CheckpointShipped is Checkpoint of a WAL the history has whole, and
// only of one: it says whether it emptied the WAL. For a file that went
// idle after its last ship; a WAL holding a write not yet shipped is left
// for its ship, which would otherwise snapshot the file.
func (r *Replicator) CheckpointShipped(ctx context.Context, path string, db *sql.DB) (bool, error) {
	rel, err := r.rel(path)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	st := r.files[rel]
	r.mu.Unlock()
	if st == nil {
		return false, nil // nothing shipped in this run
	}
	st.op.Lock()
	defer st.op.Unlock()
	return r.checkpoint(ctx, st, rel, path, db, false)
}

// checkpoint is Checkpoint with st.op held; with always false it empties
// only a WAL the history has whole.
func (r *Replicator) checkpoint(ctx context.Context, st *fileState, rel, path string, db *sql.DB, always bool) (bool, error) {
	if r.ls.FindDB(path) != nil {
		return false, fmt.Errorf("replication: checkpoint %s: watched (Litestream checkpoints it)", rel)
	}
	meta := r.metaPath(rel)
	app := db != nil
	if !app {
		own, err := sql.Open("sqlite", fmt.Sprintf("file:%s?mode=rw&_pragma=busy_timeout(%d)&_pragma=synchronous(FULL)&_pragma=wal_autocheckpoint(0)", path, walEmptyTimeout.Milliseconds()))
		if err != nil {
			return false, err
		}
		defer own.Close()
		own.SetMaxOpenConns(1)
		db = own
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if app {
		// A reader of the file (the drill's, a sweep's copy) would hold
		// the app's connection, and the posts behind it, for its whole busy
		// timeout: the checkpoint gives up after walBusyWait instead.
		var was int
		if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&was); err != nil {
			return false, err
		}
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", walBusyWait.Milliseconds())); err != nil {
			return false, err
		}
		defer func() {
			if _, err := conn.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", was)); err != nil {
				conn.Raw(func(any) error { return driver.ErrBadConn }) // reopened with its settings
			}
		}()
	}

	// Another connection's commit from here on would be in the file and
	// not in the history the mark vouches for: SQLite moves data_version
	// for every commit but this connection's own.
	var version int64
	if err := conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&version); err != nil {
		return false, err
	}

	// Under the connection: the WAL as the newest LTX file left it?
	r.mu.Lock()
	var last, base *ltx.Header
	if p := st.shipBase; p != nil && !st.Watched && st.Err == "" && st.Replicated == uint64(p.MaxTXID) && st.TXID == uint64(p.MaxTXID) {
		h := *p
		last, base = &h, p
	}
	st.emptied = nil
	r.mu.Unlock()
	covered, err := walCovered(path, filepath.Join(meta, "ltx", "0"), last)
	if err != nil || (covered == nil && !always) {
		return false, err
	}
	// Gone before the file changes: a crash after this leaves no mark.
	if err := os.Remove(markPath(meta)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	if beforeTruncate != nil {
		beforeTruncate(path)
	}
	var busy, frames, done int
	if err := conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &frames, &done); err != nil {
		return false, err
	}
	if busy != 0 {
		return false, fmt.Errorf("replication: checkpoint %s: the WAL is still in use", rel)
	}
	if covered == nil {
		return true, nil
	}
	m, err := markFile(ctx, conn, path, *covered, version)
	if err != nil || m == nil {
		return true, err
	}
	if app && base != nil {
		r.mu.Lock()
		st.emptied = base
		r.mu.Unlock()
	}
	return true, m.write(meta)
}

// walCovered returns the header of the newest LTX file (last when known
// in this run, else level0's newest file) when it covers the WAL of the
// database at path whole: same salts, its end the WAL's size, and, read
// from the file, the frame it ends with in it (Litestream's verify). Nil
// otherwise.
func walCovered(path, level0 string, last *ltx.Header) (*ltx.Header, error) {
	wal, err := os.Open(path + "-wal")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	defer wal.Close()
	fi, err := wal.Stat()
	if err != nil {
		return nil, err
	}
	var dec *ltx.Decoder
	if last == nil {
		_, maxTXID, err := maxLTX(level0)
		if err != nil || maxTXID == 0 {
			return nil, err
		}
		f, err := os.Open(filepath.Join(level0, ltx.FormatFilename(maxTXID, maxTXID)))
		if err != nil {
			return nil, nil
		}
		defer f.Close()
		dec = ltx.NewDecoder(f)
		if err := dec.DecodeHeader(); err != nil {
			return nil, nil
		}
		h := dec.Header()
		last = &h
	}
	end := last.WALOffset + last.WALSize
	var whdr [litestream.WALHeaderSize]byte
	if end <= litestream.WALHeaderSize || end > fi.Size() {
		return nil, nil
	}
	if _, err := wal.ReadAt(whdr[:], 0); err != nil {
		return nil, nil
	}
	if binary.BigEndian.Uint32(whdr[16:]) != last.WALSalt1 || binary.BigEndian.Uint32(whdr[20:]) != last.WALSalt2 {
		return nil, nil
	}
	if dec != nil {
		if ok, err := lastFrameIn(wal, dec, end); err != nil || !ok {
			return nil, nil
		}
	}
	if end < fi.Size() {
		// Frames past it (a WAL started again in place keeps the old
		// ones): none may be a commit of this generation.
		rd, err := litestream.NewWALReaderWithOffset(context.Background(), wal, end, last.WALSalt1, last.WALSalt2, slog.New(slog.DiscardHandler))
		if err != nil {
			return nil, nil
		}
		if pages, _, _, err := rd.PageMap(context.Background()); err != nil || len(pages) > 0 {
			return nil, nil
		}
	}
	return last, nil
}

// writeLocked begins a write transaction on conn, which keeps every other
// writer of the file out until unlock rolls it back. Left in a transaction,
// the app's connection would refuse every later write: a failed rollback
// closes it instead, and database/sql opens a new one.
func writeLocked(ctx context.Context, conn *sql.Conn) (unlock func(), err error) {
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return nil, err
	}
	return func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}, nil
}

// markFile sums every page of the database at path, through conn just
// after its WAL was emptied, in a write transaction so that nothing
// commits meanwhile. Nil when the file is not last's size, the WAL is
// not empty, or another connection committed since conn's data_version
// read version.
func markFile(ctx context.Context, conn *sql.Conn, path string, last ltx.Header, version int64) (m *walMark, err error) {
	unlock, err := writeLocked(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		return nil, nil
	}
	var now int64
	if err := conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&now); err != nil {
		return nil, err
	}
	if now != version {
		return nil, nil
	}
	var pageSize, pageCount uint32
	if err := conn.QueryRowContext(ctx, "SELECT page_size, page_count FROM pragma_page_size, pragma_page_count").Scan(&pageSize, &pageCount); err != nil {
		return nil, err
	}
	if pageSize != last.PageSize || pageCount != last.Commit {
		return nil, nil
	}
	sums := make([]ltx.Checksum, pageCount)
	rows, err := conn.QueryContext(ctx, "SELECT pgno, data FROM sqlite_dbpage('main')")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	lock := ltx.LockPgno(pageSize)
	var want uint32 = 1
	var data sql.RawBytes
	for rows.Next() {
		var pgno uint32
		if err := rows.Scan(&pgno, &data); err != nil {
			return nil, err
		}
		if pgno == lock && want == lock {
			want++
			continue
		}
		if pgno != want || len(data) != int(pageSize) {
			return nil, nil
		}
		sums[pgno-1] = pageSum(pgno, data)
		want++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if want != pageCount+1 {
		return nil, nil
	}
	return &walMark{last: last, sums: sums}, nil
}
