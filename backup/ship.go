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
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// Ship is a take-up without Litestream: it ships the writes of a file
// nobody watches as the next LTX file of its history, written the way
// Litestream writes it (level 0, no checksums, the WAL's offset and salts
// in the header), to Litestream's local state and to the target; a later
// take-up or restore carries on from it. A take-up costs ~5 ms of CPU
// (Litestream's connection, read transaction, first sync, and the file let
// go of to make room, bench/THRESHOLDS.md); a ship reads the WAL once.
//
// The next file is the WAL's new frames when they provably continue the
// history (shipFrames), else a snapshot of every page read through db,
// the app's own connection to the file (shipSnapshot). Either only when
// the target holds exactly the local history: in step in this run, or its
// newest level-0 file (Litestream's replica position, one LIST) is the
// local newest; both empty for a file never replicated. ok is false, with
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
	_, last, err := maxLTX(level0)
	if err != nil {
		return false, err
	}
	client, err := r.cfg.Target.client(rel)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	inStep := !st.Watched && st.Err == "" && last > 0 && st.Replicated == uint64(last) && st.TXID == uint64(last)
	r.mu.Unlock()
	if !inStep {
		remote, err := maxRemoteLTX(ctx, client)
		if err != nil {
			r.setDown(err)
			return false, fmt.Errorf("replicate %s: ship: list the target: %w", rel, err)
		}
		if remote != last {
			return false, nil // the target lacks local files, or has others: a take-up sorts it out
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
	out := &lazyFile{name: name + ".tmp"}
	defer out.close()
	var shipped, same bool
	if last > 0 {
		base := filepath.Join(level0, ltx.FormatFilename(last, last))
		shipped, same, err = shipFrames(ctx, wal, fi.Size(), base, out, txid, !inStep)
	}
	if err == nil && !shipped && !same && db != nil {
		shipped, err = shipSnapshot(ctx, db, wal, out, txid)
	}
	if err == nil && shipped && out.f == nil {
		err = errors.New("nothing written") // cannot be: an LTX file has a header
	}
	if err != nil || !shipped {
		if out.f != nil {
			os.Remove(out.name)
		}
		return same, err // same: nothing written since
	}

	// Local first, as Litestream does (a later take-up reads its position
	// there), then the target; a failure of either leaves the file to a
	// take-up, which finds the local file and uploads it.
	if err := syncRename(out.f, name); err != nil {
		return false, err
	}
	if _, err := out.f.Seek(0, io.SeekStart); err != nil {
		return false, err
	}
	if _, err := client.WriteLTXFile(ctx, 0, txid, txid, out.f); err != nil {
		r.setDown(err)
		r.mu.Lock()
		st.TXID, st.Err = uint64(txid), err.Error()
		r.mu.Unlock()
		return false, fmt.Errorf("replicate %s: ship: %w", rel, err)
	}
	if last > 0 {
		// Litestream reads only the newest; compaction falls back to the target.
		os.Remove(filepath.Join(level0, ltx.FormatFilename(last, last)))
	}
	r.mu.Lock()
	st.TXID, st.Replicated, st.LastSync, st.Err = uint64(txid), uint64(txid), time.Now(), ""
	st.ships++
	compact := st.ships%shipsPerCompaction == 0
	r.mu.Unlock()
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

// shipFrames writes to out, as LTX file txid, the frames of wal (of size
// size) committed after those base (the newest local LTX file) was made
// from, when it can prove they continue it: the WAL is of base's
// generation (salts), reaches base's end, and grows no page without a
// frame (only the database file would have it). With check (the history
// was not followed in this run) the frame base ends with must also be in
// base, as Litestream's own verify asks: a WAL rewritten since under the
// same salts is not taken for the one base read. same: nothing committed
// since base; shipped false: prove nothing, write nothing.
func shipFrames(ctx context.Context, wal *os.File, size int64, base string, out io.Writer, txid ltx.TXID, check bool) (shipped, same bool, err error) {
	bf, err := os.Open(base)
	if err != nil {
		return false, false, nil
	}
	defer bf.Close()
	dec := ltx.NewDecoder(bf)
	if err := dec.DecodeHeader(); err != nil {
		return false, false, nil
	}
	prev := dec.Header()
	offset := prev.WALOffset + prev.WALSize
	var hdr [litestream.WALHeaderSize]byte
	if _, err := wal.ReadAt(hdr[:], 0); err != nil {
		return false, false, nil
	}
	if binary.BigEndian.Uint32(hdr[16:]) != prev.WALSalt1 || binary.BigEndian.Uint32(hdr[20:]) != prev.WALSalt2 ||
		offset <= litestream.WALHeaderSize || offset > size {
		return false, false, nil
	}
	if check {
		if ok, err := lastFrameIn(wal, dec, offset); err != nil || !ok {
			return false, false, nil
		}
	}
	if offset == size {
		return false, true, nil
	}
	rd, err := litestream.NewWALReaderWithOffset(ctx, wal, offset, prev.WALSalt1, prev.WALSalt2, slog.New(slog.DiscardHandler))
	if err != nil {
		return false, false, nil
	}
	pages, end, commit, err := rd.PageMap(ctx)
	if err != nil || len(pages) == 0 {
		// Nothing committed since (or a torn tail: the take-up decides).
		return false, err == nil, nil
	}
	pageSize := int(rd.PageSize())
	if pageSize != int(prev.PageSize) {
		return false, false, nil
	}
	lock := ltx.LockPgno(uint32(pageSize))
	pgnos := make([]uint32, 0, len(pages))
	for pgno := range pages {
		pgnos = append(pgnos, pgno)
	}
	for pgno := prev.Commit + 1; pgno <= commit; pgno++ {
		if _, in := pages[pgno]; !in && pgno != lock {
			return false, false, nil // a page grown without a frame: only the database file has it
		}
	}
	slices.Sort(pgnos)
	err = writeLTX(out, ltx.Header{
		Version: ltx.Version, Flags: ltx.HeaderFlagNoChecksum, PageSize: uint32(pageSize), Commit: commit,
		MinTXID: txid, MaxTXID: txid, Timestamp: time.Now().UnixMilli(),
		WALOffset: offset, WALSize: end - offset, WALSalt1: prev.WALSalt1, WALSalt2: prev.WALSalt2,
	}, func(enc *ltx.Encoder) error {
		data := make([]byte, pageSize)
		for _, pgno := range pgnos {
			if _, err := wal.ReadAt(data, pages[pgno]+litestream.WALFrameHeaderSize); err != nil {
				return err
			}
			if err := enc.EncodePage(ltx.PageHeader{Pgno: pgno}, data); err != nil {
				return err
			}
		}
		return nil
	})
	return err == nil, false, err
}

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

// shipSnapshot writes to out, as LTX file txid, every page of the file as
// it is at the end of its WAL, read through db (the app's only connection
// to it) under the write lock: no commit moves the WAL's end meanwhile, and
// no descriptor of ours on the database file is closed (which would drop
// SQLite's locks). Litestream snapshots the same way, as the next TXID of
// the history, when it cannot carry a WAL on; the header records the WAL's
// end so that the next ship carries on from it. The pages SQLite reads
// must agree with the WAL's committed frames and its size, else nothing is
// shipped.
func shipSnapshot(ctx context.Context, db *sql.DB, wal *os.File, out io.Writer, txid ltx.TXID) (bool, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return false, err
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
		return false, nil // no WAL header: the take-up makes one
	}
	pages, end, commit, err := rd.PageMap(ctx)
	if err != nil || len(pages) == 0 {
		return false, nil // nothing committed in this WAL: the take-up decides
	}
	var hdr [litestream.WALHeaderSize]byte
	if _, err := wal.ReadAt(hdr[:], 0); err != nil {
		return false, err
	}
	var pageSize, pageCount uint32
	if err := conn.QueryRowContext(ctx, "SELECT page_size, page_count FROM pragma_page_size, pragma_page_count").Scan(&pageSize, &pageCount); err != nil {
		return false, err
	}
	if pageSize != rd.PageSize() || pageCount != commit {
		return false, nil
	}
	rows, err := conn.QueryContext(ctx, "SELECT pgno, data FROM sqlite_dbpage('main')")
	if err != nil {
		return false, err
	}
	defer rows.Close()
	lock := ltx.LockPgno(pageSize)
	agree := true
	err = writeLTX(out, ltx.Header{
		Version: ltx.Version, Flags: ltx.HeaderFlagNoChecksum, PageSize: pageSize, Commit: commit,
		MinTXID: txid, MaxTXID: txid, Timestamp: time.Now().UnixMilli(),
		WALOffset: litestream.WALHeaderSize, WALSize: end - litestream.WALHeaderSize,
		WALSalt1: binary.BigEndian.Uint32(hdr[16:]), WALSalt2: binary.BigEndian.Uint32(hdr[20:]),
	}, func(enc *ltx.Encoder) error {
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
			if err := enc.EncodePage(ltx.PageHeader{Pgno: pgno}, data); err != nil {
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
	return err == nil && agree, err
}

// writeLTX writes an LTX file of header h and the pages pages encodes to
// out, buffered (the encoder writes a page in three).
func writeLTX(out io.Writer, h ltx.Header, pages func(*ltx.Encoder) error) error {
	w := bufio.NewWriterSize(out, 32<<10)
	enc, err := ltx.NewEncoder(w)
	if err == nil {
		err = enc.EncodeHeader(h)
	}
	if err == nil {
		err = pages(enc)
	}
	if err == nil {
		err = enc.Close()
	}
	if err == nil {
		err = w.Flush()
	}
	return err
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

// lazyFile is a file created at its first write: a ship that finds
// nothing to write creates none.
type lazyFile struct {
	name string
	f    *os.File
}

func (l *lazyFile) Write(b []byte) (int, error) {
	if l.f == nil {
		f, err := os.OpenFile(l.name, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
		if err != nil {
			return 0, err
		}
		l.f = f
	}
	return l.f.Write(b)
}

func (l *lazyFile) close() {
	if l.f != nil {
		l.f.Close()
	}
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
