package personfile

import (
	"cmp"
	"container/list"
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nah-app/nah"
)

// Config configures a Cache.
type Config struct {
	Max  int                                                                  // open handles kept when idle
	Path func(id string) (string, error)                                      // person id's file; an error refuses the id
	Open func(ctx context.Context, path string, create bool) (*sql.DB, error) // opens one file, schema up to date
	// Checkpoint empties the WAL of a file nobody in this process has open.
	Checkpoint func(path string) error
	// CloseKeepingWAL, if set, closes an evicted file's handle without the
	// checkpoint of its last close (keptWAL).
	CloseKeepingWAL func(db *sql.DB) error

	// Replicator, if set, follows written files. At most MaxWatched are
	// watched at once (0: no bound); QueueDir, if set, keeps the queue of
	// files waiting for it on disk (queue.go). Replication empties the
	// WAL of an open file it does not watch WALIdle after its last write
	// (DefaultWALIdle when zero; emptyIdleWALs).
	Replicator Replicator
	MaxWatched int
	QueueDir   string
	WALIdle    time.Duration

	// BeforeOpen runs before a file is opened and may refuse it;
	// AfterClose after its handle is closed. For tests.
	BeforeOpen func(path string) error
	AfterClose func(path string)

	Log *slog.Logger
}

// Cache is the one place where person files are opened and closed: a
// bounded least-recently-used set of open handles. Files in use are never
// closed under their users; the bound may be exceeded while more than Max
// files are in use at once, and is restored as they are released.
type Cache struct {
	cfg  Config
	repl Replicator // nil: no replication
	log  *slog.Logger
	q    *queue
	wal  walSet

	opens, closes, takeUps, ships atomic.Int64 // since start: Counts

	mu      sync.Mutex
	lru     list.List // front is most recent; values are *File
	byID    map[string]*File
	closing map[string]*File // out of the cache but not yet closed (or claimed), by id
	hidden  map[string]error // people being deleted or restored: opens are refused with the error
	closed  bool
	watched int // files in the cache that replication watches

	closers  sync.WaitGroup // closes running off the request path
	watchers sync.WaitGroup // replication's Watch calls and the replicators
}

// New starts a cache and, with a Replicator, its replicators; the files a
// previous run left in the queue on disk are queued again.
func New(cfg Config) *Cache {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	c := &Cache{
		cfg:     cfg,
		repl:    cfg.Replicator,
		log:     cfg.Log,
		byID:    make(map[string]*File),
		closing: make(map[string]*File),
		hidden:  make(map[string]error),
		wal:     walSet{m: make(map[string]bool)},
	}
	c.q = newQueue(cfg.QueueDir, cfg.Log)
	if c.repl != nil {
		if cfg.QueueDir != "" {
			c.q.load()
		}
		for range replicators {
			c.watchers.Go(func() { c.replicate(0) })
		}
		for range syncers {
			c.watchers.Go(c.syncWatched)
		}
		for range extraReplicators {
			c.watchers.Go(func() { c.replicate(behindLag) })
		}
		idle := cmp.Or(cfg.WALIdle, DefaultWALIdle)
		c.watchers.Go(func() { c.emptyIdleWALs(idle) })
	}
	return c
}

// retryShuttingDown is the Retry-After of a request that finds the cache
// closing: a restart takes a few seconds (the SPEC allows 2 s from start
// to the first feed), so a client that waits 5 s finds the server back.
const retryShuttingDown = 5 * time.Second

// Acquire returns the open file of person id, opening it if needed (and
// creating it when create is set). Every Acquire must be paired with Release.
func (c *Cache) Acquire(ctx context.Context, id string, create bool) (*File, error) {
	p, err := c.cfg.Path(id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		e := nah.Errorf(nah.Unavailable, "shutting_down", "the server is shutting down")
		e.RetryAfter = retryShuttingDown
		return nil, e
	}
	if err := c.hidden[id]; err != nil {
		c.mu.Unlock()
		return nil, err
	}
	if f := c.byID[id]; f != nil {
		f.refs++
		c.lru.MoveToFront(f.elem)
		c.mu.Unlock()
		<-f.ready
		if f.err != nil {
			c.Release(f)
			return nil, f.err
		}
		return f, nil
	}
	f := newFile(id, p)
	f.refs = 1
	f.elem = c.lru.PushFront(f)
	c.byID[id] = f
	victims := c.evictLocked()
	var wait chan struct{}
	if old := c.closing[id]; old != nil {
		wait = old.closed
	}
	c.mu.Unlock()

	c.closeLater(victims)
	if wait != nil {
		<-wait // the same file is still being closed: replication must see close, then open
	}
	f.DB, f.err = f.open(context.WithoutCancel(ctx), &c.cfg, create)
	c.opens.Add(1)
	if f.err != nil {
		c.mu.Lock()
		if c.byID[id] == f {
			delete(c.byID, id)
			c.lru.Remove(f.elem)
			f.elem = nil
		}
		f.refs--
		if c.closing[id] == f { // forgotten while it failed to open
			delete(c.closing, id)
			close(f.closed)
		}
		c.mu.Unlock()
		close(f.ready)
		return nil, f.err
	}
	close(f.ready)
	return f, nil
}

// Release gives back a file from Acquire; an evicted file closes with its
// last user.
func (c *Cache) Release(f *File) {
	c.mu.Lock()
	f.refs--
	last := f.refs == 0 && f.elem == nil && f.DB != nil
	if last {
		c.closing[f.ID] = f
	}
	c.mu.Unlock()
	if last {
		c.closeFile(f)
	}
}

