package backup

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc64"
	"io"
	"sync"

	"github.com/pierrec/lz4/v4"
	"github.com/superfly/ltx"
)

// ltxWriter writes an LTX file byte for byte as ltx.Encoder does, but is
// kept for the next ship (pooled: ~200 KiB for each ship at once, within
// the memory plan's base): an ltx.Encoder holds a 160 KiB LZ4 table and
// cannot be reset, which made a ship's encoders the largest share of the
// server's allocations under the bench's burst (bench/THRESHOLDS.md). Pages come
// in ascending order; ltx.Encoder's own checks of a header, a page header
// and the trailer are called as they are.
type ltxWriter struct {
	w     *bufio.Writer
	hash  hash.Hash64
	comp  lz4.Compressor
	zbuf  []byte // a compressed page
	index []ltxIndexElem
	hdr   ltx.Header
	n     int64 // bytes written
	last  uint32
	tmp   [3 * binary.MaxVarintLen64]byte
}

type ltxIndexElem struct {
	pgno         uint32
	offset, size int64
}

var ltxWriters = sync.Pool{New: func() any {
	return &ltxWriter{w: bufio.NewWriterSize(nil, 32<<10), hash: crc64.New(crc64.MakeTable(crc64.ISO))}
}}

// writeLTX writes an LTX file of header h and the pages that pages
// encodes to out.
func writeLTX(out io.Writer, h ltx.Header, pages func(*ltxWriter) error) error {
	lw := ltxWriters.Get().(*ltxWriter)
	defer func() {
		lw.w.Reset(nil)
		ltxWriters.Put(lw)
	}()
	err := lw.begin(out, h)
	if err == nil {
		err = pages(lw)
	}
	if err == nil {
		err = lw.end()
	}
	return err
}

func (lw *ltxWriter) begin(out io.Writer, h ltx.Header) error {
	if err := h.Validate(); err != nil {
		return err
	}
	lw.w.Reset(out)
	lw.hash.Reset()
	lw.index, lw.hdr, lw.n, lw.last = lw.index[:0], h, 0, 0
	b, err := h.MarshalBinary()
	if err != nil {
		return err
	}
	return lw.write(b)
}

// page writes page pgno, its data uncompressed (the header's page size).
func (lw *ltxWriter) page(pgno uint32, data []byte) error {
	ph := ltx.PageHeader{Pgno: pgno, Flags: ltx.PageHeaderFlagSize}
	lock := ltx.LockPgno(lw.hdr.PageSize)
	next := lw.last + 1 // a snapshot's every page but the lock page
	if next == lock {
		next++
	}
	switch {
	case pgno <= lw.last || pgno > lw.hdr.Commit || pgno == lock:
		return fmt.Errorf("ltx: page %d after %d (commit %d)", pgno, lw.last, lw.hdr.Commit)
	case lw.hdr.IsSnapshot() && pgno != next:
		return fmt.Errorf("ltx: snapshot page %d after %d", pgno, lw.last)
	case len(data) != int(lw.hdr.PageSize):
		return fmt.Errorf("ltx: page of %d bytes, want %d", len(data), lw.hdr.PageSize)
	}
	if err := ph.Validate(); err != nil {
		return err
	}
	if bound := lz4.CompressBlockBound(len(data)); len(lw.zbuf) < bound {
		lw.zbuf = make([]byte, bound)
	}
	z, err := lw.comp.CompressBlock(data, lw.zbuf)
	if err != nil || z == 0 {
		return fmt.Errorf("ltx: compress page %d: %v", pgno, err)
	}
	offset := lw.n
	b, err := ph.MarshalBinary()
	if err != nil {
		return err
	}
	if err := lw.write(b); err != nil {
		return err
	}
	if err := lw.write(binary.BigEndian.AppendUint32(lw.tmp[:0], uint32(z))); err != nil {
		return err
	}
	// The compressed bytes are written, the page's own bytes hashed.
	if _, err := lw.w.Write(lw.zbuf[:z]); err != nil {
		return err
	}
	lw.hash.Write(data)
	lw.n += int64(z)
	lw.index = append(lw.index, ltxIndexElem{pgno, offset, lw.n - offset})
	lw.last = pgno
	return nil
}

// end writes the end of the pages, the page index and the trailer, and
// flushes.
func (lw *ltxWriter) end() error {
	if len(lw.index) == 0 {
		return errors.New("ltx: no pages")
	}
	if lw.hdr.Commit == 0 {
		return errors.New("ltx: commit 0")
	}
	b, err := (&ltx.PageHeader{}).MarshalBinary()
	if err != nil {
		return err
	}
	if err := lw.write(b); err != nil {
		return err
	}
	start := lw.n
	for _, e := range lw.index {
		b := binary.AppendUvarint(lw.tmp[:0], uint64(e.pgno))
		b = binary.AppendUvarint(b, uint64(e.offset))
		b = binary.AppendUvarint(b, uint64(e.size))
		if err := lw.write(b); err != nil {
			return err
		}
	}
	if err := lw.write(binary.AppendUvarint(lw.tmp[:0], 0)); err != nil {
		return err
	}
	if err := lw.write(binary.BigEndian.AppendUint64(lw.tmp[:0], uint64(lw.n-start))); err != nil {
		return err
	}
	var t ltx.Trailer
	b, err = t.MarshalBinary()
	if err != nil {
		return err
	}
	lw.hash.Write(b[:ltx.TrailerChecksumOffset])
	t.FileChecksum = ltx.ChecksumFlag | ltx.Checksum(lw.hash.Sum64())
	if err := t.Validate(lw.hdr); err != nil {
		return err
	}
	if b, err = t.MarshalBinary(); err != nil {
		return err
	}
	if _, err := lw.w.Write(b); err != nil {
		return err
	}
	return lw.w.Flush()
}

// write writes b and hashes it.
func (lw *ltxWriter) write(b []byte) error {
	if _, err := lw.w.Write(b); err != nil {
		return err
	}
	lw.hash.Write(b)
	lw.n += int64(len(b))
	return nil
}
