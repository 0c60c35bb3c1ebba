package backup

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// Ship is a take-up without Litestream: it ships the writes of a file
// nobody watches as the next LTX file of its history, written the way
// Litestream writes it (level 0, no checksums, the WAL's offset and salts
// in the header), to the target and then, unsynced, to Litestream's local
// state (repairLocal mends it after a crash); a later take-up or restore
// carries on from it. A take-up costs ~5 ms of CPU
// (Litestream's connection, read transaction, first sync, and the file let
// go of to make room, bench/THRESHOLDS.md); a ship reads the WAL once.
//
// The next file is the WAL's new frames when they provably continue the
// history (shipFrames), else a snapshot of every page read through db,
// the app's own connection to the file (shipSnapshot). Either only when
// the target holds exactly the local history: in step in this run (the
// header kept, nothing read), or its newest level-0 file (Litestream's
// replica position, one LIST) is the local newest once repaired; both
// empty for a file never replicated. ok is false, with
// nothing written, when that fails or the WAL is past shipMaxWAL (only a
// take-up checkpoints it): the caller takes the file up. The caller holds
// the file open (so the app does not checkpoint it) and keeps Litestream
// from watching it until Ship returns.
func (r *Replicator) Ship(ctx context.Context, path string, db *sql.DB) (ok bool, err error) {
	rel, err := r.rel(path)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	st := r.files[rel]
	if st == nil {
		st = &fileState{Since: time.Now()}
		r.files[rel] = st
	}
	down := r.down
	r.mu.Unlock()
	if down != nil {
		return false, nil
	}
	st.op.Lock()
	defer st.op.Unlock()
	if r.ls.FindDB(path) != nil {
		return false, nil
	}
	level0 := filepath.Join(r.metaPath(rel), "ltx", "0")
	client, err := r.cfg.Target.client(rel)
	if err != nil {
		return false, err
	}
	// In step: this run shipped the newest file and nothing has touched the
	// history since; its header (shipBase) is where the WAL carries on.
	r.mu.Lock()
	prev := st.shipBase
	inStep := prev != nil && !st.Watched && st.Err == "" && st.Replicated == uint64(prev.MaxTXID) && st.TXID == uint64(prev.MaxTXID)
	r.mu.Unlock()
	var last ltx.TXID
	var base *os.File
	if inStep {
		last = prev.MaxTXID
	} else {
		var remote ltx.TXID
		last, remote, err = repairLocal(ctx, level0, client)
		if err != nil {
			r.setDown(err)
			return false, fmt.Errorf("replicate %s: ship: %w", rel, err)
		}
		r.mu.Lock()
		st.repaired = true
		r.mu.Unlock()
		if remote != last {
			return false, nil // the target lacks local files, or has others: a take-up sorts it out
		}
		if last > 0 {
			if base, err = os.Open(filepath.Join(level0, ltx.FormatFilename(last, last))); err != nil {
				return false, nil
			}
			defer base.Close()
		}
	}

	wal, err := os.Open(path + "-wal")
	if err != nil {
		return false, nil
	}
	defer wal.Close()
	fi, err := wal.Stat()
	if err != nil {
		return false, err
	}
	if fi.Size() >= shipMaxWAL {
		return false, nil
	}
	txid := last + 1
	name := filepath.Join(level0, ltx.FormatFilename(txid, txid))
	if last == 0 {
		if err := os.MkdirAll(level0, 0o700); err != nil {
			return false, err
		}
	}
	// Built in memory, spilled to a local temporary file past
	// shipMemMax (a snapshot of a big file).
	out := &spillFile{name: name + ".tmp", buf: shipBufs.Get().(*bytes.Buffer)}
	defer out.close()
	out.buf.Reset()
	var shipped, same bool
	var hdr ltx.Header
	if last > 0 {
		hdr, shipped, same, err = shipFrames(ctx, wal, fi.Size(), prev, base, out, txid)
	}
	if err == nil && !shipped && !same && db != nil && last > 0 {
		// A WAL started afresh over a file that is the state the newest
		// LTX file ends at, as the mark of the checkpoint that emptied the
		// last WAL proves (carryOn).
		if m := readMark(r.metaPath(rel)); m != nil && newestIs(prev, inStep, base, m.last) {
			out.buf.Reset()
			hdr, shipped, err = carryOn(ctx, db, wal, m, out, txid)
		}
	}
	if err == nil && !shipped && !same && db != nil {
		out.buf.Reset()
		hdr, shipped, err = shipSnapshot(ctx, db, wal, out, txid)
	}
	if err == nil && shipped && out.f == nil && out.buf.Len() == 0 {
		err = errors.New("nothing written") // cannot be: an LTX file has a header
	}
	if err != nil || !shipped {
		return same, err // same: nothing written since
	}
	body, err := out.reader()
	if err != nil {
		return false, err
	}

	// The target first, then the local file, neither synced here: the
	// target is the history (its client syncs), the local newest only
	// says where it stopped, and repairLocal mends it from the target when
	// a crash left it missing or torn.
	if _, err := client.WriteLTXFile(ctx, 0, txid, txid, body); err != nil {
		r.setDown(err)
		r.mu.Lock()
		st.Err, st.shipBase, st.repaired = err.Error(), nil, false
		r.mu.Unlock()
		return false, fmt.Errorf("replicate %s: ship: %w", rel, err)
	}
	prevName := ""
	if last > 0 {
		prevName = filepath.Join(level0, ltx.FormatFilename(last, last))
	}
	if err := out.keep(name, prevName); err != nil {
		r.mu.Lock()
		st.TXID, st.Replicated, st.shipBase, st.repaired = uint64(txid), uint64(txid), nil, false
		r.mu.Unlock()
		return true, nil // on the target; the next ship repairs the local state
	}
	r.mu.Lock()
	st.TXID, st.Replicated, st.LastSync, st.Err = uint64(txid), uint64(txid), time.Now(), ""
	st.shipBase = &hdr
	st.ships++
	compact := st.ships%shipsPerCompaction == 0
	r.mu.Unlock()
	r.historyGrew(rel)
	if db != nil && hdr.WALOffset+hdr.WALSize >= shipWALBound {
		// The WAL is on the target whole: emptied now, with the mark the
		// next ship carries on by.
		if _, err := r.checkpoint(ctx, st, rel, path, db, false); err != nil {
			r.log.Warn("replication: checkpoint a shipped WAL", "path", rel, "err", err)
		}
	}
	if compact {
		// Litestream compacts only the files it watches; a file shipped
		// without a take-up would leave a restore one LTX file a post.
		_, err := litestream.NewCompactor(client, r.log).Compact(ctx, 1)
		if err != nil && !errors.Is(err, litestream.ErrNoCompaction) {
			r.log.Warn("replication: compact shipped files", "path", rel, "err", err)
		}
	}
	return true, nil
}

