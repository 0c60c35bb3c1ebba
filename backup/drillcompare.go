package backup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"time"

	"github.com/benbjohnson/litestream"

	"github.com/nah-app/nah"
)

// One file of a drill: restored from the replica and compared with the
// live file by Checksum, summed before and after (drill.go).

// drillOutcome is what checkFile found of one file.
type drillOutcome int

const (
	drillEqual drillOutcome = iota
	drillDeferred
	drillFailed
	drillGone // the live file went (a person deleted meanwhile)
)

// checkFile restores rel into out and compares it with the live file.
func (d *Drill) checkFile(ctx context.Context, rel, out string) (_ drillOutcome, what, evidence string) {
	defer removeScratch(out)
	pauses := d.Recheck
	if pauses == nil {
		pauses = drillRecheck
	}
	var why string
	for try := 0; ; try++ {
		if try > 0 {
			if try > len(pauses) {
				break
			}
			t := time.NewTimer(pauses[try-1])
			select {
			case <-ctx.Done():
				t.Stop()
				return drillDeferred, "stopped", ""
			case <-t.C:
			}
			removeScratch(out)
		}
		before, err := d.liveChecksum(ctx, rel)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), nah.ErrNoPerson().Message) {
				return drillGone, "", ""
			}
			why = "the live file cannot be read: " + err.Error()
			continue
		}
		if d.Repl != nil {
			// A watched file ships what it holds now; one not watched has
			// nothing waiting (or is queued, which pending says).
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := d.Repl.syncSource(sctx, d.Files, rel)
			cancel()
			if err != nil {
				why = "its replication could not sync: " + err.Error()
				continue
			}
		}
		res, rerr := d.restore(ctx, rel, out, drillBudget(d.liveBytes(ctx, rel)))
		src := res.String()
		if ctx.Err() != nil {
			return drillDeferred, "stopped", ""
		}
		// RestoreFile checked the copy whole with SQLite's integrity check
		// (a large share of a drill's time), and gives back no copy that
		// fails it.
		var restored Checksum
		var derr error
		if rerr == nil {
			derr = d.Source.ReadFile(ctx, out, func(tx *sql.Tx) error {
				var err error
				restored, err = ChecksumTx(ctx, tx)
				return err
			})
		}
		after, err := d.liveChecksum(ctx, rel)
		if err != nil {
			why = "the live file cannot be read: " + err.Error()
			continue
		}
		if !before.Equal(after) {
			why = "written during every try"
			continue
		}
		if rerr == nil && derr == nil && restored.Equal(after) {
			if res.From == FromHistory {
				return drillEqual, "", ""
			}
			// Equal, but from a sweep: its history is missing or failed,
			// and its writes since that sweep are not protected.
			if res.HistoryErr == nil {
				what := fmt.Sprintf("its Litestream history is missing from the replica; only the %s copy holds it, so its next writes are not protected until it is taken up again", src)
				return drillFailed, what, d.keep(rel, "", what)
			}
			what := fmt.Sprintf("its Litestream history does not restore (%s); nah restore falls back to the %s copy", shortErr(res.HistoryErr), src)
			return drillFailed, what, d.keep(rel, "", what)
		}
		if d.pending(rel) {
			why = "still waiting for replication"
			continue
		}
		switch {
		case rerr != nil:
			why = "does not restore: " + rerr.Error()
		case derr != nil:
			why = "restores to a database that cannot be read (" + shortErr(derr) + ")"
		default:
			why = after.Diff(restored)
			switch {
			case res.HistoryErr != nil:
				why += "; nah restore fell back to the " + src + " copy, its history not restoring (" + shortErr(res.HistoryErr) + ")"
			case res.From == FromSweep:
				why += "; nah restore fell back to the " + src + " copy, its history being missing"
			}
		}
		why = "differs from the live file: " + why
		if rerr != nil || derr != nil {
			why = strings.TrimPrefix(why, "differs from the live file: ")
		}
	}
	if why == "written during every try" || why == "still waiting for replication" {
		return drillDeferred, why, ""
	}
	pos := d.position(ctx, rel)
	return drillFailed, why + pos, d.keep(rel, out, why+pos)
}

// restore is the drill's one call to nah restore's own code.
func (d *Drill) restore(ctx context.Context, rel, out string, limit int64) (Restored, error) {
	return RestoreFileWithin(ctx, d.Target, rel, out, time.Time{}, limit)
}

// drillBudget is the most the drill writes of a copy of a live file of
// live bytes, and of the LTX files it restores from: its scratch folder
// holds at most twice it (one file at a time). A replica a little behind
// may be larger than a file that shrank since, never twice as large and
// 64 MiB besides. An LTX file whose header claims more is refused before
// anything of the copy is written (one of 4.5 MB that claimed 256 TiB grew
// the scratch folder to 736 MB before the restore failed).
func drillBudget(live int64) int64 { return 2*live + 64<<20 }

// liveBytes is the size of the live database rel as its read
// transaction sees it; 0 when it cannot be read (the checksum says why).
func (d *Drill) liveBytes(ctx context.Context, rel string) int64 {
	var pages, size int64
	d.Source.LiveRead(ctx, rel, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, "PRAGMA page_size").Scan(&size)
	})
	return pages * size
}

func (d *Drill) liveChecksum(ctx context.Context, rel string) (Checksum, error) {
	var sum Checksum
	err := d.Source.LiveRead(ctx, rel, func(tx *sql.Tx) error {
		var err error
		sum, err = ChecksumTx(ctx, tx)
		return err
	})
	return sum, err
}

// pending says whether rel's replica may rightly be behind: it waits in
// the queue, replication says it is behind, or the target is failing.
func (d *Drill) pending(rel string) bool {
	if d.Source.ReplicationQueued(rel) {
		return true
	}
	if d.Repl == nil {
		return false
	}
	if d.Repl.TargetErr() != nil {
		return true
	}
	f, ok := d.Repl.StatusOf(rel)
	return ok && f.Behind()
}

// position is where rel's history ends on the target, for the evidence.
func (d *Drill) position(ctx context.Context, rel string) string {
	c, err := d.Target.restoreClient(rel)
	if err != nil {
		return ""
	}
	plan, err := litestream.CalcRestorePlan(ctx, c, 0, time.Time{}, slog.New(slog.DiscardHandler))
	if err != nil || len(plan) == 0 {
		return ""
	}
	return fmt.Sprintf("; its history ends at TXID %s (%d LTX files)", plan[len(plan)-1].MaxTXID, len(plan))
}

// who names rel for people: the person's handle and file.
func (d *Drill) who(ctx context.Context, rel string) string {
	if rel == DirectoryRel {
		return "the directory (" + rel + ")"
	}
	if n := d.Source.HandleOf(ctx, rel); n != "" {
		return n + " (" + rel + ")"
	}
	return rel
}
