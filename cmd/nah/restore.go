package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
	"github.com/nah-app/nah/ui"
)

const restoreUsage = "usage: nah restore -from URL -to DIR [-time RFC3339] [-workers N] [-max-file-bytes SIZE]"

// restoreResult is what a whole-server restore did, for its summary.
type restoreResult struct {
	files, history, sweep, skipped int
	bytes                          int64
	sweeps                         map[string]int // sweep stamp: files from it
	took                           time.Duration
	media                          int // media files copied from the target's mirror
	mediaBytes                     int64

	fallbacks []fileOutcome // from a sweep because their history failed: what they wrote since is lost
	noHistory []fileOutcome // from a sweep, the target holding no history of them
	failed    []fileOutcome // no sound copy: a placeholder and a marker (store.MarkRestoreFailed)
}

// fileOutcome is one database's restore.
type fileOutcome struct {
	rel string
	res backup.Restored
	err error
}

// restoreExit is the exit status of a restore that finished but lost
// something it knows of: 1 when a person's file could not be restored (it
// is marked), restoreExitOlder when every file came back but some only
// from a sweep older than their history. Either way the directory opens.
type restoreExit struct {
	code int
	msg  string
}

func (e restoreExit) Error() string { return e.msg }

// restoreExitOlder: every file restored, some from an older sweep.
const restoreExitOlder = 3

// restoreCmd is `nah restore`: it rebuilds a whole data directory from a
// replica target (NAH_REPLICA_URL's forms), every database from its
// Litestream history or else from the newest complete sweep, as of -time
// when given, a few at a time, each checked whole by SQLite before the
// restore says it is done. It only ever writes into a new or empty
// directory: restoring over a live data directory is never what anyone
// means.
func restoreCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	from := fs.String("from", "", "the replica: a path, file:///path or s3://bucket/prefix")
	to := fs.String("to", "", "the data directory to make")
	at := fs.String("time", "", "restore the server as it was at this moment (RFC 3339)")
	workers := fs.Int("workers", min(8, 2*runtime.GOMAXPROCS(0)), "files restored at once")
	maxFile := fs.String("max-file-bytes", "4GiB", "the largest database restored: a copy claiming more is refused unwritten")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 || *from == "" || *to == "" {
		return usageError{restoreUsage}
	}
	if *workers < 1 || *workers > 64 {
		return usageError{fmt.Sprintf("-workers %d: want 1 to 64", *workers)}
	}
	limit, err := parseBytes(*maxFile)
	if err != nil || limit <= 0 {
		return usageError{fmt.Sprintf("-max-file-bytes %q: a size such as 4GiB", *maxFile)}
	}
	var when time.Time
	if *at != "" {
		var err error
		if when, err = time.Parse(time.RFC3339, *at); err != nil {
			return usageError{fmt.Sprintf("-time %q: not an RFC 3339 time such as 2026-11-30T07:00:00Z", *at)}
		}
	}
	t, err := replicaFrom(ctx, *from, getenv)
	if err != nil {
		return err
	}
	if err := emptyDataDir(*to); err != nil {
		return err
	}
	// Before Litestream's restores open SQLite (store.IntegrityCheck needs
	// the settings), and with Litestream's chatter (a line a file) kept to
	// warnings.
	if err := store.ConfigureSQLite(); err != nil {
		return err
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	res, err := restoreAll(ctx, t, *to, when, *workers, limit, stderr)
	if err != nil {
		return err
	}
	return summarise(stdout, res, *to, when)
}