// repairLocal mends the local level-0 state in level0 from the target
// before a ship or take-up that does not know it is in step, and returns
// its newest TXID (last) and the target's (remote). A ship writes the
// local file after the target has it and syncs neither file nor folder,
// so a crash may leave the local newest torn (it does not verify: removed)
// or missing. It is fetched from the target when the target's newest is
// the torn file's TXID or exactly one past the local newest; any other
// disagreement is left for the take-up (Litestream's own checks).
func repairLocal(ctx context.Context, level0 string, client litestream.ReplicaClient) (last, remote ltx.TXID, err error) {
	_, last, err = maxLTX(level0)
	if err != nil {
		return 0, 0, err
	}
	var torn ltx.TXID
	for last > 0 && !verifyLTX(filepath.Join(level0, ltx.FormatFilename(last, last))) {
		if err := os.Remove(filepath.Join(level0, ltx.FormatFilename(last, last))); err != nil {
			return 0, 0, err
		}
		torn = max(torn, last)
		if _, last, err = maxLTX(level0); err != nil {
			return 0, 0, err
		}
	}
	if remote, err = maxRemoteLTX(ctx, client); err != nil {
		return 0, 0, fmt.Errorf("list the target: %w", err)
	}
	if remote == 0 && last > 0 {
		// The target lost this file's history (a wiped bucket): the local
		// state names files nobody can fetch, and a take-up would carry on
		// from it; cleared, the next ship or take-up snapshots anew.
		if err := os.RemoveAll(filepath.Dir(level0)); err != nil {
			return 0, 0, err
		}
		return 0, 0, nil
	}
	torn1 := torn != 0 && remote == torn   // the torn file is the target's newest
	ahead := last != 0 && remote == last+1 // the target is one file ahead
	if remote == last || !(torn1 || ahead) {
		return last, remote, nil
	}
	if err := fetchLTX(ctx, client, level0, remote); err != nil {
		return 0, 0, fmt.Errorf("fetch LTX file %d from the target: %w", remote, err)
	}
	if last > 0 {
		os.Remove(filepath.Join(level0, ltx.FormatFilename(last, last)))
	}
	return remote, remote, nil
}

