package store

import (
	"context"
	"strings"

	"github.com/nah-app/nah"
)

// ListedCounts is what the console's people list shows beside a person,
// from what the store already counts: their moments (the directory's
// count and what it is owed), their database on disk (one read of their
// folder) and their media as counted since their first media use in this
// run (MediaKnown false before it), never a walk of their media.
type ListedCounts struct {
	Moments       int64
	DatabaseBytes int64
	MediaBytes    int64
	MediaKnown    bool
}

// listedMax bounds the people ListedCounts takes at once: a page of the
// list, well under SQLite's 32,766 variables.
const listedMax = 500

// ListedCounts is the counts of each of ids that is a person.
func (s *Store) ListedCounts(ctx context.Context, ids []string) (map[string]ListedCounts, error) {
	ids = ids[:min(len(ids), listedMax)]
	out := make(map[string]ListedCounts, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, moments FROM people WHERE id IN (?`+strings.Repeat(",?", len(ids)-1)+`)`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var c ListedCounts
		if err := rows.Scan(&id, &c.Moments); err != nil {
			return nil, err
		}
		out[id] = c
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	s.dirtyMu.Lock() // counts not flushed to the directory yet (every second)
	for id, c := range out {
		c.Moments = max(0, c.Moments+s.dirty[id].delta)
		out[id] = c
	}
	s.dirtyMu.Unlock()
	for id, c := range out {
		// A folder not there (deleted meanwhile) counts as nothing.
		c.DatabaseBytes, _ = s.databaseBytes(id)
		if n := s.graph.node(id); n != nil && nah.ValidPersonID(id) {
			n.usage.mu.Lock()
			c.MediaBytes, c.MediaKnown = n.usage.bytes, n.usage.counted
			n.usage.mu.Unlock()
		}
		out[id] = c
	}
	return out, nil
}
