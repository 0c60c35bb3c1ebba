package personfile

import (
	"container/list"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/nah-app/nah"
)

// File is one open person database. DB has exactly one connection.
type File struct {
	ID   string
	Path string
	DB   *sql.DB

	ready  chan struct{} // closed once DB is open or err is set
	err    error
	closed chan struct{} // closed once DB is closed and replication told

	mu      sync.Mutex
	watched chan struct{} // guarded by mu: non-nil once replication was asked to watch, closed when it answered

	wrote  atomic.Int64 // when last written (UnixNano), 0 once its WAL was looked at since (emptyIdleWALs)
	synced atomic.Int64 // when its last sync began while watched (UnixNano): Wrote paces the next

	// The cache's bookkeeping, guarded by Cache.mu.
	refs    int
	elem    *list.Element // nil once out of the LRU
	counted bool          // in Cache.watched (it was in the cache when watched)
	evicted bool          // out of the cache to make room (not dropped, hidden or forgotten)
}

func newFile(id, path string) *File {
	return &File{ID: id, Path: path, ready: make(chan struct{}), closed: make(chan struct{})}
}

// startWatch marks f as watched and runs then (under f's lock, so that a
// Wrote sees either the mark or the watch); it returns the channel to
// close once replication answered, nil if f was watched already.
func (f *File) startWatch(then func()) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watched != nil {
		return nil
	}
	f.watched = make(chan struct{})
	then()
	return f.watched
}

// watching is f's watch: nil if replication was never asked to watch it.
func (f *File) watching() chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watched
}

// open opens (or creates) f's database with cfg.Open.
func (f *File) open(ctx context.Context, cfg *Config, create bool) (*sql.DB, error) {
	if create {
		if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
			return nil, err
		}
	} else if _, err := os.Stat(f.Path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nah.ErrNoPerson()
		}
		return nil, err
	}
	if cfg.BeforeOpen != nil {
		if err := cfg.BeforeOpen(f.Path); err != nil {
			return nil, fmt.Errorf("before open %s: %w", f.Path, err)
		}
	}
	db, err := cfg.Open(ctx, f.Path, create)
	if err != nil {
		if cfg.AfterClose != nil {
			cfg.AfterClose(f.Path)
		}
		return nil, err
	}
	return db, nil
}
