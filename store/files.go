package store

import (
	"container/list"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nah-app/nah"
)

// personCacheKiB caps one person connection's page cache. A feed touches a
// dozen pages of a file; the global soft heap limit bounds the sum.
const personCacheKiB = 256

// personFile is one open person database. db has exactly one connection.
type personFile struct {
	id     string
	path   string
	db     *sql.DB
	ready  chan struct{} // closed once db is open or err is set
	err    error
	closed chan struct{} // closed once db is closed and replication told

	refs    int           // guarded by fileCache.mu
	elem    *list.Element // guarded by fileCache.mu; nil once evicted
	watched chan struct{} // guarded by fileCache.mu; non-nil once replication was asked to watch, closed when it answered
	counted bool          // guarded by fileCache.mu; in fileCache.watched (it was in the cache when watched)
}

// Hooks let replication follow the open-file cache. BeforeOpen runs before
// a person file is opened (and may refuse it), AfterClose after its last
// handle is closed. Watch runs after a write to a person file that is not
// watched, off the request path (the replication queue, wrote): replication
// starts watching it (an error is logged: the file is then behind, never
// lost locally). Unwatch, after a last sync (an error: the replica lacks
// some of the file), runs once
// the app's handle on a watched file is closed (Litestream's close drops
// the process's locks on the file, so it must come after ours), and before
// anyone may open the file again. At most MaxWatched files are watched at
// once (0: no bound): watching one more closes the least recently used idle
// watched file. Any of them may be nil.
type Hooks struct {
	BeforeOpen func(path string) error
	AfterClose func(path string)

	Watch      func(ctx context.Context, path string) error
	Unwatch    func(path string) error
	MaxWatched int
	// QueueDir, if set, keeps the replication queue on disk as one empty
	// file per person waiting, so that files written but not yet taken up
	// when the process is killed are taken up at the next start.
	QueueDir string
	// Purged runs once a deleted person is purged, with their file's path
	// under the data directory: replication removes what it holds of it.
	Purged func(rel string)
}

// fileCache is the one place where person files are opened and closed: a
// bounded least-recently-used set of open handles. Files in use are never
// closed under their users; the bound may be exceeded while more than max
// files are in use at once, and is restored as they are released.
type fileCache struct {
	dir   string
	max   int
	sync  Sync // of every person file's connection (Config.Sync)
	hooks Hooks
	log   *slog.Logger

	mu      sync.Mutex
	lru     list.List // front is most recent; values are *personFile
	byID    map[string]*personFile
	closing map[string]*personFile // files out of the cache but not yet closed, by id
	hidden  map[string]bool        // people being deleted or restored: opens are refused
	closed  bool
	watched int // files in the cache that replication watches

	walLeft  map[string]bool // guarded by mu: watched files closed with their WAL left for later, by path
	closers  sync.WaitGroup  // closes running off the request path
	watchers sync.WaitGroup  // replication's Watch calls and the replicators, off the request path

	// Files written while replication did not watch them wait here for a
	// replicator (replicate), oldest first, each once: bounded by the
	// number of people, never by clients.
	queue  []string             // guarded by mu: person ids
	queued map[string]time.Time // guarded by mu: the same, with when each was queued
	wakeQ  *sync.Cond           // on mu: the queue grew or the cache closed

	markFailing bool // guarded by mu: the last queue marker could not be made
}

func newFileCache(dir string, max int, mode Sync, hooks Hooks, log *slog.Logger) *fileCache {
	c := &fileCache{
		log:     log,
		dir:     dir,
		max:     max,
		sync:    mode,
		hooks:   hooks,
		byID:    make(map[string]*personFile),
		closing: make(map[string]*personFile),
		hidden:  make(map[string]bool),
		walLeft: make(map[string]bool),
		queued:  make(map[string]time.Time),
	}
	c.wakeQ = sync.NewCond(&c.mu)
	if hooks.Watch != nil && hooks.QueueDir != "" {
		c.loadQueue()
	}
	if hooks.Watch != nil {
		for range replicators {
			c.watchers.Go(c.replicate)
		}
	}
	return c
}

