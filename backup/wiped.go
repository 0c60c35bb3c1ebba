package backup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// targetMark is a small object at the target's root that replication
// writes once and looks for at each catch-up round (one stat, or one GET
// on S3): gone, the target was emptied under a running server (an
// operator clearing the replica, a new empty bucket at the same URL).
// Litestream keeps a watched file's replica position in memory and
// carries on from it (v0.5.18 reads it from the target only when it does
// not know it), and a ship in step does the same: every sync succeeds,
// health says in step, and the target holds LTX files nothing restores
// from. The module is not patched; CheckTarget starts those files afresh.
const targetMark = "nah-replica"

const targetMarkText = "This folder is a replica written by nah: it says the replica was not emptied since.\n"

// CheckTarget looks for the target's mark and writes it when it is
// missing in a run that has not seen it yet. Once a mark this run saw is
// gone, every file (those replication has, and those databases lists:
// every database of the data directory, read only then) is started afresh
// (startAfresh), round after round, until a round finds each one's
// history whole on the target; only then is the mark written again, so
// that a wipe still going on (a bucket emptied object by object) which
// deletes what a round wrote is found by the next. It returns whether the
// target is being replicated afresh.
func (r *Replicator) CheckTarget(ctx context.Context, databases func(context.Context) ([]string, error)) (bool, error) {
	blobs := r.cfg.Target.store()
	if blobs == nil {
		return false, errors.New("replica target not initialised")
	}
	r.mu.Lock()
	recovering, marked := !r.emptied.IsZero(), r.marked
	r.mu.Unlock()
	if !recovering {
		rc, _, err := blobs.open(ctx, targetMark)
		switch {
		case err == nil:
			rc.Close()
			r.mu.Lock()
			r.marked = true
			r.mu.Unlock()
			return false, nil
		case !errors.Is(err, fs.ErrNotExist):
			return false, err
		case !marked:
			err := r.putMark(ctx)
			return false, err
		}
		rels := []string{}
		if databases != nil {
			if rels, err = databases(ctx); err != nil {
				r.log.Warn("replication: list the databases to replicate afresh", "err", err)
			}
		}
		r.mu.Lock()
		for rel := range r.files {
			rels = append(rels, rel)
		}
		r.mu.Unlock()
		for _, db := range r.ls.DBs() {
			if rel, err := r.rel(db.Path()); err == nil {
				rels = append(rels, rel)
			}
		}
		slices.Sort(rels)
		rels = slices.Compact(rels)
		r.log.Warn("replication: the target was emptied (its mark is gone): every file is replicated afresh", "files", len(rels))
		r.mu.Lock()
		r.emptied = time.Now()
		r.afresh = make(map[string]bool, len(rels))
		for _, rel := range rels {
			r.afresh[rel] = true
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	todo := make([]string, 0, len(r.afresh))
	for rel := range r.afresh {
		todo = append(todo, rel)
	}
	r.mu.Unlock()
	slices.Sort(todo)
	var firstErr error
	for _, rel := range todo {
		if ctx.Err() != nil {
			return true, ctx.Err()
		}
		whole, err := r.startAfresh(ctx, rel)
		if err != nil {
			r.log.Warn("replication: replicate afresh", "path", rel, "err", err)
			if firstErr == nil {
				firstErr = err
			}
		}
		if whole {
			r.mu.Lock()
			delete(r.afresh, rel)
			r.mu.Unlock()
		}
	}
	r.mu.Lock()
	left := len(r.afresh)
	r.mu.Unlock()
	if left > 0 {
		return true, firstErr
	}
	if err := r.putMark(ctx); err != nil {
		return true, err
	}
	r.mu.Lock()
	r.emptied = time.Time{}
	r.mu.Unlock()
	r.log.Warn("replication: every file is on the emptied target again")
	return false, firstErr
}

func (r *Replicator) putMark(ctx context.Context) error {
	if err := r.cfg.Target.store().put(ctx, targetMark, strings.NewReader(targetMarkText), int64(len(targetMarkText))); err != nil {
		return err
	}
	r.mu.Lock()
	r.marked = true
	r.mu.Unlock()
	return nil
}

// Emptied is when the target was found emptied under the server, while
// its files are being replicated afresh (zero: not now).
func (r *Replicator) Emptied() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.emptied
}

// afreshErr is the state of a file not watched whose fragments on an
// emptied target were deleted, until its next ship or take-up.
const afreshErr = "the target lost this file's history (emptied under the server): it is replicated afresh"

// startAfresh says whether file rel's history on the target is whole (an
// LTX file of some level begins at TXID 1), and if not makes it so: a
// restore plan starts at the newest snapshot and reads only what follows,
// so a watched file gets a snapshot of where it is now, and what is below
// it is left to the retention policy. A file not watched has nothing to
// read a snapshot through here: its fragments are deleted (nothing
// restores from them) and its state cleared, so that its next ship,
// which the catch-up loop brings (the file is behind with afreshErr),
// finds target and local state empty and ships a snapshot; it is not
// listed again until then.
func (r *Replicator) startAfresh(ctx context.Context, rel string) (bool, error) {
	if _, err := os.Stat(r.path(rel)); errors.Is(err, fs.ErrNotExist) {
		return true, nil // deleted since (its purge forgets the rest)
	}
	r.retainMu.Lock()
	defer r.retainMu.Unlock()
	st := r.state(rel)
	st.op.Lock()
	defer st.op.Unlock()
	db := r.ls.FindDB(r.path(rel))
	r.mu.Lock()
	waiting := db == nil && st.Err == afreshErr
	r.mu.Unlock()
	if waiting {
		return false, nil
	}
	client, err := r.cfg.Target.client(rel)
	if err != nil {
		return false, err
	}
	if whole, err := wholeHistory(ctx, client); err != nil || whole {
		return whole, err
	}
	// What is there restores to nothing, or short of its newest file (a
	// file carried on from an old position, then started again): deleted
	// first, so that the snapshot is the history's start and its end.
	if err := client.DeleteAll(ctx); err != nil {
		return false, err
	}
	if db != nil {
		info, err := db.Snapshot(ctx)
		if err != nil {
			return false, r.failed(rel, fmt.Errorf("snapshot on the emptied target: %w", err))
		}
		// The newest level-0 file too: it is the replica's position for
		// Litestream (after a failed sync it reads it from level 0 alone,
		// and with none asks for a TXID 1 its local state no longer has,
		// failing every sync until the file is taken up again) and for a
		// ship after the let-go, which would otherwise start the TXIDs
		// again at 1 below the snapshot, and restores would stop at it.
		f, err := os.Open(db.LTXPath(0, info.MaxTXID, info.MaxTXID))
		if err != nil {
			return false, r.failed(rel, fmt.Errorf("the newest local LTX file on the emptied target: %w", err))
		}
		_, err = client.WriteLTXFile(ctx, 0, info.MaxTXID, info.MaxTXID, f)
		f.Close()
		if err != nil {
			return false, r.failed(rel, err)
		}
		if db.Replica != nil {
			db.Replica.SetPos(ltx.Pos{TXID: info.MaxTXID})
		}
		r.historyGrew(rel)
		return false, nil // whole once the next round finds it so
	}
	r.mu.Lock()
	st.shipBase, st.repaired, st.Err = nil, false, afreshErr
	r.mu.Unlock()
	return false, nil
}

// wholeHistory says whether a restore of the newest position reads a
// history from its start to its newest file, by the plan a restore makes.
func wholeHistory(ctx context.Context, client litestream.ReplicaClient) (bool, error) {
	h, err := readHistory(ctx, client)
	if err != nil {
		return false, err
	}
	top := h.maxTXID()
	if top == 0 {
		return false, nil
	}
	plan, err := litestream.CalcRestorePlan(ctx, client, 0, time.Time{}, slog.New(slog.DiscardHandler))
	switch {
	case errors.Is(err, litestream.ErrTxNotAvailable), err != nil && strings.Contains(err.Error(), "non-contiguous"):
		return false, nil
	case err != nil:
		return false, err
	}
	return plan[0].MinTXID == 1 && plan[len(plan)-1].MaxTXID == top, nil
}
