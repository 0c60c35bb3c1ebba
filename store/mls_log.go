package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/nah-app/nah"
)

// MLSPageBytes bounds the bytes of one page of commits or of an inbox
// (each holds at least one entry): a page of 100 commits at
// MLSCommitMaxBytes would be 50 MiB in memory.
const MLSPageBytes = 2 << 20

// MLSHeld is how many times its size a row of a page holds until the page
// is written: the bytes read, their base64 and the JSON around it.
const MLSHeld = 3

// MLSCommitsPage is the most commits a page has.
const MLSCommitsPage = 100

// MLSCommitEntry is one commit of a group's log, by the epoch it made.
type MLSCommitEntry struct {
	Epoch uint64
	Body  []byte
}

// The log is pruned of the commits every member has passed (the least
// mls_members.passed: the epoch a Welcome added the client at, moved on by
// its fetches of the commits after an epoch, never by its own commit,
// whose answer may be lost), of those older than MLSCommitMaxAge even
// when a member is behind, and past MLSCommitsKept. Each rule cuts a
// prefix, so the log stays whole from its oldest commit to the group's
// epoch, and a member whose next commit is gone gets a PrunedError.

// pruneCommits prunes the log of the file tx is on, whose group is at
// epoch.
func (s *Store) pruneCommits(ctx context.Context, tx *sql.Tx, epoch uint64) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM mls_commits WHERE epoch <= (SELECT min(passed) FROM mls_members)
		OR epoch <= (SELECT max(epoch) FROM mls_commits WHERE created_at < ?) OR epoch <= ?`,
		s.now().Add(-MLSCommitMaxAge).UnixMilli(), int64(epoch)-MLSCommitsKept)
	return err
}

// PrunedError is a fetch of the commits after an epoch whose next commit
// is pruned: the member joins again from the GroupInfo (410).
type PrunedError struct {
	Epoch uint64 // the group's
}

func (e *PrunedError) Error() string {
	return fmt.Sprintf("the commits after this epoch are pruned: join again from the GroupInfo, at epoch %d", e.Epoch)
}

// Take is asked for the memory of each row a page reads before the row is
// kept (the caller gives it back once the page is written); its error
// ends the read.
type Take func(n int) error

// Commits returns owner's commits that made the epochs after after, oldest
// first, at most MLSCommitsPage and MLSPageBytes, with the group's epoch,
// or a PrunedError when the next one is pruned. more says whether there
// are more after the page. take is asked for mlsHeld times each commit's
// size. client, when not "", is the member client that fetches: it has
// passed after, and the log is pruned by it (a write only when it moves on).
func (s *Store) Commits(ctx context.Context, owner, client string, after uint64, take Take) (cs []MLSCommitEntry, epoch uint64, more bool, err error) {
	if s.graph.node(owner) == nil {
		return nil, 0, false, nah.ErrNoPerson()
	}
	moved := false
	err = s.useFile(ctx, owner, false, func(f *personFile) error {
		return inReadTx(ctx, f, func(tx *sql.Tx) error {
			if err := tx.QueryRowContext(ctx, `SELECT epoch FROM mls_group`).Scan(&epoch); errors.Is(err, sql.ErrNoRows) {
				return errNoGroup()
			} else if err != nil {
				return err
			}
			if after < epoch {
				var one int
				err := tx.QueryRowContext(ctx, `SELECT 1 FROM mls_commits WHERE epoch = ?`, int64(after+1)).Scan(&one)
				if errors.Is(err, sql.ErrNoRows) {
					return &PrunedError{Epoch: epoch}
				} else if err != nil {
					return err
				}
			}
			if client != "" {
				var passed uint64
				err := tx.QueryRowContext(ctx, `SELECT passed FROM mls_members WHERE client = ?`, client).Scan(&passed)
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					return err
				}
				moved = err == nil && passed < min(after, epoch)
			}
			rows, err := tx.QueryContext(ctx, `SELECT epoch, body FROM mls_commits WHERE epoch > ? ORDER BY epoch LIMIT ?`, int64(min(after, 1<<62)), MLSCommitsPage)
			if err != nil {
				return err
			}
			defer rows.Close()
			size := 0
			for rows.Next() {
				var c MLSCommitEntry
				if err := rows.Scan(&c.Epoch, &c.Body); err != nil {
					return err
				}
				if size += len(c.Body); size > MLSPageBytes && len(cs) > 0 {
					break
				}
				if err := take(MLSHeld * len(c.Body)); err != nil {
					return err
				}
				cs = append(cs, c)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			more = len(cs) > 0 && cs[len(cs)-1].Epoch < epoch
			return nil
		})
	})
	if err == nil && moved {
		// The page stands without the cursor: a write that fails (a full
		// disk) leaves the log longer, not the member without its page.
		if err := s.passed(ctx, owner, client, min(after, epoch)); err != nil {
			s.log.Warn("a member's place in the commit log could not be kept", "person", owner, "client", client, "err", err)
		}
	}
	return cs, epoch, more, err
}

// passed records that client has passed epoch of owner's group, and
// prunes the log.
func (s *Store) passed(ctx context.Context, owner, client string, epoch uint64) error {
	return s.useFile(ctx, owner, true, func(f *personFile) error {
		return inTx(ctx, f, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `UPDATE mls_members SET passed = ? WHERE client = ? AND passed < ?`, epoch, client, epoch); err != nil {
				return err
			}
			var now uint64
			if err := tx.QueryRowContext(ctx, `SELECT epoch FROM mls_group`).Scan(&now); err != nil {
				return err
			}
			return s.pruneCommits(ctx, tx, now)
		})
	})
}

// GroupInfo returns the GroupInfo given with the newest commit of owner's
// group, and the group's epoch.
func (s *Store) GroupInfo(ctx context.Context, owner string) (info []byte, epoch uint64, err error) {
	if s.graph.node(owner) == nil {
		return nil, 0, nah.ErrNoPerson()
	}
	err = s.useFile(ctx, owner, false, func(f *personFile) error {
		err := f.db.QueryRowContext(ctx, `SELECT group_info, epoch FROM mls_group`).Scan(&info, &epoch)
		if errors.Is(err, sql.ErrNoRows) {
			return errNoGroup()
		}
		if err == nil && info == nil {
			return nah.Errorf(nah.NotFound, "no_group_info", "the group's newest commit, to epoch %d, came without a GroupInfo: a member's next commit brings one", epoch)
		}
		return err
	})
	return info, epoch, err
}

// MLSWelcome is a Welcome waiting in a client's inbox.
type MLSWelcome struct {
	ID      int64
	Group   string // the owner of the group it is into
	Epoch   uint64
	Welcome []byte
}

// deliverWelcome puts a Welcome into owner's group, at epoch, into the
// inbox of client (in its person's file). It replaces an older one into
// the same group; past MLSInboxMax the oldest goes.
func (s *Store) deliverWelcome(ctx context.Context, client, owner string, epoch uint64, welcome []byte) error {
	person, ok := ClientPerson(client)
	if !ok || s.graph.node(person) == nil {
		return errNoClient()
	}
	return s.useFile(ctx, person, true, func(f *personFile) error {
		return inTx(ctx, f, func(tx *sql.Tx) error {
			if _, err := clientKey(ctx, tx, client); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM mls_inbox WHERE client = ? AND group_of = ?`, client, owner); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO mls_inbox(client, group_of, epoch, welcome, created_at) VALUES (?, ?, ?, ?, ?)`,
				client, owner, epoch, welcome, s.now().UnixMilli()); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `DELETE FROM mls_inbox WHERE client = ?1 AND id NOT IN
				(SELECT id FROM mls_inbox WHERE client = ?1 ORDER BY id DESC LIMIT ?2)`, client, MLSInboxMax)
			return err
		})
	})
}

// Inbox returns the Welcomes waiting for person's client, oldest first,
// at most MLSPageBytes of them (and at least one); take as Commits'.
func (s *Store) Inbox(ctx context.Context, person, client string, take Take) ([]MLSWelcome, error) {
	if s.graph.node(person) == nil {
		return nil, nah.ErrNoPerson()
	}
	var ws []MLSWelcome
	err := s.useFile(ctx, person, false, func(f *personFile) error {
		return inReadTx(ctx, f, func(tx *sql.Tx) error {
			if _, err := clientKey(ctx, tx, client); err != nil {
				return err
			}
			rows, err := tx.QueryContext(ctx, `SELECT id, group_of, epoch, welcome FROM mls_inbox WHERE client = ? ORDER BY id`, client)
			if err != nil {
				return err
			}
			defer rows.Close()
			size := 0
			for rows.Next() {
				var w MLSWelcome
				if err := rows.Scan(&w.ID, &w.Group, &w.Epoch, &w.Welcome); err != nil {
					return err
				}
				if size += len(w.Welcome); size > MLSPageBytes && len(ws) > 0 {
					break
				}
				if err := take(MLSHeld * len(w.Welcome)); err != nil {
					return err
				}
				ws = append(ws, w)
			}
			return rows.Err()
		})
	})
	return ws, err
}

// DeleteWelcome deletes Welcome id from person's client's inbox.
func (s *Store) DeleteWelcome(ctx context.Context, person, client string, id int64) error {
	if s.graph.node(person) == nil {
		return nah.ErrNoPerson()
	}
	return s.useFile(ctx, person, true, func(f *personFile) error {
		res, err := f.db.ExecContext(ctx, `DELETE FROM mls_inbox WHERE client = ? AND id = ?`, client, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nah.Errorf(nah.NotFound, "", "no such Welcome")
		}
		return nil
	})
}