// personDir is the folder of one person. id must be valid: it is checked
// here again because this is where an id becomes a path.
func (c *fileCache) personDir(id string) (string, error) {
	if !nah.ValidPersonID(id) {
		return "", nah.Errorf(nah.NotFound, "", "no such person")
	}
	return filepath.Join(c.dir, "people", id), nil
}

func (c *fileCache) personPath(id string) (string, error) {
	d, err := c.personDir(id)
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "person.db"), nil
}

// retryShuttingDown is the Retry-After of a request that finds the store
// closing: a restart takes a few seconds (the SPEC allows 2 s from start
// to the first feed), so a client that waits 5 s finds the server back.
const retryShuttingDown = 5 * time.Second

// acquire returns the open file of person id, opening it if needed (and
// creating it when create is set). Every acquire must be paired with release.
func (c *fileCache) acquire(ctx context.Context, id string, create bool) (*personFile, error) {
	p, err := c.personPath(id)
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
	if c.hidden[id] {
		c.mu.Unlock()
		return nil, nah.Errorf(nah.NotFound, "", "no such person")
	}
	if f := c.byID[id]; f != nil {
		f.refs++
		c.lru.MoveToFront(f.elem)
		c.mu.Unlock()
		<-f.ready
		if f.err != nil {
			c.release(f)
			return nil, f.err
		}
		return f, nil
	}
	f := &personFile{id: id, path: p, ready: make(chan struct{}), closed: make(chan struct{}), refs: 1}
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
	f.db, f.err = c.open(context.WithoutCancel(ctx), p, create)
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

// release gives back a file from acquire; an evicted file closes with its
// last user.
func (c *fileCache) release(f *personFile) {
	c.mu.Lock()
	f.refs--
	last := f.refs == 0 && f.elem == nil && f.db != nil
	if last {
		c.markClosingLocked(f)
	}
	c.mu.Unlock()
	if last {
		c.closeFile(f)
	}
}

// evictLocked removes idle files beyond the bound from the cache and returns
// them for closing outside the lock.
func (c *fileCache) evictLocked() []*personFile {
	var victims []*personFile
	for e := c.lru.Back(); e != nil && c.lru.Len() > c.max; {
		f := e.Value.(*personFile)
		prev := e.Prev()
		if f.refs == 0 {
			c.removeLocked(f)
			victims = append(victims, f)
		}
		e = prev
	}
	return victims
}

// removeLocked takes f out of the cache; it closes with its last user.
func (c *fileCache) removeLocked(f *personFile) {
	c.lru.Remove(f.elem)
	f.elem = nil
	delete(c.byID, f.id)
	c.markClosingLocked(f)
	if f.counted {
		f.counted = false
		c.watched--
	}
}

// closeLater closes evicted files off the request path. Without
// replication a close was measured fast enough inline; with it a close
// includes Litestream's last sync, a network round trip on S3. A reopen of
// the same person still waits for the close (markClosingLocked).
func (c *fileCache) closeLater(fs []*personFile) {
	for _, f := range fs {
		c.closers.Go(func() { c.closeFile(f) })
	}
}

// watch has replication watch f, which the caller holds and wrote to or
// is about to (a new person, a replaced file, a replicator taking up a
// queued one: wrote), first closing the least recently used idle watched
// file if the watched set is full. The Watch itself runs off the request
// path: it registers the file with Litestream and syncs it once, which
// snapshots a file written while nobody watched. No write is lost for it:
// a write made before Litestream set the file up is in the file its first
// sync snapshots, or in the WAL after that snapshot's position; and the
// file's close waits for the Watch to end before it lets replication go
// (closeFile), which is the race that loses writes (a file let go before
// Litestream set it up gets no last sync). The bound is MaxWatched idle
// files: files in use are never closed under their users, and a file
// closed to make room is let go of by replication off the request path,
// a millisecond later with a healthy target.
func (c *fileCache) watch(ctx context.Context, f *personFile) { c.watchFile(ctx, f, false) }

// watchFile is watch; with wait set the Watch runs in the caller's
// goroutine (a replicator's), which is then paced by it.
func (c *fileCache) watchFile(ctx context.Context, f *personFile, wait bool) {
	if c.hooks.Watch == nil {
		return
	}
	c.mu.Lock()
	if f.watched != nil {
		c.mu.Unlock()
		return
	}
	done := make(chan struct{})
	f.watched = done
	c.mark(f.id)       // until its last sync: a kill may leave writes Litestream had not shipped
	if f.elem != nil { // one that left the cache meanwhile (dropped, hidden) is not counted
		f.counted = true
		c.watched++
	}
	var victims []*personFile
	for e := c.lru.Back(); e != nil && c.hooks.MaxWatched > 0 && c.watched > c.hooks.MaxWatched; {
		v := e.Value.(*personFile)
		prev := e.Prev()
		if v.refs == 0 && v.watched != nil {
			c.removeLocked(v)
			victims = append(victims, v)
		}
		e = prev
	}
	c.mu.Unlock()
	c.closeLater(victims)
	run := func() {
		defer close(done)
		if err := c.hooks.Watch(context.WithoutCancel(ctx), f.path); err != nil {
			c.log.Warn("replication: watch", "path", f.path, "err", err)
		}
	}
	if wait {
		run()
		return
	}
	c.watchers.Go(run)
}

// replicators is how many files replication takes up at once for posts
// (replicate). A take-up costs a few milliseconds of the two cores and a
// few fsyncs (registering the file with Litestream, a sync, and in time
// letting another file go); two keep up with a family and leave the cores
// to the posts under a burst, when files wait their turn in the queue.
const replicators = 2

// wrote records that f, which the caller holds, was just written. A file
// that replication watches needs nothing more: Litestream picks the write
// up within its sync interval. Any other waits in the queue for a
// replicator, so that a post never pays for taking a file up (measured
// under 16 writers on 1,000 people with 64 watched files: 92% of posts
// opened their file again and waited ~30 ms for it, with replication's
// register-and-let-go cycle on the same cores; issue 14's note). A file
// written again while it waits is taken up once.
func (c *fileCache) wrote(f *personFile) {
	if c.hooks.Watch == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.queued[f.id]; ok || f.watched != nil || c.closed {
		return
	}
	c.queued[f.id] = time.Now()
	c.queue = append(c.queue, f.id)
	c.wakeQ.Signal()
	c.mark(f.id) // under mu, so that an unmark never overtakes it
}

// mark and unmark keep on disk (QueueDir) that person id's file may hold
// writes the replica lacks, from its first write not watched, or from its
// take-up, until its last sync succeeded: the next start takes up every
// file marked, so that a kill forgets none (a watched file's last second
// of writes is in its WAL, not yet on the replica). The marker is not synced: an empty
// file's creation costs tens of microseconds; a power cut may lose it,
// and the file then waits for its next write or the nightly sweep.
func (c *fileCache) mark(id string) {
	if c.hooks.QueueDir == "" {
		return
	}
	err := os.WriteFile(filepath.Join(c.hooks.QueueDir, id), nil, privateFile)
	if err != nil && !c.markFailing {
		c.log.Warn("replication: cannot list a waiting file on disk (said once until it works again)", "person", id, "err", err)
	}
	c.markFailing = err != nil
}

// unmark removes person id's marker once replication let go of their file
// after a last sync, unless a write queued them again meanwhile.
func (c *fileCache) unmark(id string) {
	if c.hooks.QueueDir == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.queued[id]; ok {
		return
	}
	if err := os.Remove(filepath.Join(c.hooks.QueueDir, id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.log.Warn("replication: queue marker", "person", id, "err", err)
	}
}

// loadQueue queues the files that a previous run left in the queue on
// disk: written, and maybe not replicated, when it was killed.
func (c *fileCache) loadQueue() {
	if err := os.MkdirAll(c.hooks.QueueDir, privateDir); err != nil {
		c.log.Warn("replication: queue", "err", err)
		return
	}
	es, err := os.ReadDir(c.hooks.QueueDir)
	if err != nil {
		c.log.Warn("replication: queue", "err", err)
		return
	}
	for _, e := range es {
		id := e.Name()
		if !nah.ValidPersonID(id) {
			continue
		}
		if _, ok := c.queued[id]; !ok {
			info, err := e.Info()
			if err != nil {
				continue
			}
			c.queued[id] = info.ModTime() // queued since the marker was made
			c.queue = append(c.queue, id)
		}
	}
	if len(c.queue) > 0 {
		c.log.Info("replication: files written before the last stop wait to be replicated", "files", len(c.queue))
	}
}

// replicate takes files in the queue up for replication, one at a time,
// until the cache closes; closeAll replicates what is left.
func (c *fileCache) replicate() {
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closed {
			c.wakeQ.Wait()
		}
		if c.closed {
			c.mu.Unlock()
			return
		}
		id := c.queue[0]
		c.queue[0] = ""
		c.queue = c.queue[1:]
		delete(c.queued, id)
		if c.hidden[id] {
			// Being deleted, restored or replaced: it waits its turn again,
			// a moment later, rather than be dropped with its write.
			c.mu.Unlock()
			time.Sleep(hiddenRetry)
			c.mu.Lock()
			c.requeueLocked(id)
			c.mu.Unlock()
			continue
		}
		c.mu.Unlock()
		// Watched through the cache, as a write would be: the file is open
		// while it is watched and is let go of only after the app's handle
		// closed, so a post to it never waits for the take-up. (Taking up a
		// closed file without opening it, claimed as the shutdown's drain
		// does, saved an open but made a post to that person wait for the
		// whole take-up: up to seconds with S3 away, TestS3TargetAwayAndBack.)
		// One that is gone meanwhile has nothing to take up (a deleted
		// person's file is watched again if they are restored).
		f, err := c.acquire(context.Background(), id, false)
		if err != nil {
			c.mu.Lock()
			if c.closed {
				c.requeueLocked(id) // the shutdown's drain takes it
			}
			c.mu.Unlock()
			c.unmark(id)
			continue
		}
		c.watchFile(context.Background(), f, true)
		c.release(f)
	}
}

// hiddenRetry is how long a replicator waits before it looks again at a
// queued person who is being deleted, restored or replaced.
const hiddenRetry = 100 * time.Millisecond

// requeueLocked puts person id back at the end of the queue, unless a
// write queued them again meanwhile.
func (c *fileCache) requeueLocked(id string) {
	if _, ok := c.queued[id]; ok {
		return
	}
	c.queued[id] = time.Now()
	c.queue = append(c.queue, id)
	c.wakeQ.Signal()
}

// claimClosedLocked returns a placeholder standing in the closing set for
// person id's file if nobody has it open (nor is opening, closing or
// hiding it), nil otherwise. Until the placeholder is released (syncClosed,
// releaseClaim), a reopen waits, as for any file being closed, so that
// Litestream never lets go of a file the app has open, and nothing else
// claims the file.
func (c *fileCache) claimClosedLocked(id string) *personFile {
	if c.byID[id] != nil || c.closing[id] != nil || c.hidden[id] {
		return nil
	}
	ph := &personFile{id: id, closed: make(chan struct{})}
	c.markClosingLocked(ph)
	return ph
}

// releaseClaim ends a claim of claimClosedLocked.
func (c *fileCache) releaseClaim(ph *personFile) {
	close(ph.closed)
	c.mu.Lock()
	if c.closing[ph.id] == ph {
		delete(c.closing, ph.id)
	}
	c.mu.Unlock()
}

// withClosed runs fn on the path of person id's file while nobody has it
// open and the file is claimed (claimClosedLocked), and says whether it
// did: when the file is open, or about to be, it does nothing.
func (c *fileCache) withClosed(id string, fn func(path string)) bool {
	p, err := c.personPath(id)
	if err != nil {
		return false
	}
	c.mu.Lock()
	ph := c.claimClosedLocked(id)
	c.mu.Unlock()
	if ph == nil {
		return false
	}
	defer c.releaseClaim(ph)
	fn(p)
	return true
}

// syncClosed has replication take up and let go of the file of ph, a
// claim of claimClosedLocked, which it releases, and empties the WAL
// Litestream leaves: the shutdown's drain of the queue. It says whether
// the replica has the whole file (or the file is gone).
func (c *fileCache) syncClosed(ph *personFile) bool {
	defer c.releaseClaim(ph)
	p, err := c.personPath(ph.id)
	if err != nil {
		return true
	}
	if _, err := os.Stat(p); err != nil {
		return true // gone: deleted (a restore watches it again) or purged
	}
	ok := true
	if err := c.hooks.Watch(context.Background(), p); err != nil {
		c.log.Warn("replication: watch", "path", p, "err", err)
	}
	if c.hooks.Unwatch != nil {
		if err := c.hooks.Unwatch(p); err != nil {
			c.log.Warn("replication: last sync", "path", p, "err", err)
			ok = false
		}
	}
	c.leftWAL(p, true)
	return ok
}

// leftWAL deals with the WAL of watched file p once replication let go of
// it (bigWAL): a large one, or any at shutdown, is emptied now, a small one
// is left for the next open (and emptied at shutdown).
func (c *fileCache) leftWAL(p string, final bool) {
	left := !final && walSize(p) <= bigWAL
	if !left {
		if err := checkpointClosed(p); err != nil {
			c.log.Warn("checkpoint after replication", "path", p, "err", err)
		}
	}
	c.mu.Lock()
	if left {
		c.walLeft[p] = true
	} else {
		delete(c.walLeft, p)
	}
	c.mu.Unlock()
}

// queueState is how many written files wait for a replicator, and for
// how long the oldest has waited (its replica is at least that far behind).
func (c *fileCache) queueState() (n int, oldest time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) > 0 {
		oldest = time.Since(c.queued[c.queue[0]])
	}
	return len(c.queue), oldest
}

