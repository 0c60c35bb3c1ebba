package store

import (
	"bytes"
	"context"
	"database/sql"
	"strings"

	"github.com/nah-app/nah"
)

// CreateMoment stores body as a new moment of author. It returns once the
// row is committed and fsynced.
func (s *Store) CreateMoment(ctx context.Context, author string, body []byte) (nah.Moment, error) {
	n := s.graph.node(author)
	if n == nil {
		return nah.Moment{}, nah.Errorf(nah.NotFound, "", "no such person")
	}
	f, err := s.files.acquire(ctx, author, false)
	if err != nil {
		return nah.Moment{}, err
	}
	defer s.files.release(f)
	now := s.now().UnixMilli()
	m := nah.Moment{ID: nah.NewMomentID(now), Author: author, CreatedAt: now}
	if _, err := f.db.ExecContext(ctx, `INSERT INTO moments(id, created_at, body) VALUES (?, ?, ?)`, m.ID, m.CreatedAt, body); err != nil {
		return nah.Moment{}, err
	}
	n.raiseNewest(now)
	n.checked.Store(now)
	s.markDirty(author, n.newest.Load(), 1)
	m.Body = bytes.Clone(body)
	s.headAfterPost(n, m)
	m.Body = nil
	return m, nil
}

// DeleteMoment deletes moment id of author. A moment that is not author's
// is NotFound, exactly like a missing one.
func (s *Store) DeleteMoment(ctx context.Context, author, id string) error {
	notFound := nah.Errorf(nah.NotFound, "", "no such moment")
	if !nah.ValidMomentID(id) {
		return notFound
	}
	n := s.graph.node(author)
	if n == nil {
		return notFound
	}
	f, err := s.files.acquire(ctx, author, false)
	if err != nil {
		return err
	}
	defer s.files.release(f)
	before := n.newest.Load()
	res, err := f.db.ExecContext(ctx, `DELETE FROM moments WHERE id = ?`, id)
	if err != nil {
		return err
	}
	if k, _ := res.RowsAffected(); k == 0 {
		return notFound
	}
	// The newest time may now be too new; an overestimate only costs a
	// visit, but keep it true when it is cheap to know.
	newest, known := s.headAfterDelete(n, id)
	if !known {
		if newest, err = readNewest(ctx, f.db); err != nil {
			return err
		}
	}
	s.markDirty(author, 0, -1)
	// Lower it only if no post raised it meanwhile.
	if n.newest.CompareAndSwap(before, newest) {
		n.checked.Store(s.now().UnixMilli())
	}
	return nil
}

func readNewest(ctx context.Context, db *sql.DB) (int64, error) {
	var at sql.NullInt64
	err := db.QueryRowContext(ctx, `SELECT max(created_at) FROM moments`).Scan(&at)
	return at.Int64, err
}

// Key is a moment without its body: what the feed merges before it knows
// which bodies make the page.
type Key struct {
	ID        string
	Author    string
	CreatedAt int64
}

// Candidate is a person whose moments may be on a feed page, with the time of
// their newest moment.
type Candidate struct {
	ID     string
	Newest int64
	node   *node
}

// Circle appends to dst person id and everyone connected to them, with
// newest-moment times that can be trusted: a time last confirmed more than
// StaleAfter ago is re-read from the person's file first, so a post taken by
// another process on the same data directory shows within that period.
func (s *Store) Circle(ctx context.Context, id string, dst []Candidate) ([]Candidate, error) {
	return s.candidates(ctx, id, true, dst)
}

// Alone is Circle for person id alone.
func (s *Store) Alone(ctx context.Context, id string, dst []Candidate) ([]Candidate, error) {
	return s.candidates(ctx, id, false, dst)
}

func (s *Store) candidates(ctx context.Context, id string, circle bool, dst []Candidate) ([]Candidate, error) {
	np := nodePool.Get().(*[]*node)
	nodes := s.graph.circle(id, circle, (*np)[:0])
	defer func() {
		clear(nodes)
		*np = nodes[:0]
		nodePool.Put(np)
	}()
	if len(nodes) == 0 {
		return dst, nah.Errorf(nah.NotFound, "", "no such person")
	}
	now := s.now().UnixMilli()
	for _, n := range nodes {
		if now-n.checked.Load() > s.staleAfter.Milliseconds() {
			if err := s.refresh(ctx, n, now); err != nil {
				return dst, err
			}
		}
		dst = append(dst, Candidate{ID: n.id, Newest: n.newest.Load(), node: n})
	}
	return dst, nil
}

// refresh re-reads n's newest time, and its head when heads are on and it
// fits, from its file; a cached head whose file is unchanged since it was
// read (same sizes and modification times, see fileStamp) is trusted for
// another period without opening the file.
func (s *Store) refresh(ctx context.Context, n *node, now int64) error {
	if s.unchanged(n) {
		n.checked.Store(now)
		return nil
	}
	if s.headBudget > 0 && (n.head.Load() != nil || s.headBytes.Load() < s.headBudget) {
		_, err := s.loadHead(ctx, n, now)
		if nah.ErrorCode(err) == nah.NotFound {
			return nil
		}
		return err
	}
	f, err := s.files.acquire(ctx, n.id, false)
	if err != nil {
		if nah.ErrorCode(err) == nah.NotFound {
			return nil // deleted meanwhile: nothing of theirs to show
		}
		return err
	}
	defer s.files.release(f)
	newest, err := readNewest(ctx, f.db)
	if err != nil {
		return err
	}
	// Raise, never lower: a post of ours may have landed after the read.
	n.raiseNewest(newest)
	n.checked.Store(now)
	return nil
}