// verifyLTX says whether the LTX file at name decodes whole: header,
// pages and trailer, and its header is its name's.
func verifyLTX(name string) bool {
	// checkLTXFile first: ltx's Verify panics on a file cut just after
	// its pages, in the replication goroutine, which ends the server.
	if checkLTXFile(name, RestoreMaxBytes) != nil {
		return false
	}
	f, err := os.Open(name)
	if err != nil {
		return false
	}
	defer f.Close()
	dec := ltx.NewDecoder(bufio.NewReaderSize(f, 32<<10))
	if dec.Verify() != nil {
		return false
	}
	lo, hi, err := ltx.ParseFilename(filepath.Base(name))
	return err == nil && dec.Header().MinTXID == lo && dec.Header().MaxTXID == hi
}

// fetchLTX copies the target's level-0 LTX file txid into level0, after
// verifying it: the local newest Litestream and the next ship read.
func fetchLTX(ctx context.Context, client litestream.ReplicaClient, level0 string, txid ltx.TXID) error {
	rd, err := client.OpenLTXFile(ctx, 0, txid, txid, 0, 0)
	if err != nil {
		return err
	}
	defer rd.Close()
	if err := os.MkdirAll(level0, 0o700); err != nil {
		return err
	}
	name := filepath.Join(level0, ltx.FormatFilename(txid, txid))
	f, err := os.OpenFile(name+".tmp", os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if n, err := io.Copy(f, io.LimitReader(rd, RestoreMaxBytes+1)); err != nil {
		os.Remove(f.Name())
		return err
	} else if n > RestoreMaxBytes {
		os.Remove(f.Name())
		return fmt.Errorf("the target's file is over %d bytes", int64(RestoreMaxBytes))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := checkLTXFile(f.Name(), RestoreMaxBytes); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("the target's file does not verify: %w", err)
	}
	if err := ltx.NewDecoder(bufio.NewReaderSize(f, 32<<10)).Verify(); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("the target's file does not verify: %w", err)
	}
	return syncRename(f, name)
}