// markClosingLocked records that f left the cache and will be closed, so
// that a reopen of the same person waits for it: replication must see the
// close before the next open.
func (c *fileCache) markClosingLocked(f *personFile) {
	c.closing[f.id] = f
}

// bigWAL is the size past which a watched file's WAL is checkpointed as
// soon as replication lets go of it. A checkpoint makes Litestream take a
// whole new snapshot when it next watches the file (measured: a 16 KB LTX
// for a 200-moment file instead of 3 KB), so a small WAL is left for the
// next open to read; a large one would make that open slow (31-51 ms for
// a few MB, ../shared/notes/litestream-nah.md). At shutdown every WAL is
// emptied, so that none with anything in it is left behind.
const bigWAL = 4 << 20

func walSize(p string) int64 {
	st, err := os.Stat(p + "-wal")
	if err != nil {
		return 0
	}
	return st.Size()
}

// closeFile closes f's database (which checkpoints its WAL and removes it,
// unless replication watches it) and then tells replication. A watched
// file's WAL cannot be checkpointed by our close (Litestream holds a read
// transaction on it) and outlives Litestream's close: it is checkpointed
// once replication let go if it is large or the store is closing (bigWAL).
func (c *fileCache) closeFile(f *personFile) {
	if err := f.db.Close(); err != nil {
		// The data is safe in the WAL; the next open recovers it.
		c.log.Error("close person file", "path", f.path, "err", err)
	}
	c.mu.Lock()
	watched, final := f.watched, c.closed
	c.mu.Unlock()
	if watched != nil {
		<-watched
		synced := true
		if c.hooks.Unwatch != nil {
			if err := c.hooks.Unwatch(f.path); err != nil {
				c.log.Warn("replication: last sync", "path", f.path, "err", err)
				synced = false
			}
		}
		c.leftWAL(f.path, final)
		if synced {
			c.unmark(f.id)
		}
	} else {
		c.mu.Lock()
		delete(c.walLeft, f.path) // our close was the last: SQLite checkpointed it
		c.mu.Unlock()
	}
	if c.hooks.AfterClose != nil {
		c.hooks.AfterClose(f.path)
	}
	close(f.closed)
	c.mu.Lock()
	if c.closing[f.id] == f {
		delete(c.closing, f.id)
	}
	c.mu.Unlock()
}

