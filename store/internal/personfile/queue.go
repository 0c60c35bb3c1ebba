package personfile

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nah-app/nah"
)

// queue holds the files written while replication did not watch them,
// oldest first, each once, until a replicator takes them up: bounded by
// the number of people, never by clients. With a dir, each person waiting
// (or watched and not yet let go of after a last sync) is an empty file
// there, so that the next start after a kill takes up every one.
type queue struct {
	dir string
	log *slog.Logger

	mu          sync.Mutex
	ids         []string
	since       map[string]time.Time // the same ids, with when each was queued
	wake        *sync.Cond           // on mu: ids grew or the queue closed
	closed      bool
	done        chan struct{} // closed with the queue
	markFailing bool          // the last marker could not be made
	// marked is the markers on disk, each with when its file was last
	// replicated (zero: still needed). A marker stays markerLinger after
	// that, so that a file written again soon keeps it: its creation and
	// removal were two file system calls a ship (7 % of the server's CPU
	// under the bench's burst, bench/THRESHOLDS.md).
	marked map[string]time.Time
}

// markerLinger is how long a marker stays after its file was replicated.
// A kill within it only has the next start ship the file again (nothing
// to ship, a look at its WAL).
const markerLinger = 10 * time.Second

// agePoll is how often a replicator that waits for the queue to fall
// behind looks at it: a few wakeups a second, no CPU to speak of.
const agePoll = 100 * time.Millisecond

func newQueue(dir string, log *slog.Logger) *queue {
	q := &queue{dir: dir, log: log, since: make(map[string]time.Time), marked: make(map[string]time.Time), done: make(chan struct{})}
	q.wake = sync.NewCond(&q.mu)
	return q
}

// push queues person id, unless queued already or closed, and marks it.
func (q *queue) push(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.since[id]; ok || q.closed {
		return
	}
	q.addLocked(id, time.Now())
	q.markLocked(id) // under mu, so that an unmark never overtakes it
}

// requeue puts person id back at the end of the queue, unless a write
// queued them again meanwhile; closed or not (the shutdown drains it).
func (q *queue) requeue(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.since[id]; !ok {
		q.addLocked(id, time.Now())
	}
}

func (q *queue) addLocked(id string, at time.Time) {
	q.since[id] = at
	q.ids = append(q.ids, id)
	q.wake.Signal()
}

// pop waits for the oldest person queued, queued at least age ago, and
// takes them out; false once the queue is closed. A wait for an age
// looks again every agePoll.
func (q *queue) pop(age time.Duration) (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for !q.closed && (len(q.ids) == 0 || time.Since(q.since[q.ids[0]]) < age) {
		if age == 0 {
			q.wake.Wait()
			continue
		}
		q.mu.Unlock()
		time.Sleep(agePoll)
		q.mu.Lock()
	}
	if q.closed {
		return "", false
	}
	id := q.ids[0]
	q.ids[0] = ""
	q.ids = q.ids[1:]
	delete(q.since, id)
	return id, true
}

// close stops the replicators' pops and refuses later pushes.
func (q *queue) close() {
	q.mu.Lock()
	if !q.closed {
		close(q.done)
	}
	q.closed = true
	q.wake.Broadcast()
	q.mu.Unlock()
}

// take empties the queue and returns what it held, oldest first.
func (q *queue) take() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	ids := q.ids
	q.ids, q.since = nil, make(map[string]time.Time)
	return ids
}

// state is how many people wait, and for how long the oldest has waited.
func (q *queue) state() (n int, oldest time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.ids) > 0 {
		oldest = time.Since(q.since[q.ids[0]])
	}
	return len(q.ids), oldest
}

// mark and unmark keep on disk that person id's file may hold writes the
// replica lacks, from its first write not watched, or from its take-up,
// until its last sync succeeded. The marker is not synced: an empty
// file's creation costs tens of microseconds; a power cut may lose it,
// and the file then waits for its next write or the nightly sweep.
func (q *queue) mark(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.markLocked(id)
}

func (q *queue) markLocked(id string) {
	if q.dir == "" {
		return
	}
	if _, ok := q.marked[id]; ok {
		q.marked[id] = time.Time{}
		return
	}
	err := os.WriteFile(filepath.Join(q.dir, id), nil, 0o600)
	if err != nil && !q.markFailing {
		q.log.Warn("replication: cannot list a waiting file on disk (said once until it works again)", "person", id, "err", err)
	}
	q.markFailing = err != nil
	if err == nil {
		q.marked[id] = time.Time{}
	}
}

// unmark lets person id's marker go once replication let go of their file
// after a last sync, unless a write queued them again meanwhile: removed
// markerLinger later (removeDue), or at once with now.
func (q *queue) unmark(id string, now bool) {
	if q.dir == "" {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.since[id]; ok {
		return
	}
	if _, ok := q.marked[id]; ok && !now {
		q.marked[id] = time.Now()
		return
	}
	q.removeLocked(id)
}

func (q *queue) removeLocked(id string) {
	delete(q.marked, id)
	if err := os.Remove(filepath.Join(q.dir, id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		q.log.Warn("replication: queue marker", "person", id, "err", err)
	}
}

// removeDue removes the markers let go of at least older ago, each under
// the lock on its own so that a post's push never waits for many.
func (q *queue) removeDue(older time.Duration) {
	q.mu.Lock()
	var due []string
	for id, at := range q.marked {
		if !at.IsZero() && time.Since(at) >= older {
			due = append(due, id)
		}
	}
	q.mu.Unlock()
	for _, id := range due {
		q.mu.Lock()
		if at, ok := q.marked[id]; ok && !at.IsZero() {
			q.removeLocked(id)
		}
		q.mu.Unlock()
	}
}

// removeLoop removes the markers due every markerLinger until the queue
// closes.
func (q *queue) removeLoop() {
	t := time.NewTicker(markerLinger)
	defer t.Stop()
	for {
		select {
		case <-q.done:
			return
		case <-t.C:
			q.removeDue(markerLinger)
		}
	}
}

// load queues the files that a previous run left marked on disk: written,
// and maybe not replicated, when it was killed.
func (q *queue) load() {
	if err := os.MkdirAll(q.dir, 0o700); err != nil {
		q.log.Warn("replication: queue", "err", err)
		return
	}
	es, err := os.ReadDir(q.dir)
	if err != nil {
		q.log.Warn("replication: queue", "err", err)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, e := range es {
		id := e.Name()
		if !nah.ValidPersonID(id) {
			continue
		}
		if _, ok := q.since[id]; !ok {
			info, err := e.Info()
			if err != nil {
				continue
			}
			q.addLocked(id, info.ModTime()) // queued since the marker was made
		}
		q.marked[id] = time.Time{}
	}
	if len(q.ids) > 0 {
		q.log.Info("replication: files written before the last stop wait to be replicated", "files", len(q.ids))
	}
}

// Queue is how many written files wait for a replicator, and for how long
// the oldest has waited (its replica is at least that far behind).
func (c *Cache) Queue() (n int, oldest time.Duration) { return c.q.state() }

// Queued says whether person id waits in the queue for a replicator.
func (c *Cache) Queued(id string) bool {
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	_, ok := c.q.since[id]
	return ok
}
