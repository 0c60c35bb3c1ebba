package store

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"

	"github.com/nah-app/nah"
)

// Daily digests: each person's settings and the state that makes a day's
// digest happen once (migrations/directory/0005_digests.sql), and the
// count of what is new for a person, read from memory first. The schedule
// itself (which minute is whose, daylight saving) is the digest package's.

// SetDigest saves person's digest settings. The slot of the change's own
// minute and any before it are not owed (DigestSchedule.UpdatedAt).
func (s *Store) SetDigest(ctx context.Context, person string, d nah.Digest) error {
	_, err := s.exec(ctx, `INSERT INTO digests(person_id, minute, timezone, enabled, updated_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(person_id) DO UPDATE SET minute = excluded.minute, timezone = excluded.timezone,
			enabled = excluded.enabled, updated_at = excluded.updated_at`,
		person, d.Minute, d.Timezone, d.Enabled, s.now().UnixMilli())
	return err
}

// FindDigest returns person's digest settings and the slot of their last
// digest (unix ms, 0 for none); NotFound when they never chose any.
func (s *Store) FindDigest(ctx context.Context, person string) (nah.Digest, int64, error) {
	var d nah.Digest
	var last sql.NullInt64
	err := s.r.QueryRowContext(ctx, `SELECT minute, timezone, enabled, last_digest_at FROM digests WHERE person_id = ?`, person).
		Scan(&d.Minute, &d.Timezone, &d.Enabled, &last)
	if errors.Is(err, sql.ErrNoRows) {
		return d, 0, nah.Errorf(nah.NotFound, "", "no digest settings")
	}
	return d, last.Int64, err
}

// DigestSchedule is one person's enabled digest as the loop needs it.
// Times are unix ms, 0 for never.
type DigestSchedule struct {
	Person   string
	Minute   int
	Timezone string
	// UpdatedAt is when the settings changed: a slot before it is not owed.
	UpdatedAt int64
	// LastDigestAt is the slot last claimed; DoneAt the slot last finished;
	// CountedFrom the start of the claimed slot's window.
	LastDigestAt, DoneAt, CountedFrom int64
	Devices                           int
}

// DigestSchedules lists every enabled digest of a person who is neither
// deleted nor disabled. The loop reads it once a minute: one indexed scan
// of a table as long as the people who chose a digest (~5 ms for 5,000).
func (s *Store) DigestSchedules(ctx context.Context) ([]DigestSchedule, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT d.person_id, d.minute, d.timezone, d.updated_at,
			coalesce(d.last_digest_at, 0), coalesce(d.done_at, 0), coalesce(d.counted_from, 0),
			(SELECT count(*) FROM devices v WHERE v.person_id = d.person_id)
		FROM digests d JOIN people p ON p.id = d.person_id
		WHERE d.enabled AND p.deleted_at IS NULL AND NOT p.disabled`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DigestSchedule
	for rows.Next() {
		var d DigestSchedule
		if err := rows.Scan(&d.Person, &d.Minute, &d.Timezone, &d.UpdatedAt, &d.LastDigestAt, &d.DoneAt, &d.CountedFrom, &d.Devices); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// DigestMark records a person's digest for one slot: claimed (Done false,
// written before any push is sent) or finished (Done true).
type DigestMark struct {
	Person string
	Slot   int64 // the instant of the local digest minute, unix ms
	From   int64 // the window counted is (From, Slot]
	Done   bool
}

// MarkDigests writes marks in one transaction (one fsync for the lot: the
// loop groups the marks of people whose pushes go out together).
func (s *Store) MarkDigests(ctx context.Context, marks []DigestMark) error {
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		for _, m := range marks {
			if _, err := tx.ExecContext(ctx, `UPDATE digests SET last_digest_at = ?1, counted_from = ?2,
				done_at = CASE WHEN ?3 THEN ?1 ELSE done_at END WHERE person_id = ?4`, m.Slot, m.From, m.Done, m.Person); err != nil {
				return err
			}
		}
		return nil
	})
}

// MaybeNew reports, from memory, whether any of person's connections has
// posted after from: false means nothing is new, and no file need be
// opened to know it. Connections not yet in memory are read from the
// directory first; if that fails, the answer is true (maybe), and the
// count that follows (CountNew) meets the error.
func (s *Store) MaybeNew(ctx context.Context, person string, from int64) bool {
	for {
		if newer, known := s.graph.anyNewer(person, from); known {
			return newer
		}
		if err := s.loadConns(ctx, person); err != nil {
			return true
		}
	}
}

// CountNew counts the moments person's connections posted in (from, to],
// and returns the handles of their authors, most moments first. Only the
// connections whose newest time (in memory) is after from are looked at,
// each from their cached head when it reaches back to from, else with one
// indexed count in their file. It does not go through the feed's
// candidates, which can open 151 files to refresh times. A connection whose
// file cannot be read is left out, as in a feed.
func (s *Store) CountNew(ctx context.Context, person string, from, to int64) (int, []string, error) {
	np := nodePool.Get().(*[]*node)
	nodes, err := s.circle(ctx, person, true, (*np)[:0])
	defer func() {
		clear(nodes)
		*np = nodes[:0]
		nodePool.Put(np)
	}()
	if err != nil {
		return 0, nil, err
	}
	type author struct {
		id string
		n  int
	}
	var authors []author
	total := 0
	for _, n := range nodes[min(1, len(nodes)):] { // nodes[0] is person
		if n.newest.Load() <= from {
			continue
		}
		k, err := s.countSince(ctx, n, from, to)
		if err != nil {
			if faultPerson(err) == n.id {
				continue
			}
			return 0, nil, err
		}
		if k > 0 {
			total += k
			authors = append(authors, author{n.id, k})
		}
	}
	if len(authors) == 0 {
		return 0, nil, nil
	}
	// Most moments first, then by id for a stable order.
	slices.SortFunc(authors, func(a, b author) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return strings.Compare(a.id, b.id)
	})
	ids := make([]any, len(authors))
	for i, a := range authors {
		ids[i] = a.id
	}
	handles := make(map[string]string, len(ids))
	rows, err := s.r.QueryContext(ctx, `SELECT id, handle FROM people WHERE id IN (?`+strings.Repeat(",?", len(ids)-1)+`)`, ids...)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, h string
		if err := rows.Scan(&id, &h); err != nil {
			return 0, nil, err
		}
		handles[id] = h
	}
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	out := make([]string, 0, len(authors))
	for _, a := range authors {
		if h, ok := handles[a.id]; ok {
			out = append(out, h)
		}
	}
	return total, out, nil
}

// countSince counts n's moments in (from, to]: from their head when it
// holds every moment after from, else from their file's time index.
func (s *Store) countSince(ctx context.Context, n *node, from, to int64) (int, error) {
	if h := n.head.Load(); h != nil && (h.complete || len(h.items) > 0 && h.items[len(h.items)-1].CreatedAt <= from) {
		k := 0
		for _, it := range h.items {
			if it.CreatedAt > from && it.CreatedAt <= to {
				k++
			}
		}
		return k, nil
	}
	var k int
	_, err := s.withFile(ctx, n.id, func(f *personFile) error {
		// Times in (from, to] are the ids from from+1's floor to to+1's.
		return f.db.QueryRowContext(ctx, `SELECT count(*) FROM moments WHERE id >= ? AND id < ?`,
			nah.MomentIDFloor(from+1), nah.MomentIDFloor(to+1)).Scan(&k)
	})
	return k, err
}