// open opens (or creates) one person file and brings its schema up to date.
func (c *fileCache) open(ctx context.Context, p string, create bool) (*sql.DB, error) {
	if create {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return nil, err
		}
	} else if _, err := os.Stat(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nah.Errorf(nah.NotFound, "", "no such person")
		}
		return nil, err
	}
	if c.hooks.BeforeOpen != nil {
		if err := c.hooks.BeforeOpen(p); err != nil {
			return nil, fmt.Errorf("before open %s: %w", p, err)
		}
	}
	db, err := openDB(p, false, 1, personCacheKiB, c.sync, c.hooks.Watch != nil)
	if err == nil && !create {
		err = hasSchema(ctx, db, p)
	}
	if err == nil {
		err = migrate(ctx, db, p, personMigrations)
	}
	if err != nil {
		if db != nil {
			db.Close()
		}
		if c.hooks.AfterClose != nil {
			c.hooks.AfterClose(p)
		}
		return nil, err
	}
	return db, nil
}

// hasSchema checks that an existing person file has a schema. One emptied
// or truncated to nothing reads as a new, empty database, which migrate
// would set up again, and the person's moments would be lost without a
// word: it is a file that cannot be read instead (faults.go).
func hasSchema(ctx context.Context, db *sql.DB, p string) error {
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("%s: read schema version: %w", p, err)
	}
	if v == 0 {
		return fmt.Errorf("%s: %w", p, errNoSchema)
	}
	return nil
}

