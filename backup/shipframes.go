package backup

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// A ship's new frames: the WAL's frames after those the newest LTX file
// was made from, read once and written as the next LTX file (Ship, ship.go).

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
	if rd.PageSize() != prev.PageSize {
		return hdr, false, false, nil
	}
	hdr = shipHeader(prev.PageSize, commit, txid, offset, end, prev.WALSalt1, prev.WALSalt2)
	shipped, err = writeFrames(out, hdr, prev.Commit, pages, tail)
	return hdr, shipped, false, err
}

// shipNextWAL writes to out, as LTX file txid, every frame committed in
// wal from its header on, when this run's own checkpoint emptied the WAL
// prev covered whole (st.emptied) and wal is the one the same connection
// started next (SQLite's wal.c): its first salt one past prev's
// (walRestartHdr) and its checkpoint count not 0, which a connection
// opened since writes, with random salts (walFrames). Another writer's
// checkpoint in between moves the salt twice. Litestream carries on
// across its own checkpoints on less (db.go, verify: synced to the WAL's
// end, whatever the new salts). Nothing is read from the database file;
// same: nothing committed since.
func shipNextWAL(ctx context.Context, wal *os.File, size int64, prev *ltx.Header, out io.Writer, txid ltx.TXID) (hdr ltx.Header, shipped, same bool, err error) {
	if size <= litestream.WALHeaderSize {
		return hdr, false, true, nil
	}
	tail, err := readTail(wal, 0, size)
	if err != nil {
		return hdr, false, false, err
	}
	defer tail.free()
	whdr := tail.buf.Bytes()[:litestream.WALHeaderSize]
	salt1, salt2 := binary.BigEndian.Uint32(whdr[16:]), binary.BigEndian.Uint32(whdr[20:])
	if salt1 != prev.WALSalt1+1 || binary.BigEndian.Uint32(whdr[12:]) == 0 {
		return hdr, false, false, nil
	}
	rd, err := litestream.NewWALReader(tail, slog.New(slog.DiscardHandler))
	if err != nil || rd.PageSize() != prev.PageSize {
		return hdr, false, false, nil
	}
	pages, end, commit, err := rd.PageMap(ctx)
	if err != nil || len(pages) == 0 {
		return hdr, false, err == nil, nil
	}
	hdr = shipHeader(prev.PageSize, commit, txid, litestream.WALHeaderSize, end, salt1, salt2)
	shipped, err = writeFrames(out, hdr, prev.Commit, pages, tail)
	return hdr, shipped, false, err
}

// shipHeader is the header of a ship's LTX file txid, written the way
// Litestream writes level 0 (no checksums): the file's pages after it,
// and the WAL it was read from, offset to end under the salts.
func shipHeader(pageSize, commit uint32, txid ltx.TXID, offset, end int64, salt1, salt2 uint32) ltx.Header {
	return ltx.Header{
		Version: ltx.Version, Flags: ltx.HeaderFlagNoChecksum, PageSize: pageSize, Commit: commit,
		MinTXID: txid, MaxTXID: txid, Timestamp: time.Now().UnixMilli(),
		WALOffset: offset, WALSize: end - offset, WALSalt1: salt1, WALSalt2: salt2,
	}
}

// writeFrames writes to out the LTX file hdr of pages (a page number to
// its newest frame's offset in wal, as PageMap reads them), when they
// carry on a file of prevCommit pages: every page grown past it has a
// frame, else only the database file holds it. ok false: nothing written.
func writeFrames(out io.Writer, hdr ltx.Header, prevCommit uint32, pages map[uint32]int64, wal io.ReaderAt) (ok bool, err error) {
	lock := ltx.LockPgno(hdr.PageSize)
	for pgno := prevCommit + 1; pgno <= hdr.Commit; pgno++ {
		if _, in := pages[pgno]; !in && pgno != lock {
			return false, nil
		}
	}
	pgnos := make([]uint32, 0, len(pages))
	for pgno := range pages {
		pgnos = append(pgnos, pgno)
	}
	slices.Sort(pgnos)
	err = writeLTX(out, hdr, func(lw *ltxWriter) error {
		data := make([]byte, hdr.PageSize)
		for _, pgno := range pgnos {
			if _, err := wal.ReadAt(data, pages[pgno]+litestream.WALFrameHeaderSize); err != nil {
				return err
			}
			if err := lw.page(pgno, data); err != nil {
				return err
			}
		}
		return nil
	})
	return err == nil, err
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