// MomentKeys appends to dst up to limit keys of author's moments strictly
// older than before (all when before is nil), newest first, through the
// (created_at, id) index alone.
func (s *Store) MomentKeys(ctx context.Context, author string, before *nah.Cursor, limit int, dst []Key) ([]Key, error) {
	s.fileReads.Add(1)
	f, err := s.files.acquire(ctx, author, false)
	if err != nil {
		return dst, err
	}
	defer s.files.release(f)
	var rows *sql.Rows
	if before == nil {
		rows, err = f.db.QueryContext(ctx, `SELECT id, created_at FROM moments
			ORDER BY created_at DESC, id DESC LIMIT ?`, limit)
	} else {
		rows, err = f.db.QueryContext(ctx, `SELECT id, created_at FROM moments
			WHERE (created_at, id) < (?, ?) ORDER BY created_at DESC, id DESC LIMIT ?`, before.At, before.ID, limit)
	}
	if err != nil {
		return dst, err
	}
	defer rows.Close()
	for rows.Next() {
		k := Key{Author: author}
		if err := rows.Scan(&k.ID, &k.CreatedAt); err != nil {
			return dst, err
		}
		dst = append(dst, k)
	}
	return dst, rows.Err()
}

// FileReads counts the looks into person files on the feed path (keys
// and head loads) over the store's life.
func (s *Store) FileReads() int64 { return s.fileReads.Load() }

// MomentBodies reads the bodies of moments ids of author and calls fn for
// each one found (a moment deleted since its key was read is skipped). The
// body passed to fn is only valid during the call.
func (s *Store) MomentBodies(ctx context.Context, author string, ids []string, fn func(id string, body []byte)) error {
	if len(ids) == 0 {
		return nil
	}
	f, err := s.files.acquire(ctx, author, false)
	if err != nil {
		return err
	}
	defer s.files.release(f)
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := f.db.QueryContext(ctx, bodiesQuery(len(ids)), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var id string
	var body sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&id, &body); err != nil {
			return err
		}
		fn(id, body)
	}
	return rows.Err()
}

// bodiesQueries holds the IN (...) query text for each count up to the
// largest page, built once.
var bodiesQueries = func() []string {
	qs := make([]string, nah.FeedPageMax+2)
	for n := 1; n < len(qs); n++ {
		qs[n] = `SELECT id, body FROM moments WHERE id IN (?` + strings.Repeat(",?", n-1) + `)`
	}
	return qs
}()

func bodiesQuery(n int) string {
	if n < len(bodiesQueries) {
		return bodiesQueries[n]
	}
	return `SELECT id, body FROM moments WHERE id IN (?` + strings.Repeat(",?", n-1) + `)`
}

// Moments appends to dst up to limit whole moments of author older than
// before, newest first, bodies included. The feed does not use it (it reads
// keys first); exports and the benchmark of the whole-rows shape do.
func (s *Store) Moments(ctx context.Context, author string, before *nah.Cursor, limit int, dst []nah.Moment) ([]nah.Moment, error) {
	f, err := s.files.acquire(ctx, author, false)
	if err != nil {
		return dst, err
	}
	defer s.files.release(f)
	at, id := int64(1<<62), ""
	if before != nil {
		at, id = before.At, before.ID
	}
	rows, err := f.db.QueryContext(ctx, `SELECT id, created_at, body FROM moments
		WHERE (created_at, id) < (?, ?) ORDER BY created_at DESC, id DESC LIMIT ?`, at, id, limit)
	if err != nil {
		return dst, err
	}
	defer rows.Close()
	for rows.Next() {
		m := nah.Moment{Author: author}
		if err := rows.Scan(&m.ID, &m.CreatedAt, &m.Body); err != nil {
			return dst, err
		}
		dst = append(dst, m)
	}
	return dst, rows.Err()
}

// MomentCount counts a person's moments in their file.
func (s *Store) MomentCount(ctx context.Context, id string) (int, error) {
	f, err := s.files.acquire(ctx, id, false)
	if err != nil {
		return 0, err
	}
	defer s.files.release(f)
	var n int
	err = f.db.QueryRowContext(ctx, `SELECT count(*) FROM moments`).Scan(&n)
	return n, err
}

// ImportMoments writes moments (with their own ids and times) into author's
// file in one transaction, for fixtures. Ids and times are the caller's; ids
// must be valid.
func (s *Store) ImportMoments(ctx context.Context, author string, ms []nah.Moment) error {
	n := s.graph.node(author)
	if n == nil {
		return nah.Errorf(nah.NotFound, "", "no such person")
	}
	f, err := s.files.acquire(ctx, author, false)
	if err != nil {
		return err
	}
	defer s.files.release(f)
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO moments(id, created_at, body) VALUES (?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	var newest int64
	for _, m := range ms {
		if !nah.ValidMomentID(m.ID) {
			return nah.Errorf(nah.Invalid, "invalid_id", "%q is not a moment id", m.ID)
		}
		if _, err := stmt.ExecContext(ctx, m.ID, m.CreatedAt, m.Body); err != nil {
			return err
		}
		newest = max(newest, m.CreatedAt)
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	n.raiseNewest(newest)
	s.markDirty(author, n.newest.Load(), int64(len(ms)))
	s.dropHead(n)
	return nil
}