// openSnapshot opens person file p read-only without its WAL and its
// shared-memory index, for reads on a full disk: the usual opening of a
// closed file makes a 32 KB index, and a full disk has no room for it. It
// is the whole database only while the WAL holds nothing, which is how a
// file is left when its last handle closes, so it refuses otherwise; and
// immutable promises SQLite that nobody writes the file while it reads,
// which holds on a full disk for the one read the handle lives for. The
// handle is the caller's to close; it is outside the cache's bound, but
// only one is open per read in progress, and only while the disk is full.
func openSnapshot(ctx context.Context, p string) (*sql.DB, error) {
	if st, err := os.Stat(p + "-wal"); err == nil && st.Size() > 0 {
		return nil, fmt.Errorf("%s: snapshot: the WAL holds %d bytes", p, st.Size())
	}
	if err := configureSQLite(); err != nil {
		return nil, err
	}
	if strings.ContainsAny(p, "?#") {
		return nil, fmt.Errorf("sqlite: path %q must not contain '?' or '#'", p)
	}
	// immutable: no lock, no WAL, no index; SQLite reads the file alone.
	uri := "file:" + strings.ReplaceAll(p, "%", "%25") + "?mode=ro&immutable=1&_pragma=cache_size(-" + strconv.Itoa(personCacheKiB) + ")"
	db, err := sql.Open("sqlite", uri)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: snapshot: %w", p, err)
	}
	if v != len(personMigrations) {
		db.Close()
		return nil, fmt.Errorf("%s: snapshot: schema version %d, want %d", p, v, len(personMigrations))
	}
	return db, nil
}

