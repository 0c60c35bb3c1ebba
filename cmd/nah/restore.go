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
	"strings"
	"sync"
	"time"

	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
)

const restoreUsage = "usage: nah restore -from URL -to DIR [-time RFC3339] [-workers N]"

// restoreResult is what a whole-server restore did, for its summary.
type restoreResult struct {
	files, history, sweep, skipped int
	bytes                          int64
	sweeps                         map[string]int // sweep stamp: files from it
	took                           time.Duration
	media                          int // media files copied from the target's mirror
	mediaBytes                     int64
}

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
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 || *from == "" || *to == "" {
		return usageError{restoreUsage}
	}
	if *workers < 1 || *workers > 64 {
		return usageError{fmt.Sprintf("-workers %d: want 1 to 64", *workers)}
	}
	var when time.Time
	if *at != "" {
		var err error
		if when, err = time.Parse(time.RFC3339, *at); err != nil {
			return usageError{fmt.Sprintf("-time %q: not an RFC 3339 time such as 2026-11-30T07:00:00Z", *at)}
		}
	}
	t, err := backup.ParseTarget(*from, getenv)
	if err != nil {
		return usageError{fmt.Sprintf("-from %q: %v", *from, err)}
	}
	if t.IsS3() {
		ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := t.Init(ictx)
		cancel()
		if err != nil {
			return usageError{fmt.Sprintf("-from %q: %v", *from, err)}
		}
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
	res, err := restoreAll(ctx, t, *to, when, *workers, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Restored %d %s (%.1f MB) into %s in %.1f s: %d from Litestream history, %d from sweeps",
		res.files, plural(res.files, "file", "files"), float64(res.bytes)/1e6, *to, res.took.Seconds(), res.history, res.sweep)
	if len(res.sweeps) > 0 {
		var ss []string
		for s, n := range res.sweeps {
			ss = append(ss, fmt.Sprintf("%s: %d", s, n))
		}
		fmt.Fprintf(stdout, " (%s)", strings.Join(ss, ", "))
	}
	fmt.Fprintln(stdout, ".")
	if res.media > 0 {
		fmt.Fprintf(stdout, "Restored %d media %s (%.1f MB).\n", res.media, plural(res.media, "file", "files"), float64(res.mediaBytes)/1e6)
	}
	if res.skipped > 0 {
		fmt.Fprintf(stdout, "Left out %d %s with no copy as old as %s (made later).\n", res.skipped, plural(res.skipped, "file", "files"), when.Format(time.RFC3339))
	}
	fmt.Fprintf(stdout, "Every file passed SQLite's integrity check. Start the server on it with NAH_DATA_DIR=%s nah serve\n", *to)
	return nil
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
// of workers. The first failure stops the others.
func restoreAll(ctx context.Context, t *backup.Target, dir string, when time.Time, workers int, stderr io.Writer) (restoreResult, error) {
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
		hasDir = hasDir || r == store.DirectoryRel
	}
	if !hasDir {
		return res, fmt.Errorf("%s holds no %s (the accounts of everyone): nothing restored", t.Redacted(), store.DirectoryRel)
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
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for range min(workers, len(rels)) {
		wg.Go(func() {
			for rel := range jobs {
				src, n, err := restoreOne(ctx, t, dir, rel, when)
				mu.Lock()
				switch {
				case errors.Is(err, backup.ErrNothing) && !when.IsZero():
					res.skipped++
				case err != nil:
					if ctx.Err() == nil || !errors.Is(err, context.Canceled) {
						errs = append(errs, err)
					}
					cancel()
				case src == "history":
					res.history++
				default:
					res.sweep++
					res.sweeps[strings.TrimPrefix(src, "sweep ")]++
				}
				if err == nil {
					res.files++
					res.bytes += n
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
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("restore failed (%s is incomplete: remove it before trying again): %w", dir, err)
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("restore stopped (%s is incomplete: remove it before trying again): %w", dir, err)
	}
	if res.skipped > 0 && res.history+res.sweep == 0 {
		return res, fmt.Errorf("nothing on %s is as old as %s", t.Redacted(), when.Format(time.RFC3339))
	}
	n, bytes, err := restoreMedia(ctx, t, dir, workers)
	res.media, res.mediaBytes = n, bytes
	res.took = time.Since(start)
	if err != nil {
		return res, fmt.Errorf("restore of media failed (%s is incomplete: remove it before trying again): %w", dir, err)
	}
	return res, nil
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
		person := filepath.Dir(filepath.Dir(out))
		if _, err := os.Stat(filepath.Join(person, "person.db")); err != nil {
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

// restoreOne restores database rel into dir, private to its owner, and
// checks it whole. It returns where the copy came from and its size; a
// file with no copy as old as when leaves nothing behind.
func restoreOne(ctx context.Context, t *backup.Target, dir, rel string, when time.Time) (string, int64, error) {
	out := filepath.Join(dir, filepath.FromSlash(rel))
	folder := filepath.Dir(out)
	if err := os.MkdirAll(folder, 0o700); err != nil {
		return "", 0, err
	}
	src, err := backup.RestoreFile(ctx, t, rel, out, when)
	if err != nil {
		if folder != dir {
			os.Remove(folder) // only if empty
		}
		return "", 0, err
	}
	if err := os.Chmod(out, 0o600); err != nil {
		return "", 0, err
	}
	// A file from the history was checked whole by Litestream's restore
	// (a full integrity check, backup.RestoreFile); a sweep's copy is
	// checked here. Checking twice cost a quarter of a whole restore.
	if src != "history" {
		if err := store.IntegrityCheck(ctx, out); err != nil {
			return "", 0, fmt.Errorf("%s (from %s): %w", rel, src, err)
		}
	}
	// The check's read-only connection may leave an empty -wal and -shm.
	for _, q := range []string{out + "-wal", out + "-shm"} {
		if st, err := os.Stat(q); err == nil && (st.Size() == 0 || strings.HasSuffix(q, "-shm")) {
			os.Remove(q)
		}
	}
	st, err := os.Stat(out)
	if err != nil {
		return "", 0, err
	}
	return src, st.Size(), nil
}

// progress shows how far a restore is: a bar redrawn in place on a
// terminal, else a line at every tenth of the files.
type progress struct {
	w        io.Writer
	terminal bool
	total    int
	done     int
	bytes    int64
	start    time.Time
	drawn    time.Time
	tenth    int
}

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, terminal: isTerminal(w), total: total, start: time.Now()}
}

// isTerminal says whether w is a character device (a terminal), not a
// file or a pipe.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// add counts one more file of n bytes; the caller serialises calls.
func (p *progress) add(n int64) {
	p.done++
	p.bytes += n
	if p.terminal {
		if now := time.Now(); now.Sub(p.drawn) >= 100*time.Millisecond || p.done == p.total {
			p.drawn = now
			const width = 30
			full := width * p.done / p.total
			fmt.Fprintf(p.w, "\r[%s%s] %d/%d files, %.1f MB, %.1f s", strings.Repeat("#", full), strings.Repeat(".", width-full),
				p.done, p.total, float64(p.bytes)/1e6, time.Since(p.start).Seconds())
		}
		return
	}
	if t := 10 * p.done / p.total; t > p.tenth {
		p.tenth = t
		fmt.Fprintf(p.w, "restore: %d%% (%d/%d files, %.1f MB, %.1f s)\n", 10*t, p.done, p.total, float64(p.bytes)/1e6, time.Since(p.start).Seconds())
	}
}

func (p *progress) finish() {
	if p.terminal && p.done > 0 {
		fmt.Fprintln(p.w)
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