// summarise prints what a restore did and returns its exit: the files and
// where they came from, then, loudly and by name, every file that came back
// older than its history (with the sweep's time and how far behind the
// history's newest position it is) and every file that did not come back.
func summarise(w io.Writer, res restoreResult, to string, when time.Time) error {
	fmt.Fprintf(w, "Restored %d %s (%.1f MB) into %s in %.1f s: %d from Litestream history, %d from sweeps",
		res.files, plural(res.files, "file", "files"), float64(res.bytes)/1e6, to, res.took.Seconds(), res.history, res.sweep)
	if len(res.sweeps) > 0 {
		var ss []string
		for s, n := range res.sweeps {
			ss = append(ss, fmt.Sprintf("%s: %d", s, n))
		}
		sort.Strings(ss)
		fmt.Fprintf(w, " (%s)", strings.Join(ss, ", "))
	}
	fmt.Fprintln(w, ".")
	if res.media > 0 {
		fmt.Fprintf(w, "Restored %d media %s (%.1f MB).\n", res.media, plural(res.media, "file", "files"), float64(res.mediaBytes)/1e6)
	}
	if res.skipped > 0 {
		fmt.Fprintf(w, "Left out %d %s with no copy as old as %s (made later).\n", res.skipped, plural(res.skipped, "file", "files"), when.Format(time.RFC3339))
	}
	for _, f := range res.noHistory {
		fmt.Fprintf(w, "%s: from the sweep of %s (the replica holds no Litestream history of it).\n", f.rel, ui.WhenT(f.res.SweepAt))
	}
	if n := len(res.fallbacks); n > 0 {
		fmt.Fprintf(w, "\nOLDER THAN THEIR HISTORY: %d %s came back from a nightly sweep because the Litestream history does not restore to a sound database. What was written after the sweep is lost:\n",
			n, plural(n, "file", "files"))
		for _, f := range res.fallbacks {
			fmt.Fprintf(w, "  %s: from the sweep of %s, %s; the history: %v\n", f.rel, ui.WhenT(f.res.SweepAt), behind(f.res), f.res.HistoryErr)
		}
	}
	if n := len(res.failed); n > 0 {
		fmt.Fprintf(w, "\nNOT RESTORED: %d %s could not be restored: no sound copy on the replica. Each is left as a placeholder that the server lists as needing attention (Overview, and the person's page); the person gets 503 until a sound file is put in its place:\n",
			n, plural(n, "person", "people"))
		for _, f := range res.failed {
			fmt.Fprintf(w, "  %v\n", f.err)
		}
	}
	fmt.Fprintln(w)
	switch {
	case len(res.failed) > 0:
		fmt.Fprintf(w, "The restore is INCOMPLETE: %d of %d people are not restored. The server starts on it (NAH_DATA_DIR=%s nah serve) without them.\n", len(res.failed), res.files+len(res.failed)-1, to)
		return restoreExit{1, fmt.Sprintf("%d %s not restored (named above)", len(res.failed), plural(len(res.failed), "person", "people"))}
	case len(res.fallbacks) > 0:
		fmt.Fprintf(w, "Every file passed SQLite's integrity check, but %d came back OLDER than their history (named above). Start the server on it with NAH_DATA_DIR=%s nah serve\n", len(res.fallbacks), to)
		return restoreExit{restoreExitOlder, fmt.Sprintf("%d %s restored from a sweep older than their history (named above)", len(res.fallbacks), plural(len(res.fallbacks), "file", "files"))}
	}
	fmt.Fprintf(w, "Every file passed SQLite's integrity check. Start the server on it with NAH_DATA_DIR=%s nah serve\n", to)
	return nil
}

// behind says what a fallback cost: how far the sweep is behind the
// history's newest position, or that it is not.
func behind(r backup.Restored) string {
	if r.HistoryAt.IsZero() {
		return "the history's newest position unknown (it cannot be listed)"
	}
	pos := fmt.Sprintf("the history's newest position (transaction %d, %s)", r.HistoryTXID, ui.WhenT(r.HistoryAt))
	if d := r.Behind(); d > 0 {
		return fmt.Sprintf("%s behind %s", ui.Duration(d), pos)
	}
	return "no older than " + pos + ": nothing known lost"
}

// replicaFrom parses -from as NAH_REPLICA_URL's forms and, for S3, checks
// that the bucket answers: a usage error names the flag either way.
func replicaFrom(ctx context.Context, from string, getenv func(string) string) (*backup.Target, error) {
	t, err := backup.ParseTarget(from, getenv)
	if err != nil {
		return nil, usageError{fmt.Sprintf("-from %q: %v", from, err)}
	}
	if t.IsS3() {
		ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := t.Init(ictx); err != nil {
			return nil, usageError{fmt.Sprintf("-from %q: %v", from, err)}
		}
	}
	return t, nil
}

// emptyDataDir checks that dir is missing or empty; restoreAll makes it.
func emptyDataDir(dir string) error {
	es, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return usageError{fmt.Sprintf("-to %s: %v", dir, err)}
	case len(es) > 0:
		return usageError{fmt.Sprintf("-to %s is not empty: restore into a new or empty directory (nothing was written)", dir)}
	}
	return nil
}