// drop takes f out of the cache if it is still there, so that the next
// acquire opens the file afresh; f closes with its last user. For a handle
// that proved broken: kept, it would go on reading the broken file, even
// after a good copy had been renamed over it.
func (c *fileCache) drop(f *personFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID[f.id] == f {
		c.removeLocked(f)
	}
}

// forget drops the file of person id from the cache and closes it now if
// nobody uses it, else with its last user; used before a person's folder
// is removed.
func (c *fileCache) forget(id string) {
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
		if f.db != nil {
			c.closeFile(f)
		}
	}
}

// hide refuses every later open of person id (as NotFound) until unhide,
// and returns once their file is closed: its users finish first, and the
// last one closes it. A person's folder is moved between hide and unhide,
// so that no request reopens the file (or recreates it) in the middle.
func (c *fileCache) hide(id string) {
	c.mu.Lock()
	c.hidden[id] = true
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
		if f.db != nil {
			c.closeFile(f)
		}
	}
	if wait != nil {
		<-wait
	}
}

// unhide lets person id's file be opened again.
func (c *fileCache) unhide(id string) {
	c.mu.Lock()
	delete(c.hidden, id)
	c.mu.Unlock()
}

// state says whether person id's file is in the cache (or being closed),
// and whether the person is hidden (being deleted or restored).
func (c *fileCache) state(id string) (open, hidden bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byID[id] != nil || c.closing[id] != nil, c.hidden[id]
}

