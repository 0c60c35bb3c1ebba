package backup

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// The retention pass's work on one history (retention.go): compact what
// ships left at level 0, snapshot, and prune Litestream's local copies.

// compactShipped compacts the level-0 files of a file nobody watches that
// are past level 1 and l0Keep old into one level-1 file (a ship does it
// every shipsPerCompaction ships; a person who posts three times would
// otherwise keep three level-0 files for ever). Litestream compacts the
// files it watches.
func (r *Replicator) compactShipped(ctx context.Context, rel string, client litestream.ReplicaClient, h history, now time.Time) (bool, error) {
	var l1 ltx.TXID
	if f := h.newest(1); f != nil {
		l1 = f.MaxTXID
	}
	old := false
	for _, f := range h[0] {
		if f.MaxTXID > l1 {
			old = f.CreatedAt.Before(now.Add(-r.policy.l0Keep))
			break
		}
	}
	if !old {
		return false, nil
	}
	st := r.state(rel)
	st.op.Lock()
	defer st.op.Unlock()
	if r.ls.FindDB(r.path(rel)) != nil {
		return false, nil
	}
	_, err := litestream.NewCompactor(client, r.log).Compact(ctx, 1)
	if errors.Is(err, litestream.ErrNoCompaction) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("compact level 0: %w", err)
	}
	return true, nil
}

// snapshotHistory writes a snapshot of file rel's history up to TXID top:
// restored by Litestream's restore as `nah restore` runs it, checked whole
// by SQLite, and written as a level-9 file of TXIDs 1 to top, timed as its
// last transaction (so that a restore to a time takes it only after it).
func (r *Replicator) snapshotHistory(ctx context.Context, rel string, client litestream.ReplicaClient, top ltx.TXID) (*ltx.FileInfo, error) {
	plan, err := litestream.CalcRestorePlan(ctx, client, top, time.Time{}, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	last := plan[len(plan)-1]
	rc, err := client.OpenLTXFile(ctx, last.Level, last.MinTXID, last.MaxTXID, 0, ltx.HeaderSize)
	if err != nil {
		return nil, err
	}
	hdr, _, err := ltx.PeekHeader(rc)
	rc.Close()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(r.cfg.MetaDir, retainScratch)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "snapshot.db")
	removeDB(out)
	defer removeDB(out)
	rep := litestream.NewReplicaWithClient(nil, client)
	opt := litestream.NewRestoreOptions()
	opt.OutputPath, opt.TXID = out, top
	if err := rep.Restore(ctx, opt); err != nil {
		return nil, err
	}
	if err := checkSound(ctx, out); err != nil {
		return nil, err
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var dbh [100]byte
	if _, err := f.ReadAt(dbh[:], 0); err != nil {
		return nil, err
	}
	pageSize := uint32(binary.BigEndian.Uint16(dbh[16:]))
	if pageSize == 1 {
		pageSize = 65536
	}
	if pageSize < 512 || fi.Size()%int64(pageSize) != 0 {
		return nil, fmt.Errorf("restored %s: page size %d does not divide its %d bytes", rel, pageSize, fi.Size())
	}
	snap := ltx.Header{
		Version: ltx.Version, Flags: ltx.HeaderFlagNoChecksum, PageSize: pageSize,
		Commit: uint32(fi.Size() / int64(pageSize)), MinTXID: 1, MaxTXID: top, Timestamp: hdr.Timestamp,
	}
	spill := &spillFile{name: filepath.Join(dir, "snapshot.ltx.tmp"), buf: shipBufs.Get().(*bytes.Buffer)}
	defer spill.close()
	spill.buf.Reset()
	lock := ltx.LockPgno(pageSize)
	err = writeLTX(spill, snap, func(lw *ltxWriter) error {
		data := make([]byte, pageSize)
		for pgno := uint32(1); pgno <= snap.Commit; pgno++ {
			if pgno == lock {
				continue
			}
			if _, err := f.ReadAt(data, int64(pgno-1)*int64(pageSize)); err != nil {
				return err
			}
			if err := lw.page(pgno, data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	body, err := spill.reader()
	if err != nil {
		return nil, err
	}
	info, err := client.WriteLTXFile(ctx, litestream.SnapshotLevel, 1, top, body)
	if err != nil {
		return nil, err
	}
	r.snapshots.Add(1)
	return info, nil
}

// retainScratch is where snapshots are restored before they are written,
// under the local state.
const retainScratch = ".retain"

// pruneLocal removes the level-0 files of a file nobody watches from its
// local state (pruneLevel0), the target holding its history up to TXID
// onTarget.
func (r *Replicator) pruneLocal(rel string, onTarget ltx.TXID) error {
	st := r.state(rel)
	st.op.Lock()
	defer st.op.Unlock()
	if r.ls.FindDB(r.path(rel)) != nil {
		return nil
	}
	return r.pruneLevel0(rel, st, onTarget)
}

// pruneLevel0 removes from file rel's local level 0 every LTX file but
// the newest, which is all a ship and a take-up read, that the target
// holds (up to TXID onTarget or the file's replicated position): files
// past it wait for a catch-up to send them. Litestream removes its local
// copies only with its own level-0 retention, so a file it let go of kept
// them all, and the local state grew past the databases it copies. The
// caller holds st.op and the file is not watched.
func (r *Replicator) pruneLevel0(rel string, st *fileState, onTarget ltx.TXID) error {
	r.mu.Lock()
	held := max(onTarget, ltx.TXID(st.Replicated))
	r.mu.Unlock()
	level0 := filepath.Join(r.metaPath(rel), "ltx", "0")
	es, err := os.ReadDir(level0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	_, top, err := maxLTX(level0)
	if err != nil {
		return err
	}
	for _, e := range es {
		if _, hi, err := ltx.ParseFilename(e.Name()); err == nil && hi < top && hi <= held {
			if err := os.Remove(filepath.Join(level0, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}