// restoreAll restores every database of t into dir with the given number
// of workers. A person's file that cannot be restored is marked and the
// others go on; the directory database failing stops the whole restore,
// since without it nobody can sign in and no file is anyone's.
func restoreAll(ctx context.Context, t *backup.Target, dir string, when time.Time, workers int, limit int64, stderr io.Writer) (restoreResult, error) {
	start := time.Now()
	res := restoreResult{sweeps: map[string]int{}}
	rels, err := backup.Databases(ctx, t)
	if err != nil {
		return res, fmt.Errorf("read the replica at %s: %w", t.Redacted(), err)
	}
	if len(rels) == 0 {
		return res, fmt.Errorf("nothing to restore: %s holds no database of nah", t.Redacted())
	}
	hasDir := false
	for _, r := range rels {
		hasDir = hasDir || r == nah.DirectoryRel
	}
	if !hasDir {
		return res, fmt.Errorf("%s holds no %s (the accounts of everyone): nothing restored", t.Redacted(), nah.DirectoryRel)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return res, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return res, err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bar := newProgress(stderr, len(rels))
	jobs := make(chan string)
	var (
		mu     sync.Mutex
		errs   []error
		dirErr error
		wg     sync.WaitGroup
		have   = map[string]bool{} // restored, or marked
	)
	for range min(workers, len(rels)) {
		wg.Go(func() {
			for rel := range jobs {
				o, n, err := restoreOne(ctx, t, dir, rel, when, limit)
				mu.Lock()
				switch {
				case errors.Is(err, backup.ErrNothing) && !when.IsZero():
					res.skipped++
				case err != nil && ctx.Err() != nil:
					// Stopped: the restore as a whole reports it.
				case err != nil && rel == nah.DirectoryRel:
					dirErr = err
					cancel()
				case err != nil:
					errs = append(errs, err) // the marker could not be written
					cancel()
				case o.err != nil:
					res.failed = append(res.failed, o)
					have[rel] = true
				default:
					have[rel] = true
					res.files++
					res.bytes += n
					switch {
					case o.res.From == backup.FromHistory:
						res.history++
					case o.res.Fallback():
						res.fallbacks = append(res.fallbacks, o)
					default:
						res.noHistory = append(res.noHistory, o)
					}
					if o.res.From == backup.FromSweep {
						res.sweep++
						res.sweeps[o.res.Sweep]++
					}
				}
				bar.add(n)
				mu.Unlock()
			}
		})
	}
feed:
	for _, rel := range rels {
		select {
		case jobs <- rel:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	bar.finish()
	res.took = time.Since(start)
	for _, l := range [][]fileOutcome{res.fallbacks, res.noHistory, res.failed} {
		sort.Slice(l, func(i, j int) bool { return l[i].rel < l[j].rel })
	}
	if dirErr != nil {
		return res, fmt.Errorf("%s, the accounts of everyone, could not be restored, and without it none of the rest can be used (%s is incomplete: remove it): %w", nah.DirectoryRel, dir, dirErr)
	}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("restore failed (%s is incomplete: remove it before trying again): %w", dir, err)
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("restore stopped (%s is incomplete: remove it before trying again): %w", dir, err)
	}
	if res.skipped > 0 && res.files+len(res.failed) == 0 {
		return res, fmt.Errorf("nothing on %s is as old as %s", t.Redacted(), when.Format(time.RFC3339))
	}
	if err := markMissing(ctx, t, dir, when, have, &res); err != nil {
		return res, fmt.Errorf("restore failed (%s is incomplete: remove it before trying again): %w", dir, err)
	}
	n, bytes, err := restoreMedia(ctx, t, dir, workers)
	res.media, res.mediaBytes = n, bytes
	res.took = time.Since(start)
	if err != nil {
		return res, fmt.Errorf("restore of media failed (%s is incomplete: remove it before trying again): %w", dir, err)
	}
	return res, nil
}

// markMissing marks, as restoreOne marks a file with no sound copy, every
// person of the restored directory whose file the replica holds nothing of
// (its history and sweeps deleted, say): else they would read as someone
// with nothing, and their next post would start an empty file.
func markMissing(ctx context.Context, t *backup.Target, dir string, when time.Time, have map[string]bool, res *restoreResult) error {
	ids, err := store.PeopleOf(ctx, filepath.Join(dir, nah.DirectoryRel))
	if err != nil {
		return err
	}
	why := "the replica holds no copy of this person's file"
	if !when.IsZero() {
		why += " as old as " + when.Format(time.RFC3339)
	}
	for _, id := range ids {
		rel := nah.PersonRel(id)
		if have[rel] {
			continue
		}
		if err := store.MarkRestoreFailed(dir, id, fmt.Sprintf("on %s, from %s: %s", ui.WhenT(time.Now()), t.Redacted(), why)); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		res.failed = append(res.failed, fileOutcome{rel: rel, err: fmt.Errorf("%s: %s", rel, why)})
	}
	sort.Slice(res.failed, func(i, j int) bool { return res.failed[i].rel < res.failed[j].rel })
	return nil
}

// restoreMedia copies the media mirrored on the target into dir, for the
// people whose file was restored (someone left out by -time has no folder
// for them). A media file uploaded after -time has no row and is removed
// at its owner's first use of media; one deleted before the last sweep is
// no longer on the target.
func restoreMedia(ctx context.Context, t *backup.Target, dir string, workers int) (int, int64, error) {
	rels, err := backup.MediaFiles(ctx, t)
	if err != nil {
		return 0, 0, err
	}
	var (
		mu    sync.Mutex
		n     int
		bytes int64
		errs  []error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, workers)
	)
	for _, rel := range rels {
		out := filepath.Join(dir, filepath.FromSlash(rel))
		owner, _ := nah.SplitMediaRel(rel)
		if owner == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(nah.PersonRel(owner)))); err != nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := os.MkdirAll(filepath.Dir(out), 0o700)
			if err == nil {
				err = backup.RestoreMedia(ctx, t, rel, out)
			}
			st, serr := os.Stat(out)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || serr != nil {
				errs = append(errs, fmt.Errorf("%s: %w", rel, errors.Join(err, serr)))
				return
			}
			n++
			bytes += st.Size()
		})
	}
	wg.Wait()
	return n, bytes, errors.Join(errs...)
}