// shipFrames writes to out, as LTX file txid, the frames of wal (of size
// size) committed after those the newest LTX file was made from (its
// header prev when in step in this run, else the local file base), when
// it can prove they continue it: the WAL is of its generation (salts),
// reaches its end, and grows no page without a frame (only the database
// file would have it). From base (the history was not followed in this
// run) the frame it ends with must also be in it, as Litestream's own
// verify asks: a WAL rewritten since under the same salts is not taken for
// the one base read. same: nothing committed since; shipped false: prove
// nothing, write nothing. hdr is the header written.
func shipFrames(ctx context.Context, wal *os.File, size int64, prev *ltx.Header, base *os.File, out io.Writer, txid ltx.TXID) (hdr ltx.Header, shipped, same bool, err error) {
	var dec *ltx.Decoder
	if base != nil {
		dec = ltx.NewDecoder(base)
		if err := dec.DecodeHeader(); err != nil {
			return hdr, false, false, nil
		}
		h := dec.Header()
		prev = &h
	}
	offset := prev.WALOffset + prev.WALSize
	var whdr [litestream.WALHeaderSize]byte
	if _, err := wal.ReadAt(whdr[:], 0); err != nil {
		return hdr, false, false, nil
	}
	if binary.BigEndian.Uint32(whdr[16:]) != prev.WALSalt1 || binary.BigEndian.Uint32(whdr[20:]) != prev.WALSalt2 ||
		offset <= litestream.WALHeaderSize || offset > size {
		return hdr, false, false, nil
	}
	if dec != nil {
		if ok, err := lastFrameIn(wal, dec, offset); err != nil || !ok {
			return hdr, false, false, nil
		}
	}
	if offset == size {
		return hdr, false, true, nil
	}
	// The frames since base, and the one before (whose checksum the reader
	// carries on from), in one read rather than two a frame.
	tail, err := readTail(wal, offset-int64(prev.PageSize)-litestream.WALFrameHeaderSize, size)
	if err != nil {
		return hdr, false, false, err
	}
	defer tail.free()
	rd, err := litestream.NewWALReaderWithOffset(ctx, tail, offset, prev.WALSalt1, prev.WALSalt2, slog.New(slog.DiscardHandler))
	if err != nil {
		return hdr, false, false, nil
	}
	pages, end, commit, err := rd.PageMap(ctx)
	if err != nil || len(pages) == 0 {
		// Nothing committed since (or a torn tail: the take-up decides).
		return hdr, false, err == nil, nil
	}
	pageSize := int(rd.PageSize())
	if pageSize != int(prev.PageSize) {
		return hdr, false, false, nil
	}
	lock := ltx.LockPgno(uint32(pageSize))
	pgnos := make([]uint32, 0, len(pages))
	for pgno := range pages {
		pgnos = append(pgnos, pgno)
	}
	for pgno := prev.Commit + 1; pgno <= commit; pgno++ {
		if _, in := pages[pgno]; !in && pgno != lock {
			return hdr, false, false, nil // a page grown without a frame: only the database file has it
		}
	}
	slices.Sort(pgnos)
	hdr = ltx.Header{
		Version: ltx.Version, Flags: ltx.HeaderFlagNoChecksum, PageSize: uint32(pageSize), Commit: commit,
		MinTXID: txid, MaxTXID: txid, Timestamp: time.Now().UnixMilli(),
		WALOffset: offset, WALSize: end - offset, WALSalt1: prev.WALSalt1, WALSalt2: prev.WALSalt2,
	}
	err = writeLTX(out, hdr, func(lw *ltxWriter) error {
		data := make([]byte, pageSize)
		for _, pgno := range pgnos {
			if _, err := tail.ReadAt(data, pages[pgno]+litestream.WALFrameHeaderSize); err != nil {
				return err
			}
			if err := lw.page(pgno, data); err != nil {
				return err
			}
		}
		return nil
	})
	return hdr, err == nil, false, err
}

// walTail is the WAL from base to the size it had when read, in memory;
// a read before base (the header) goes to the file, one past the end is
// io.EOF as at the file's end.
type walTail struct {
	f    *os.File
	base int64
	buf  *bytes.Buffer
}

// readTail reads wal from base to size (less than shipMaxWAL).
func readTail(wal *os.File, base, size int64) (*walTail, error) {
	buf := shipBufs.Get().(*bytes.Buffer)
	buf.Reset()
	buf.Grow(int(size-base) + bytes.MinRead)
	if _, err := buf.ReadFrom(io.NewSectionReader(wal, base, size-base)); err != nil {
		putShipBuf(buf)
		return nil, err
	}
	return &walTail{f: wal, base: base, buf: buf}, nil
}

