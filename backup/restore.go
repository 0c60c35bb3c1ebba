package backup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/benbjohnson/litestream"
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
		if i := strings.Index(k, "/ltx/"); i > 0 {
			seen[k[:i]] = true
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
// people/<id>/person.db, with nothing that could climb out of a folder.
func validRel(rel string) bool {
	if rel == "directory.db" {
		return true
	}
	parts := strings.Split(rel, "/")
	if len(parts) != 3 || parts[0] != "people" || parts[2] != "person.db" {
		return false
	}
	id := parts[1]
	if id == "" || id == "." || id == ".." || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ErrNothing is returned when the target holds nothing of a database for
// the time asked.
var ErrNothing = errors.New("no copy of this database on the replica")

// RestoreFile rebuilds the database rel at out (which must not exist) as
// it was at at (zero: the newest state). It uses the Litestream history
// where there is one, checked with a full integrity check, and else the
// newest complete sweep made at or before at. It returns where the copy
// came from: "history" or "sweep <stamp>".
func RestoreFile(ctx context.Context, t *Target, rel, out string, at time.Time) (string, error) {
	if !validRel(rel) {
		return "", fmt.Errorf("not a database of nah: %q", rel)
	}
	client, err := t.client(rel)
	if err != nil {
		return "", err
	}
	r := litestream.NewReplicaWithClient(nil, client)
	opt := litestream.NewRestoreOptions()
	opt.OutputPath = out
	opt.Timestamp = at
	opt.IntegrityCheck = litestream.IntegrityCheckFull
	herr := r.Restore(ctx, opt)
	if herr == nil {
		return "history", nil
	}
	os.Remove(out)
	os.Remove(out + "-wal")
	os.Remove(out + "-shm")
	stamp, err := sweepFor(ctx, t, rel, at)
	if err != nil {
		// No history as old as at (the file was made later) is nothing
		// too, like no history at all; any other failure of the history
		// is the error to report.
		if errors.Is(err, ErrNothing) && !errors.Is(herr, litestream.ErrNoSnapshots) && !errors.Is(herr, litestream.ErrTxNotAvailable) && !errors.Is(herr, os.ErrNotExist) {
			return "", fmt.Errorf("%s: %w", rel, herr)
		}
		return "", fmt.Errorf("%s: %w", rel, err)
	}
	if err := copyTo(ctx, t.store(), path.Join(sweepPrefix, stamp, rel), out); err != nil {
		os.Remove(out)
		return "", fmt.Errorf("%s: from sweep %s: %w", rel, stamp, err)
	}
	if !errors.Is(herr, litestream.ErrNoSnapshots) && !errors.Is(herr, litestream.ErrTxNotAvailable) && !errors.Is(herr, os.ErrNotExist) {
		// The history is there but failed: the sweep's copy may be up to a
		// day older than the history would have been. Say so.
		slog.Warn("restore: the Litestream history failed, the sweep's copy was used", "path", rel, "sweep", stamp, "err", herr)
	}
	return "sweep " + stamp, nil
}

// sweepFor finds the newest complete sweep holding rel made at or before
// at (zero: any).
func sweepFor(ctx context.Context, t *Target, rel string, at time.Time) (string, error) {
	sweeps, err := listSweeps(ctx, t.store())
	if err != nil {
		return "", err
	}
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
		return sw.stamp, nil
	}
	return "", ErrNothing
}

// ClearState removes Litestream's local state of one database: after a
// restore swapped the file, the old state describes a file that is gone.
func (r *Replicator) ClearState(path string) error {
	rel, err := r.rel(path)
	if err != nil {
		return err
	}
	if r.ls.FindDB(path) != nil {
		return fmt.Errorf("replication: %s is still watched", rel)
	}
	return os.RemoveAll(r.metaPath(rel))
}

func (r *Replicator) metaPath(rel string) string {
	return r.cfg.MetaDir + string(os.PathSeparator) + strings.ReplaceAll(rel, "/", string(os.PathSeparator))
}