// len returns the number of open (or opening) files.
func (c *fileCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// closeAll closes every file; called once at shutdown, after the HTTP server
// has finished its requests. Files still in use close with their last user.
func (c *fileCache) closeAll() {
	c.mu.Lock()
	c.closed = true
	var idle []*personFile
	for e := c.lru.Front(); e != nil; e = e.Next() {
		f := e.Value.(*personFile)
		f.elem = nil
		// In use or not, it is closing: until its last user closes it, the
		// drain below must not let replication touch it.
		c.markClosingLocked(f)
		if f.refs == 0 {
			idle = append(idle, f)
		}
	}
	c.lru.Init()
	c.byID = make(map[string]*personFile)
	c.watched = 0
	c.wakeQ.Broadcast() // the replicators stop; what they left is replicated below
	c.mu.Unlock()
	// Each close checkpoints and fsyncs; a few at a time use both cores
	// without queueing a thousand fsyncs at once.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, f := range idle {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c.closeFile(f)
		})
	}
	wg.Wait()
	c.closers.Wait() // evictions still closing
	c.watchers.Wait()
	// The WALs that watched files left behind when they were let go: none
	// with anything in it stays after a clean stop.
	c.mu.Lock()
	queue := c.queue
	c.queue, c.queued = nil, make(map[string]time.Time)
	c.mu.Unlock()
	// Files written and still waiting for a replicator: every app handle is
	// closed now (or stays with a request cut off by the shutdown timeout,
	// which is skipped), so each is watched and let go of at once, and its
	// WAL emptied below.
	for _, id := range queue {
		c.mu.Lock()
		ph := c.claimClosedLocked(id)
		c.mu.Unlock()
		if ph == nil {
			// In use by a request the shutdown cut off, or being deleted
			// or replaced: its marker stays for the next start.
			c.log.Warn("replication: a written file busy at shutdown is left for the next start", "person", id)
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if c.syncClosed(ph) {
				c.unmark(id)
			}
		})
	}
	wg.Wait()
	c.mu.Lock()
	var left []string
	for p := range c.walLeft {
		left = append(left, p)
	}
	c.walLeft = make(map[string]bool)
	c.mu.Unlock()
	for _, p := range left {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := checkpointClosed(p); err != nil {
				c.log.Warn("checkpoint at shutdown", "path", p, "err", err)
			}
		})
	}
	wg.Wait()
}

// useFile runs fn on the open file of person id, and turns what goes wrong
// with the file into the caller's answer (faults.go): a file that cannot be
// read is Unavailable and listed, and its handle leaves the cache so that
// the next use opens the file afresh; a full disk is InsufficientStorage,
// except that a read goes on through a snapshot of a file that could not be
// opened for lack of space. write says whether fn writes.
func (s *Store) useFile(ctx context.Context, id string, write bool, fn func(f *personFile) error) error {
	f, err := s.files.acquire(ctx, id, false)
	if err != nil {
		if !write && s.kindOf(err) == noSpace && s.readSnapshot(ctx, id, fn) == nil {
			s.noteReadable(id)
			return nil
		}
		return s.fileErr(id, err)
	}
	err = fn(f)
	if err != nil && s.kindOf(err) == unreadable {
		s.files.drop(f)
	}
	if write {
		// Even after an error: the write may have committed before what
		// failed next (a read after it, a cancelled request).
		s.files.wrote(f)
	}
	s.files.release(f)
	if err != nil {
		return s.fileErr(id, err)
	}
	s.noteReadable(id)
	if write {
		s.noteWrote()
	}
	return nil
}

// readSnapshot runs fn on a snapshot of person id's file (openSnapshot).
func (s *Store) readSnapshot(ctx context.Context, id string, fn func(f *personFile) error) error {
	p, err := s.files.personPath(id)
	if err != nil {
		return err
	}
	db, err := openSnapshot(ctx, p)
	if err != nil {
		return err
	}
	defer db.Close()
	return fn(&personFile{id: id, path: p, db: db})
}