func (w *walTail) ReadAt(p []byte, off int64) (int, error) {
	if off < w.base {
		return w.f.ReadAt(p, off)
	}
	b := w.buf.Bytes()
	if off-w.base >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off-w.base:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (w *walTail) free() { putShipBuf(w.buf) }

// lastFrameIn says whether the WAL frame that ends at offset is of base's
// generation, a commit to base's size, and a page base holds as is.
func lastFrameIn(wal *os.File, dec *ltx.Decoder, offset int64) (bool, error) {
	h := dec.Header()
	frame := make([]byte, litestream.WALFrameHeaderSize+int(h.PageSize))
	if _, err := wal.ReadAt(frame, offset-int64(len(frame))); err != nil {
		return false, err
	}
	pgno := binary.BigEndian.Uint32(frame[0:])
	if binary.BigEndian.Uint32(frame[4:]) != h.Commit || binary.BigEndian.Uint32(frame[8:]) != h.WALSalt1 ||
		binary.BigEndian.Uint32(frame[12:]) != h.WALSalt2 {
		return false, nil
	}
	data := make([]byte, h.PageSize)
	for {
		var ph ltx.PageHeader
		if err := dec.DecodePage(&ph, data); errors.Is(err, io.EOF) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		if ph.Pgno == pgno {
			return bytes.Equal(data, frame[litestream.WALFrameHeaderSize:]), nil
		}
	}
}

// newestIs says whether h is the header of the newest LTX file: prev when
// in step in this run, else base's.
func newestIs(prev *ltx.Header, inStep bool, base *os.File, h ltx.Header) bool {
	if inStep {
		return prev != nil && *prev == h
	}
	if base == nil {
		return false
	}
	dec := ltx.NewDecoder(io.NewSectionReader(base, 0, ltx.HeaderSize))
	return dec.DecodeHeader() == nil && dec.Header() == h
}

// carryOn writes to out, as LTX file txid, every frame committed in wal
// from its header on, when the database file under it is provably the
// state the newest LTX file ends at: m, its mark, has the sum of each of
// its pages, and every page the WAL does not hold reads with its sum
// through db (the app's connection) under the write lock, as shipSnapshot
// reads them. Litestream carries on the same way after its own
// checkpoints (db.go, verify: the new WAL's salts, offset WALHeaderSize);
// shipped false: prove nothing, write nothing.
func carryOn(ctx context.Context, db *sql.DB, wal *os.File, m *walMark, out io.Writer, txid ltx.TXID) (hdr ltx.Header, ok bool, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return hdr, false, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return hdr, false, err
	}
	defer func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	rd, err := litestream.NewWALReader(wal, slog.New(slog.DiscardHandler))
	if err != nil {
		return hdr, false, nil
	}
	pages, end, commit, err := rd.PageMap(ctx)
	if err != nil || len(pages) == 0 || rd.PageSize() != m.last.PageSize {
		return hdr, false, nil
	}
	var whdr [litestream.WALHeaderSize]byte
	if _, err := wal.ReadAt(whdr[:], 0); err != nil {
		return hdr, false, err
	}
	pageSize := m.last.PageSize
	var pageCount uint32
	if err := conn.QueryRowContext(ctx, "SELECT page_size, page_count FROM pragma_page_size, pragma_page_count").Scan(&pageSize, &pageCount); err != nil {
		return hdr, false, err
	}
	if pageSize != m.last.PageSize || pageCount != commit {
		return hdr, false, nil // SQLite sees another WAL than the one read
	}
	lock := ltx.LockPgno(pageSize)
	for pgno := m.last.Commit + 1; pgno <= commit; pgno++ {
		if _, in := pages[pgno]; !in && pgno != lock {
			return hdr, false, nil // a page grown without a frame
		}
	}
	rows, err := conn.QueryContext(ctx, "SELECT pgno, data FROM sqlite_dbpage('main')")
	if err != nil {
		return hdr, false, err
	}
	defer rows.Close()
	h := crc64.New(crcISO)
	frame := make([]byte, pageSize)
	var want uint32 = 1
	var data sql.RawBytes
	for rows.Next() {
		var pgno uint32
		if err := rows.Scan(&pgno, &data); err != nil {
			return hdr, false, err
		}
		if pgno == lock && want == lock {
			want++
			continue
		}
		if pgno != want || len(data) != int(pageSize) {
			return hdr, false, nil
		}
		want++
		if off, in := pages[pgno]; in {
			if _, err := wal.ReadAt(frame, off+litestream.WALFrameHeaderSize); err != nil {
				return hdr, false, err
			}
			if !bytes.Equal(frame, data) {
				return hdr, false, nil // SQLite sees another WAL than the one read
			}
		} else if int(pgno) > len(m.sums) || ltx.ChecksumPageWithHasher(h, pgno, data) != m.sums[pgno-1] {
			return hdr, false, nil // the file changed since the mark
		}
	}
	if err := rows.Err(); err != nil {
		return hdr, false, err
	}
	if want != commit+1 {
		return hdr, false, nil
	}
	pgnos := make([]uint32, 0, len(pages))
	for pgno := range pages {
		pgnos = append(pgnos, pgno)
	}
	slices.Sort(pgnos)
	hdr = ltx.Header{
		Version: ltx.Version, Flags: ltx.HeaderFlagNoChecksum, PageSize: pageSize, Commit: commit,
		MinTXID: txid, MaxTXID: txid, Timestamp: time.Now().UnixMilli(),
		WALOffset: litestream.WALHeaderSize, WALSize: end - litestream.WALHeaderSize,
		WALSalt1: binary.BigEndian.Uint32(whdr[16:]), WALSalt2: binary.BigEndian.Uint32(whdr[20:]),
	}
	err = writeLTX(out, hdr, func(lw *ltxWriter) error {
		for _, pgno := range pgnos {
			if _, err := wal.ReadAt(frame, pages[pgno]+litestream.WALFrameHeaderSize); err != nil {
				return err
			}
			if err := lw.page(pgno, frame); err != nil {
				return err
			}
		}
		return nil
	})
	return hdr, err == nil, err
}

