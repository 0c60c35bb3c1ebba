package backup

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// Ship is a take-up without Litestream: it ships the writes of a file
// nobody watches as the next LTX file of its history, written the way
// Litestream writes it (level 0, no checksums, the WAL's offset and salts
// in the header), to the target and then, unsynced, to Litestream's local
// state (repairLocal mends it after a crash); a later take-up or restore
// carries on from it. A take-up costs several times a ship's CPU
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
	emptied := inStep && st.emptied == prev
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
	switch {
	case emptied:
		hdr, shipped, same, err = shipNextWAL(ctx, wal, fi.Size(), prev, out, txid)
	case last > 0:
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
	if db != nil && hdr.WALOffset+hdr.WALSize >= walBound(hdr) {
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

// walBound is the WAL a ship leaves past which it is emptied: the size of
// the file it ends at, from shipWALBound to half of shipMaxWAL. The mark
// reads every page, so a bound in step with the file costs a post the
// same few page reads at any size (the mark was 6 % of the server's CPU
// in the bench's mixed burst at 256 KiB, bench/THRESHOLDS.md), and a
// WAL stays within its database's size.
func walBound(h ltx.Header) int64 {
	return min(max(int64(h.Commit)*int64(h.PageSize), shipWALBound), shipMaxWAL/2)
}

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