// restoreOne restores database rel into dir, private to its owner,
// at most limit bytes, checked whole (backup.RestoreFileWithin) and for our schema,
// and returns what came of it and its
// size. A person's file with no sound copy is left as a placeholder with a
// marker (store.MarkRestoreFailed) and reported in the outcome's err. The
// error returned is for what stops the restore (the directory failing, a
// marker that cannot be written), or ErrNothing for a file with no copy as
// old as when, which leaves nothing behind.
func restoreOne(ctx context.Context, t *backup.Target, dir, rel string, when time.Time, limit int64) (fileOutcome, int64, error) {
	o := fileOutcome{rel: rel}
	out := filepath.Join(dir, filepath.FromSlash(rel))
	folder := filepath.Dir(out)
	if err := os.MkdirAll(folder, 0o700); err != nil {
		return o, 0, err
	}
	o.res, o.err = backup.RestoreFileWithin(ctx, t, rel, out, when, limit)
	if o.err == nil {
		// Sound is not enough: whoever can write the bucket could have left
		// a trigger or a view, which would run on the server's own writes.
		check := store.CheckRestoredCopy
		if rel == nah.DirectoryRel {
			check = store.CheckRestoredDirectory
		}
		if err := check(ctx, out); err != nil {
			o.err = fmt.Errorf("%s: %w", rel, err)
		}
	}
	switch {
	case o.err == nil:
	case ctx.Err() != nil:
		return o, 0, ctx.Err()
	case rel == nah.DirectoryRel:
		return o, 0, o.err
	case errors.Is(o.err, backup.ErrNothing) && !when.IsZero():
		os.Remove(folder) // only if empty
		return o, 0, o.err
	default:
		why := fmt.Sprintf("on %s, from %s: %v", ui.WhenT(time.Now()), t.Redacted(), o.err)
		if err := store.MarkRestoreFailed(dir, filepath.Base(folder), why); err != nil {
			return o, 0, fmt.Errorf("%s: %w (and its marker: %w)", rel, o.err, err)
		}
		return o, 0, nil
	}
	if err := os.Chmod(out, 0o600); err != nil {
		return o, 0, err
	}
	st, err := os.Stat(out)
	if err != nil {
		return o, 0, err
	}
	return o, st.Size(), nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