// shipSnapshot writes to out, as LTX file txid, every page of the file as
// it is at the end of its WAL, read through db (the app's only connection
// to it) under the write lock: no commit moves the WAL's end meanwhile, and
// no descriptor of ours on the database file is closed (which would drop
// SQLite's locks). Litestream snapshots the same way, as the next TXID of
// the history, when it cannot carry a WAL on; the header records the WAL's
// end so that the next ship carries on from it. The pages SQLite reads
// must agree with the WAL's committed frames and its size, else nothing is
// shipped.
func shipSnapshot(ctx context.Context, db *sql.DB, wal *os.File, out io.Writer, txid ltx.TXID) (hdr ltx.Header, ok bool, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return hdr, false, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return hdr, false, err
	}
	defer func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			// Left in a transaction, the app's connection would refuse
			// every later write: it is closed instead, and reopened.
			conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()

	rd, err := litestream.NewWALReader(wal, slog.New(slog.DiscardHandler))
	if err != nil {
		return hdr, false, nil // no WAL header: the take-up makes one
	}
	pages, end, commit, err := rd.PageMap(ctx)
	if err != nil || len(pages) == 0 {
		return hdr, false, nil // nothing committed in this WAL: the take-up decides
	}
	var whdr [litestream.WALHeaderSize]byte
	if _, err := wal.ReadAt(whdr[:], 0); err != nil {
		return hdr, false, err
	}
	var pageSize, pageCount uint32
	if err := conn.QueryRowContext(ctx, "SELECT page_size, page_count FROM pragma_page_size, pragma_page_count").Scan(&pageSize, &pageCount); err != nil {
		return hdr, false, err
	}
	if pageSize != rd.PageSize() || pageCount != commit {
		return hdr, false, nil
	}
	rows, err := conn.QueryContext(ctx, "SELECT pgno, data FROM sqlite_dbpage('main')")
	if err != nil {
		return hdr, false, err
	}
	defer rows.Close()
	lock := ltx.LockPgno(pageSize)
	agree := true
	hdr = ltx.Header{
		Version: ltx.Version, Flags: ltx.HeaderFlagNoChecksum, PageSize: pageSize, Commit: commit,
		MinTXID: txid, MaxTXID: txid, Timestamp: time.Now().UnixMilli(),
		WALOffset: litestream.WALHeaderSize, WALSize: end - litestream.WALHeaderSize,
		WALSalt1: binary.BigEndian.Uint32(whdr[16:]), WALSalt2: binary.BigEndian.Uint32(whdr[20:]),
	}
	err = writeLTX(out, hdr, func(lw *ltxWriter) error {
		frame := make([]byte, pageSize)
		var want uint32 = 1
		var data sql.RawBytes
		for rows.Next() {
			var pgno uint32
			if err := rows.Scan(&pgno, &data); err != nil {
				return err
			}
			if pgno == lock && want == lock {
				want++
				continue
			}
			if pgno != want || len(data) != int(pageSize) {
				agree = false
				return nil
			}
			want++
			if off, in := pages[pgno]; in {
				if _, err := wal.ReadAt(frame, off+litestream.WALFrameHeaderSize); err != nil {
					return err
				}
				if !bytes.Equal(frame, data) {
					agree = false // SQLite sees another WAL than the one read
					return nil
				}
			}
			if err := lw.page(pgno, data); err != nil {
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if want != commit+1 {
			agree = false
		}
		return nil
	})
	return hdr, err == nil && agree, err
}

// maxRemoteLTX is the newest level-0 TXID on the target: Litestream's
// replica position (replica.go, calcPos), 0 when it holds nothing; its
// retention keeps the newest level-0 file.
func maxRemoteLTX(ctx context.Context, client litestream.ReplicaClient) (ltx.TXID, error) {
	itr, err := client.LTXFiles(ctx, 0, 0, false)
	if err != nil {
		return 0, err
	}
	defer itr.Close()
	var maxTXID ltx.TXID
	for itr.Next() {
		maxTXID = max(maxTXID, itr.Item().MaxTXID)
	}
	return maxTXID, itr.Close()
}

// shipsPerCompaction is how many ships of a file are merged into one
// level-1 file, which a restore then reads instead of each of them.
const shipsPerCompaction = 16

// shipWALBound: a WAL a ship leaves past it is emptied with its mark
// (checkpoint), since up to shipMaxWAL a file was 674 of a soak's 836 MB;
// that costs 11-50 ms and the next ship's proof 2-20 ms on 0.6-8 MB files
// (2-core box), so ~1 ms a post at 256 KiB (~20 three-page posts).
const shipWALBound = 256 << 10

// shipMaxWAL is the WAL past which a file is taken up rather than shipped:
// Litestream checkpoints a WAL of 1,000 pages (4 MB at 4 KiB) when it
// syncs, and nothing else does while replication owns the checkpoints.
const shipMaxWAL = 1000 * (4096 + litestream.WALFrameHeaderSize)

// maxLTX is the highest level-0 LTX file in dir (0 when none).
func maxLTX(dir string) (minTXID, maxTXID ltx.TXID, err error) {
	es, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	} else if err != nil {
		return 0, 0, err
	}
	for _, e := range es {
		if lo, hi, err := ltx.ParseFilename(e.Name()); err == nil && hi > maxTXID {
			minTXID, maxTXID = lo, hi
		}
	}
	return minTXID, maxTXID, nil
}

