package backup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/internal/integrity"
)

// Databases lists every database the target can give back, as paths under
// the data directory: those with Litestream history and those in the newest
// complete sweep.
func Databases(ctx context.Context, t *Target) ([]string, error) {
	keys, err := t.store().list(ctx, ".")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if strings.HasPrefix(k, sweepPrefix+"/") {
			continue
		}
		// A history's files: <db>/ltx/<level>/<name>.ltx in a directory,
		// <db>/<level, four hex digits>/<name>.ltx on S3 (Litestream's
		// two layouts).
		if strings.HasSuffix(k, ".ltx") {
			d := path.Dir(path.Dir(k))
			if path.Base(d) == "ltx" {
				d = path.Dir(d)
			}
			seen[d] = true
		}
	}
	sweeps, err := listSweeps(ctx, t.store())
	if err != nil {
		return nil, err
	}
	for i := len(sweeps) - 1; i >= 0; i-- {
		if sweeps[i].complete {
			for f := range sweeps[i].files {
				seen[f] = true
			}
			break
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		if validRel(k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out, nil
}

// validRel says whether rel is a database path nah makes: directory.db or
// people/<id>/person.db with id of the root's exact shape, so that nothing
// read from a replica can climb out of a folder.
func validRel(rel string) bool { return nah.ValidDatabaseRel(rel) }

// ErrNothing is returned when the target holds nothing of a database for
// the time asked.
var ErrNothing = errors.New("no copy of this database on the replica")

// Where RestoreFile's copy came from (Restored.From).
const (
	FromHistory = "history"
	FromSweep   = "sweep"
)

// Restored says where RestoreFile's copy of one database came from and,
// when the Litestream history was there but did not restore to a sound
// database, why not and what the sweep's copy used instead costs.
type Restored struct {
	From    string    // FromHistory, FromSweep, or "" when no sound copy came back
	Sweep   string    // the sweep's stamp, when From is FromSweep
	SweepAt time.Time // when that sweep started: its copy is the file as it was then or a little later

	// HistoryErr is why the history did not give a sound database:
	// Litestream's restore failed, or SQLite's integrity check of its
	// result did. Nil when it did, or when the target holds no history of
	// the file for the time asked (then the sweep is the copy to use).
	HistoryErr error
	// HistoryTXID and HistoryAt are the newest position of the failed
	// history up to the time asked (its last transaction and that
	// transaction's time): what a sound history would have given back.
	// Zero when HistoryErr is nil or the history cannot even be listed.
	HistoryTXID uint64
	HistoryAt   time.Time
}

// String is where the copy came from, as the console shows it: "history"
// or "sweep <stamp>".
func (r Restored) String() string {
	if r.From == FromSweep {
		return FromSweep + " " + r.Sweep
	}
	return r.From
}

// Fallback says whether the copy is a sweep's taken because the history
// failed: the restore then lost what was written after the sweep.
func (r Restored) Fallback() bool { return r.From == FromSweep && r.HistoryErr != nil }

// Behind is how much older a fallback's sweep is than the newest position
// of the failed history: the writes of that span are lost. Zero when the
// copy is no fallback, the sweep is the newer, or the position is unknown.
func (r Restored) Behind() time.Duration {
	if !r.Fallback() || r.HistoryAt.IsZero() || !r.HistoryAt.After(r.SweepAt) {
		return 0
	}
	return r.HistoryAt.Sub(r.SweepAt)
}

// RestoreMaxBytes is the most RestoreFile writes of one database: a
// history or sweep copy that claims more is refused before it is written
// (an LTX snapshot of 4.5 MB whose header claimed 256 TiB had `nah
// restore` write 1.07 GB before it failed). A person's file is bounded by
// their quota (2 GiB by default) and people-1k's directory is 21 MB; `nah
// restore -max-file-bytes` states another bound.
const RestoreMaxBytes = 4 << 30

// ErrTooLarge is a restore refused because the copy would be larger than
// the bound it was given.
var ErrTooLarge = errors.New("larger than this restore allows")

// RestoreFile is RestoreFileWithin with RestoreMaxBytes.
func RestoreFile(ctx context.Context, t *Target, rel, out string, at time.Time) (Restored, error) {
	return RestoreFileWithin(ctx, t, rel, out, at, RestoreMaxBytes)
}

// RestoreFileWithin rebuilds rel at out (which must not exist) as it was
// at at (zero: newest), integrity-checked, writing at most limit bytes. A
// Litestream history that fails is reported in Restored.HistoryErr and the
// newest sound sweep copy at or before at is used; with none it returns an
// error (ErrNothing) and leaves no out.
func RestoreFileWithin(ctx context.Context, t *Target, rel, out string, at time.Time, limit int64) (Restored, error) {
	var res Restored
	if !validRel(rel) {
		return res, fmt.Errorf("not a database of nah: %q", rel)
	}
	if strings.ContainsAny(out, "?#") {
		return res, fmt.Errorf("restore to %q: the path may not hold ? or #", out)
	}
	herr := restoreHistory(ctx, t, rel, out, at, limit)
	if herr == nil {
		res.From = FromHistory
		return res, nil
	}
	removeDB(out)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if !noHistory(herr) {
		res.HistoryErr = herr
		res.HistoryTXID, res.HistoryAt = newestPosition(ctx, t, rel, at)
	}
	sweeps, err := sweepsFor(ctx, t, rel, at)
	if err != nil {
		return res, fmt.Errorf("%s: %w", rel, err)
	}
	var bad []string
	for _, sw := range sweeps {
		err := copyTo(ctx, t.store(), path.Join(sweepPrefix, sw.stamp, rel), out, limit)
		if err == nil {
			err = checkSound(ctx, out)
		}
		if err == nil {
			res.From, res.Sweep = FromSweep, sw.stamp
			res.SweepAt, _ = time.Parse(stampFormat, sw.stamp)
			return res, nil
		}
		removeDB(out)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		bad = append(bad, "the sweep of "+sw.stamp+": "+err.Error())
	}
	switch {
	case res.HistoryErr == nil && len(bad) == 0:
		return res, fmt.Errorf("%s: %w", rel, ErrNothing)
	case res.HistoryErr == nil:
		return res, fmt.Errorf("%s: no history, and no sweep's copy is sound (%s)", rel, strings.Join(bad, "; "))
	case len(bad) == 0:
		return res, fmt.Errorf("%s: the history does not restore to a sound database (%v), and no sweep holds a copy", rel, res.HistoryErr)
	}
	return res, fmt.Errorf("%s: the history does not restore to a sound database (%v), and no sweep's copy is sound either (%s)", rel, res.HistoryErr, strings.Join(bad, "; "))
}

// checkSound runs SQLite's full integrity check on the database at p,
// read-only, and says what it found first. The check's connection may
// leave an empty -wal and a -shm; they go.
func checkSound(ctx context.Context, p string) error {
	db, err := sql.Open("sqlite", "file:"+p+"?mode=ro")
	if err != nil {
		return err
	}
	err = integrity.Check(ctx, db, 0)
	db.Close()
	for _, q := range []string{p + "-wal", p + "-shm"} {
		if st, serr := os.Stat(q); serr == nil && (st.Size() == 0 || strings.HasSuffix(q, "-shm")) {
			os.Remove(q)
		}
	}
	return err
}

// removeDB removes a database file that failed, with its -wal and -shm.
func removeDB(p string) {
	for _, q := range []string{p, p + "-wal", p + "-shm"} {
		os.Remove(q)
	}
}

// sweepsFor lists the complete sweeps holding rel made at or before at
// (zero: any), newest first.
func sweepsFor(ctx context.Context, t *Target, rel string, at time.Time) ([]sweepInfo, error) {
	sweeps, err := listSweeps(ctx, t.store())
	if err != nil {
		return nil, err
	}
	var out []sweepInfo
	for i := len(sweeps) - 1; i >= 0; i-- {
		sw := sweeps[i]
		if !sw.complete || !sw.files[rel] {
			continue
		}
		if !at.IsZero() {
			st, _ := time.Parse(stampFormat, sw.stamp)
			if st.After(at) {
				continue
			}
		}
		out = append(out, sw)
	}
	return out, nil
}

// clearState removes Litestream's local state of one database: after a
// restore swapped the file, the old state describes a file that is gone.
func (r *Replicator) clearState(path string) error {
	rel, err := r.rel(path)
	if err != nil {
		return err
	}
	if r.ls.FindDB(path) != nil {
		return fmt.Errorf("replication: %s is still watched", rel)
	}
	r.mu.Lock()
	if st := r.files[rel]; st != nil {
		st.shipBase = nil // the next ship reads the (cleared) local state
	}
	r.mu.Unlock()
	return os.RemoveAll(r.metaPath(rel))
}

func (r *Replicator) metaPath(rel string) string {
	return r.cfg.MetaDir + string(os.PathSeparator) + strings.ReplaceAll(rel, "/", string(os.PathSeparator))
}
