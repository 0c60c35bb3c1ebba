package backup

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"hash/crc64"
	"io"
	"log/slog"
	"os"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// A ship that cannot follow on from the newest LTX file: carryOn from the
// mark a checkpoint left, else shipSnapshot of the whole file (Ship, ship.go).

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
	unlock, err := writeLocked(ctx, conn)
	if err != nil {
		return hdr, false, err
	}
	defer unlock()
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
		} else if int(pgno) > len(m.sums) || m.sum(h, pgno, data) != m.sums[pgno-1] {
			return hdr, false, nil // the file changed since the mark
		}
	}
	if err := rows.Err(); err != nil {
		return hdr, false, err
	}
	if want != commit+1 {
		return hdr, false, nil
	}
	hdr = shipHeader(pageSize, commit, txid, litestream.WALHeaderSize, end, binary.BigEndian.Uint32(whdr[16:]), binary.BigEndian.Uint32(whdr[20:]))
	ok, err = writeFrames(out, hdr, m.last.Commit, pages, wal)
	return hdr, ok, err
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
	unlock, err := writeLocked(ctx, conn)
	if err != nil {
		return hdr, false, err
	}
	defer unlock()

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
	hdr = shipHeader(pageSize, commit, txid, litestream.WALHeaderSize, end, binary.BigEndian.Uint32(whdr[16:]), binary.BigEndian.Uint32(whdr[20:]))
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
