package backup

import (
	"bytes"
	"context"
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

// Ship is a take-up without Litestream: it ships the new frames of the WAL
// of a file nobody watches as the next LTX file of its history, written
// the way Litestream writes it (level 0, no checksums, the WAL's offset and
// salts in the header), to Litestream's local state and to the target; a
// later take-up or restore carries on from it. A take-up costs ~5 ms of
// CPU (Litestream's connection, read transaction, first sync, and the file
// let go of to make room, bench/THRESHOLDS.md); a ship reads the WAL once.
//
// It only ships what it can prove continues the history: the file was let
// go of in this run with every transaction on the target, its last local
// LTX file is where Litestream stopped, the WAL is of the same generation,
// no page comes from the database file (reading it would take a descriptor
// whose close drops SQLite's locks), and the WAL is under shipMaxWAL (past
// it Litestream must take the file up to checkpoint it). ok is false, with
// nothing written, when any of that fails: the caller takes the file up.
// The caller holds the file open (so the app does not checkpoint it) and
// keeps Litestream from watching it until Ship returns.
func (r *Replicator) Ship(ctx context.Context, path string) (ok bool, err error) {
	rel, err := r.rel(path)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	st := r.files[rel]
	down := r.down
	r.mu.Unlock()
	if st == nil || down != nil {
		return false, nil
	}
	st.op.Lock()
	defer st.op.Unlock()
	r.mu.Lock()
	inStep := !st.Watched && st.Err == "" && st.Replicated > 0 && st.Replicated >= st.TXID && !st.Unwatched.IsZero()
	last := st.Replicated
	r.mu.Unlock()
	if !inStep || r.ls.FindDB(path) != nil {
		return false, nil
	}
	level0 := filepath.Join(r.metaPath(rel), "ltx", "0")
	base := filepath.Join(level0, ltx.FormatFilename(ltx.TXID(last), ltx.TXID(last)))
	if _, maxTXID, err := maxLTX(level0); err != nil || uint64(maxTXID) != last {
		return false, err
	}
	bf, err := os.Open(base)
	if err != nil {
		return false, nil // compacted away: Litestream starts afresh
	}
	dec := ltx.NewDecoder(bf)
	err = dec.DecodeHeader()
	bf.Close()
	if err != nil {
		return false, nil
	}
	prev := dec.Header()
	offset := prev.WALOffset + prev.WALSize

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
	var hdr [litestream.WALHeaderSize]byte
	if _, err := wal.ReadAt(hdr[:], 0); err != nil {
		return false, nil
	}
	if binary.BigEndian.Uint32(hdr[16:]) != prev.WALSalt1 || binary.BigEndian.Uint32(hdr[20:]) != prev.WALSalt2 ||
		offset <= litestream.WALHeaderSize || offset > fi.Size() {
		return false, nil
	}
	if offset == fi.Size() {
		return true, nil // nothing written since
	}
	rd, err := litestream.NewWALReaderWithOffset(ctx, wal, offset, prev.WALSalt1, prev.WALSalt2, slog.New(slog.DiscardHandler))
	if err != nil {
		return false, nil
	}
	pages, end, commit, err := rd.PageMap(ctx)
	if err != nil || len(pages) == 0 {
		return err == nil, nil // nothing committed since (or a torn tail: the take-up decides)
	}
	pageSize := int(rd.PageSize())
	if pageSize != int(prev.PageSize) {
		return false, nil
	}
	lock := ltx.LockPgno(uint32(pageSize))
	pgnos := make([]uint32, 0, len(pages))
	for pgno := range pages {
		pgnos = append(pgnos, pgno)
	}
	for pgno := prev.Commit + 1; pgno <= commit; pgno++ {
		if _, in := pages[pgno]; !in && pgno != lock {
			return false, nil // a page grown without a frame: only the database file has it
		}
	}
	slices.Sort(pgnos)

	txid := ltx.TXID(last + 1)
	var buf bytes.Buffer
	enc, err := ltx.NewEncoder(&buf)
	if err != nil {
		return false, err
	}
	if err := enc.EncodeHeader(ltx.Header{
		Version: ltx.Version, Flags: ltx.HeaderFlagNoChecksum, PageSize: uint32(pageSize), Commit: commit,
		MinTXID: txid, MaxTXID: txid, Timestamp: time.Now().UnixMilli(),
		WALOffset: offset, WALSize: end - offset, WALSalt1: prev.WALSalt1, WALSalt2: prev.WALSalt2,
	}); err != nil {
		return false, err
	}
	data := make([]byte, pageSize)
	for _, pgno := range pgnos {
		if _, err := wal.ReadAt(data, pages[pgno]+litestream.WALFrameHeaderSize); err != nil {
			return false, err
		}
		if err := enc.EncodePage(ltx.PageHeader{Pgno: pgno}, data); err != nil {
			return false, err
		}
	}
	if err := enc.Close(); err != nil {
		return false, err
	}

	// Local first, as Litestream does (a later take-up reads its position
	// there), then the target; a failure of either leaves the file to a
	// take-up, which finds the local file and uploads it.
	name := filepath.Join(level0, ltx.FormatFilename(txid, txid))
	if err := writeSynced(name, buf.Bytes()); err != nil {
		return false, err
	}
	client, err := r.cfg.Target.client(rel)
	if err != nil {
		return false, err
	}
	if _, err := client.WriteLTXFile(ctx, 0, txid, txid, bytes.NewReader(buf.Bytes())); err != nil {
		r.setDown(err)
		r.mu.Lock()
		st.TXID, st.Err = uint64(txid), err.Error()
		r.mu.Unlock()
		return false, fmt.Errorf("replicate %s: ship: %w", rel, err)
	}
	os.Remove(base) // Litestream reads only the newest; compaction falls back to the target
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

// writeSynced writes b to name through a temporary file, synced, renamed.
func writeSynced(name string, b []byte) error {
	tmp := name + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, bytes.NewReader(b))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
