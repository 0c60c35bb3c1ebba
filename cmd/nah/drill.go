package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
)

// newDrill is the serving process's restore drill (backup/drill.go): every
// NAH_DRILL_EVERY, and whenever the console asks, a sample of the live
// files restored from the replica and compared with them. Its scratch
// copies, state and kept evidence are under the data directory's
// replication folder.
func newDrill(cfg config, s *store.Store, r *backup.Replicator, log *slog.Logger) *backup.Drill {
	return &backup.Drill{
		Target: cfg.ReplicaTarget, Repl: r, DataDir: cfg.Store.Dir, Source: s, Files: s,
		Dir:   filepath.Join(cfg.Store.Dir, filepath.FromSlash(nah.DrillRel)),
		Every: cfg.DrillEvery,
		Log:   log,
	}
}

const restoreCheckUsage = "usage: nah restore -check -from URL -data DIR"

// restoreCheckCmd is `nah restore -check -from URL -data DIR`: the drill's
// comparison of every database of data directory DIR (a stopped server's,
// or a running one's: its files are only read) with what the replica
// restores, and of the newest sweep's copies and the mirrored media. It
// prints every difference and exits 1 on any.
func restoreCheckCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Bool("check", false, "compare the replica with a data directory")
	from := fs.String("from", "", "the replica: a path, file:///path or s3://bucket/prefix")
	data := fs.String("data", "", "the data directory to compare with")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 || *from == "" || *data == "" {
		return usageError{restoreCheckUsage}
	}
	t, err := replicaFrom(ctx, *from, getenv)
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(*data)
	if err != nil {
		return usageError{fmt.Sprintf("-data %q: %v", *data, err)}
	}
	if _, err := os.Stat(filepath.Join(dir, nah.DirectoryRel)); err != nil {
		return usageError{fmt.Sprintf("-data %q: not a data directory: %v", *data, err)}
	}
	if err := store.ConfigureSQLite(); err != nil {
		return err
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	scratch, err := os.MkdirTemp("", "nah-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	d := &backup.Drill{Target: t, DataDir: dir, All: true, Dir: scratch, Source: store.AtRest{Dir: dir}}
	r, err := d.Once(ctx)
	if err != nil {
		return err
	}
	for _, f := range r.Failures {
		fmt.Fprintf(stdout, "DIFFERS %s: %s\n", f.Who, f.What)
	}
	for _, w := range r.Deferred {
		fmt.Fprintf(stdout, "NOT COMPARED %s\n", w)
	}
	fmt.Fprintf(stdout, "Checked %s against %s: %s.\n", t.Redacted(), dir, r.Summary())
	if !r.Passed() || len(r.Deferred) > 0 {
		n := len(r.Failures) + len(r.Deferred)
		return fmt.Errorf("the replica does not restore to %s: %d %s", dir, n, plural(n, "difference", "differences"))
	}
	return nil
}

// isCheck says whether `nah restore` was asked for -check.
func isCheck(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return a == "-check" || a == "--check" || a == "-check=true" })
}