// shipBufs holds the buffers ships build their frames in; one grown past
// shipBufKeep (a ship of more than ~60 pages) is let go of after use.
var shipBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const shipBufKeep = 256 << 10

func putShipBuf(b *bytes.Buffer) {
	if b.Cap() <= shipBufKeep {
		shipBufs.Put(b)
	}
}

// shipMemMax is how much of an LTX file a ship builds in memory: a ship
// of frames is a few pages (~40 KiB a post), a snapshot the whole file.
const shipMemMax = 1 << 20

// spillFile is an LTX file being built: in buf up to shipMemMax, then in
// the temporary file name, created then.
type spillFile struct {
	name string
	buf  *bytes.Buffer
	f    *os.File
}

func (s *spillFile) Write(b []byte) (int, error) {
	if s.f == nil && s.buf.Len()+len(b) <= shipMemMax {
		return s.buf.Write(b)
	}
	if s.f == nil {
		f, err := os.OpenFile(s.name, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
		if err != nil {
			return 0, err
		}
		s.f = f
		if _, err := s.buf.WriteTo(f); err != nil {
			return 0, err
		}
	}
	return s.f.Write(b)
}

// reader reads what was written from its start.
func (s *spillFile) reader() (io.Reader, error) {
	if s.f == nil {
		return bytes.NewReader(s.buf.Bytes()), nil
	}
	_, err := s.f.Seek(0, io.SeekStart)
	return s.f, err
}

// keep makes what was written the file name, unsynced, in place of prev,
// the local newest it follows ("" for none: Litestream reads only the
// newest, compaction the target). prev is renamed and rewritten rather
// than a file made and prev removed: ext4's inode allocation was 8 % of
// the machine under the 16-writer burst (bench/THRESHOLDS.md, "Moments by
// id"). A crash in between leaves prev's bytes or a torn file under name,
// which verifyLTX refuses; on an error the next ship repairs from there.
func (s *spillFile) keep(name, prev string) error {
	if s.f != nil {
		if err := os.Rename(s.name, name); err != nil {
			return err
		}
		if prev != "" {
			os.Remove(prev)
		}
		return nil
	}
	if prev != "" {
		if err := os.Rename(prev, name); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	// Overwritten and then cut to length, not opened with O_TRUNC: ext4
	// starts writing back a file emptied and rewritten when it is closed
	// (auto_da_alloc), 68 against 18 µs of CPU a 40 KiB rewrite here.
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(s.buf.Bytes(), 0)
	if err == nil {
		err = f.Truncate(int64(s.buf.Len()))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// close lets go of the buffer and removes the temporary file if any
// (renamed by keep, it is gone already).
func (s *spillFile) close() {
	if s.f != nil {
		s.f.Close()
		os.Remove(s.name)
	}
	putShipBuf(s.buf)
}

// syncRename syncs f and renames it to name, its folder synced too.
func syncRename(f *os.File, name string) error {
	err := f.Sync()
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	d, err := os.Open(filepath.Dir(name))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