// evictLocked removes idle files beyond the bound from the cache and returns
// them for closing outside the lock.
func (c *Cache) evictLocked() []*File {
	var victims []*File
	for e := c.lru.Back(); e != nil && c.lru.Len() > c.cfg.Max; {
		f := e.Value.(*File)
		prev := e.Prev()
		if f.refs == 0 {
			c.removeLocked(f)
			f.evicted = true
			victims = append(victims, f)
		}
		e = prev
	}
	return victims
}

// removeLocked takes f out of the cache; it closes with its last user. It
// stays in the closing set until then, so that a reopen of the same person
// waits for it: replication must see the close before the next open.
func (c *Cache) removeLocked(f *File) {
	c.lru.Remove(f.elem)
	f.elem = nil
	delete(c.byID, f.ID)
	c.closing[f.ID] = f
	if f.counted {
		f.counted = false
		c.watched--
	}
}

// closeLater closes evicted files off the request path. Without
// replication a close was measured fast enough inline; with it a close
// includes Litestream's last sync, a network round trip on S3.
func (c *Cache) closeLater(fs []*File) {
	for _, f := range fs {
		c.closers.Go(func() { c.closeFile(f) })
	}
}

// WaitClosed returns once every close of an evicted file that had begun
// has finished (its checkpoint done, its WAL gone or kept). A caller that
// reads or fills the disk under the files needs it: a close still running
// changes both.
func (c *Cache) WaitClosed() { c.closers.Wait() }

// Drop takes f out of the cache if it is still there, so that the next
// Acquire opens the file afresh; f closes with its last user. For a handle
// that proved broken: kept, it would go on reading the broken file, even
// after a good copy had been renamed over it.
func (c *Cache) Drop(f *File) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID[f.ID] == f {
		c.removeLocked(f)
	}
}

// Forget drops the file of person id from the cache and closes it now if
// nobody uses it, else with its last user; used before a person's folder
// is removed.
func (c *Cache) Forget(id string) {
	c.mu.Lock()
	f := c.byID[id]
	if f == nil {
		c.mu.Unlock()
		return
	}
	c.removeLocked(f) // a reopen waits, even while users still hold it
	last := f.refs == 0
	c.mu.Unlock()
	if last {
		<-f.ready
		if f.DB != nil {
			c.closeFile(f)
		}
	}
}

// Hide refuses every later open of person id (as NotFound) until Unhide,
// and returns once their file is closed and its WAL empty: its users
// finish first, and the last one closes it; a WAL an eviction kept is
// checkpointed. A person's folder is moved between Hide and Unhide, so
// that no request reopens the file (or recreates it) in the middle, and a
// WAL moved with it would outlive the shutdown's checkpoint by path.
func (c *Cache) Hide(id string) {
	c.HideWith(id, nah.ErrNoPerson())
}

// HideWith is Hide with every open refused with refusal instead: for a
// person whose file comes back, a refusal to try again soon.
func (c *Cache) HideWith(id string, refusal error) {
	c.mu.Lock()
	c.hidden[id] = refusal
	f := c.byID[id]
	last := false
	if f != nil {
		c.removeLocked(f) // the last release closes it
		last = f.refs == 0
	}
	var wait chan struct{}
	if old := c.closing[id]; old != nil {
		wait = old.closed
	}
	c.mu.Unlock()
	if last {
		<-f.ready
		if f.DB != nil {
			c.closeFile(f)
		}
	}
	if wait != nil {
		<-wait
	}
	if p, err := c.cfg.Path(id); err == nil && walSize(p) > 0 {
		if err := c.cfg.Checkpoint(p); err != nil {
			c.log.Warn("checkpoint a hidden file", "path", p, "err", err)
		} else {
			c.wal.set(p, false)
		}
	}
}

// Unhide lets person id's file be opened again.
func (c *Cache) Unhide(id string) {
	c.mu.Lock()
	delete(c.hidden, id)
	c.mu.Unlock()
}

// WhileHidden runs fn with person id hidden (see Hide) and lets their file
// be opened again when fn returns, whatever it returns.
func (c *Cache) WhileHidden(id string, fn func() error) error {
	c.Hide(id)
	defer c.Unhide(id)
	return fn()
}

// State says whether person id's file is in the cache (or being closed),
// and whether the person is hidden (being deleted or restored).
func (c *Cache) State(id string) (open, hidden bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byID[id] != nil || c.closing[id] != nil, c.hidden[id] != nil
}

// Len is the number of open (or opening) files.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Max is the bound of idle open files.
func (c *Cache) Max() int { return c.cfg.Max }

// Counts are what the cache has done since start: files opened, closed, and
// handed to replication (take-ups: a registration and a first sync each).
// Per post they say what a post costs beyond its insert.
// Ships are files shipped without a take-up (Replicator.Ship).
type Counts struct{ Opens, Closes, TakeUps, Ships int64 }

// Counts returns the cache's counts now.
func (c *Cache) Counts() Counts {
	return Counts{Opens: c.opens.Load(), Closes: c.closes.Load(), TakeUps: c.takeUps.Load(), Ships: c.ships.Load()}
}

// Watched is how many files in the cache replication watches (the set
// MaxWatched bounds).
func (c *Cache) Watched() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watched
}

// Closed says whether Close has begun.
func (c *Cache) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
