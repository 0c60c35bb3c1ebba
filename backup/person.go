package backup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nah-app/nah"
)

// ErrReplica is wrapped by every failure of RestorePerson to get a sound
// copy from the replica (ErrNothing and ErrUnsoundHistory among them); the
// live file is then as it was.
var ErrReplica = errors.New("the replica could not give back the file")

// ErrUnsoundHistory is RestorePerson's refusal when the replica's history
// of the file does not restore to a sound database: Restored says why and
// what the sweep's copy, which it does not use, would have cost.
var ErrUnsoundHistory = errors.New("the history does not restore to a sound database")

// RestorePerson restores person id's live file to its state at at (zero:
// newest) from the replica, while the server runs. What is verified is
// RestoreFile's full integrity check, once, as for `nah restore` (a second
// check cost a quarter of a whole restore); the store then checks only the
// copy's schema, as an import's. A sweep's copy taken because the history
// failed is refused (ErrUnsoundHistory): the live file may be newer than
// it. Litestream's local state of the old file goes before the new one is
// watched, and the restore is done once the replica has the new file.
func (r *Replicator) RestorePerson(ctx context.Context, files Files, id string, at time.Time, steps Steps) (Restored, error) {
	var res Restored
	rel := nah.PersonRel(id)
	err := files.ReplacePersonFile(ctx, id, func(path string) error {
		steps.at(1, 3, path)
		var err error
		res, err = RestoreFile(ctx, r.Target(), rel, path, at)
		if res.HistoryErr != nil {
			return fmt.Errorf("%w: %s: %w: %w", ErrReplica, rel, ErrUnsoundHistory, res.HistoryErr)
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrReplica, err)
		}
		steps.at(2, 3, "")
		return r.clearState(r.path(rel))
	})
	if err != nil {
		return res, err
	}
	steps.at(3, 3, "")
	return res, r.shipped(ctx, rel)
}

// Steps hears how far a restore of a person or its undo is: step of
// of, and while the copy is fetched (step 1 of a restore) the path it is
// written to (it grows there, or beside it with ".tmp"). Nil hears nothing.
type Steps func(step, of int, fetching string)

func (s Steps) at(step, of int, fetching string) {
	if s != nil {
		s(step, of, fetching)
	}
}

// UndoRestore swaps back the file person id's last restore replaced, kept
// by the store until the delete grace ends, by the same path as
// RestorePerson: hidden while swapped, Litestream's local state cleared,
// media reconciled, done once the replica has it.
func (r *Replicator) UndoRestore(ctx context.Context, files Files, id string, steps Steps) error {
	rel := nah.PersonRel(id)
	steps.at(1, 2, "")
	err := files.UndoReplacePersonFile(ctx, id, func(string) error { return r.clearState(r.path(rel)) })
	if err != nil {
		return err
	}
	steps.at(2, 2, "")
	return r.shipped(ctx, rel)
}

// shipped returns once the replica has the file rel just swapped in.
// Litestream has it once the swap returns; the replica may not yet (it
// ships within its sync interval), and until it does a whole restore
// would bring back what the swap replaced.
func (r *Replicator) shipped(ctx context.Context, rel string) error {
	if err := r.Sync(ctx, r.path(rel)); err != nil {
		return nah.Errorf(nah.Unavailable, "", "the file is in place, but the replica does not have it yet (%v): it catches up once the target answers", err)
	}
	return nil
}
