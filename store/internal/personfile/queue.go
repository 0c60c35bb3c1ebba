package personfile

import (
	"container/heap"
	"log/slog"
	"sync"
	"time"
)

// queue holds every person file written and not yet on the replica, each
// once, until a replicator ships it, takes it up or syncs it: bounded by
// the number of people, never by clients. Each waits since its oldest
// write the replica lacks (at: the lag) and is handed out once due: at
// once when not watched, at most once a syncEvery when watched (Wrote).
// With a dir, each person waiting (or watched and not yet let go of after
// a last sync) is listed in its journal of marks (marks.go), so that the
// next start after a kill takes up every one.
type queue struct {
	dir string
	log *slog.Logger

	mu     sync.Mutex
	byID   map[string]*entry // who is queued
	due    order             // those not watched when queued, by when they are due
	synced order             // the watched ones, by when they are due
	age    order             // all, by since when they wait
	seq    uint64            // entries made so far
	closed bool
	done   chan struct{} // closed with the queue
	marks  marks         // on mu
}

// entry is one person waiting: since when, from when a replicator may
// take them, and their place in each order (-1: not in it). An entry is
// in due or in synced, as its file was watched or not when it was queued.
type entry struct {
	id      string
	at, due time.Time
	last    time.Time // the newest write queued
	seq     uint64    // first come, first served among equal times
	idx     [3]int    // in due, in age, in synced
}

// order is a heap of the queue's entries by due (k 0 and 2) or by at (k 1).
// Those who pop from it (due, synced) wait on its wake, on the queue's mu:
// an entry came or came due sooner, or the queue closed. One cond an
// order, so that a post's write wakes one replicator, not the syncers too.
type order struct {
	k    int
	es   []*entry
	wake *sync.Cond
}

func (o *order) key(e *entry) time.Time {
	if o.k == 1 {
		return e.at
	}
	return e.due
}

func (o *order) Len() int { return len(o.es) }

func (o *order) Less(i, j int) bool {
	a, b := o.es[i], o.es[j]
	if ka, kb := o.key(a), o.key(b); !ka.Equal(kb) {
		return ka.Before(kb)
	}
	return a.seq < b.seq
}

func (o *order) Swap(i, j int) {
	o.es[i], o.es[j] = o.es[j], o.es[i]
	o.es[i].idx[o.k], o.es[j].idx[o.k] = i, j
}

func (o *order) Push(x any) {
	e := x.(*entry)
	e.idx[o.k] = len(o.es)
	o.es = append(o.es, e)
}

func (o *order) Pop() any {
	n := len(o.es) - 1
	e := o.es[n]
	o.es[n] = nil
	o.es = o.es[:n]
	return e
}

// agePoll is how often a replicator that waits for the queue to fall
// behind looks at it: a few wakeups a second, no CPU to speak of.
const agePoll = 100 * time.Millisecond

func newQueue(dir string, log *slog.Logger) *queue {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	q := &queue{dir: dir, log: log, byID: make(map[string]*entry), due: order{k: 0}, age: order{k: 1}, synced: order{k: 2}, done: make(chan struct{})}
	q.marks = marks{dir: dir, log: log, set: make(map[string]bool)}
	q.due.wake, q.synced.wake = sync.NewCond(&q.mu), sync.NewCond(&q.mu)
	return q
}

// push queues person id, written now and due at once, unless closed, and
// marks it; queued already, it keeps its older time.
func (q *queue) push(id string) { q.pushDue(id, time.Time{}, false) }

// pushDue is push for a write not to be handed out before due, of a
// watched file (a syncer may take it) or not.
func (q *queue) pushDue(id string, due time.Time, watched bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	now := time.Now()
	if due.Before(now) {
		due = now
	}
	q.putLocked(id, now, due, watched)
	q.markLocked(id) // under mu, so that an unmark never overtakes it
}

// requeue puts person id back in the queue, due now, closed or not (the
// shutdown drains it).
func (q *queue) requeue(id string) {
	now := time.Now()
	q.put(id, now, now, false)
}

// putBack puts person id, claimed while waiting since at, back in the
// queue first: the file could not be shipped, and waits to be taken up,
// as long as it has waited.
func (q *queue) putBack(id string, at time.Time) { q.put(id, at, time.Time{}, false) }

// put queues person id since at, due then, watched or not; queued
// already, they keep the older of the two times, and the sooner of the
// two dues.
func (q *queue) put(id string, at, due time.Time, watched bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.putLocked(id, at, due, watched)
}

func (q *queue) putLocked(id string, at, due time.Time, watched bool) {
	e := q.byID[id]
	if e != nil && at.After(e.last) {
		e.last = at
	}
	switch {
	case e == nil:
		q.seq++
		e = &entry{id: id, at: at, due: due, last: at, seq: q.seq, idx: [3]int{-1, -1, -1}}
		q.byID[id] = e
		heap.Push(&q.age, e)
		heap.Push(q.orderOf(e, watched), e)
	case at.Before(e.at) || due.Before(e.due):
		e.at, e.due = minTime(e.at, at), minTime(e.due, due)
		heap.Fix(&q.age, e.idx[1])
		o := q.orderOf(e, false)
		heap.Fix(o, e.idx[o.k])
	default:
		return
	}
	q.orderOf(e, watched).wake.Signal()
}

// orderOf is the order e waits in: synced if it was queued while watched,
// else due; for an entry not in either yet, the one watched says.
func (q *queue) orderOf(e *entry, watched bool) *order {
	if e.idx[2] >= 0 || e.idx[0] < 0 && watched {
		return &q.synced
	}
	return &q.due
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// removeLocked takes e out of the queue.
func (q *queue) removeLocked(e *entry) {
	heap.Remove(&q.age, e.idx[1])
	o := q.orderOf(e, false)
	heap.Remove(o, e.idx[o.k])
	delete(q.byID, e.id)
}

// pop waits for the person due first of those queued while not watched,
// while the oldest write queued is at least age old, and takes them out,
// with since when they waited; false once the queue is closed. A wait for
// an age looks again every agePoll.
func (q *queue) pop(age time.Duration) (string, time.Time, bool) { return q.popFrom(&q.due, age) }

// popSync is pop(0) of those queued while watched, for the syncers.
func (q *queue) popSync() (string, time.Time, bool) { return q.popFrom(&q.synced, 0) }

func (q *queue) popFrom(o *order, age time.Duration) (string, time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.closed {
			return "", time.Time{}, false
		}
		var wait time.Duration
		if len(o.es) > 0 {
			e := o.es[0]
			wait = time.Until(e.due)
			if wait <= 0 && (age == 0 || time.Since(q.age.es[0].at) >= age) {
				q.removeLocked(e)
				return e.id, e.at, true
			}
		}
		switch {
		case age > 0:
			q.mu.Unlock()
			time.Sleep(agePoll)
			q.mu.Lock()
		case len(o.es) == 0:
			o.wake.Wait()
		default:
			// The first is due later: woken then, or by a push due sooner.
			t := time.AfterFunc(wait, func() {
				q.mu.Lock()
				o.wake.Broadcast()
				q.mu.Unlock()
			})
			o.wake.Wait()
			t.Stop()
		}
	}
}

// claim takes person id out of the queue wherever they wait, and says
// since when, and whether they were queued: their file is about to close,
// and is shipped first (closeFile), or was let go of after a last sync.
func (q *queue) claim(id string) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.byID[id]
	if e == nil {
		return time.Time{}, false
	}
	q.removeLocked(e)
	return e.at, true
}

// syncedSince takes person id, queued while watched, out of the queue if
// their newest write queued came before began: a sync that began then
// shipped them all. One queued while not watched waits for its ship.
func (q *queue) syncedSince(id string, began time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.byID[id]; e != nil && e.idx[2] >= 0 && e.last.Before(began) {
		q.removeLocked(e)
	}
}

// close stops the replicators' pops and refuses later pushes.
func (q *queue) close() {
	q.mu.Lock()
	if !q.closed {
		close(q.done)
	}
	q.closed = true
	q.due.wake.Broadcast()
	q.synced.wake.Broadcast()
	q.mu.Unlock()
}

// take empties the queue and returns what it held, oldest first.
func (q *queue) take() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var ids []string
	for len(q.age.es) > 0 {
		ids = append(ids, heap.Pop(&q.age).(*entry).id)
	}
	q.due.es, q.synced.es, q.byID = nil, nil, make(map[string]*entry)
	return ids
}

// state is how many people wait, and for how long the oldest has waited.
func (q *queue) state() (n int, oldest time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.age.es) > 0 {
		oldest = time.Since(q.age.es[0].at)
	}
	return len(q.byID), oldest
}

// since is since when person id has waited, and whether they wait.
func (q *queue) since(id string) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.byID[id]; e != nil {
		return e.at, true
	}
	return time.Time{}, false
}

// mark and unmark keep on disk that person id's file may hold writes the
// replica lacks, from its first write not watched, or from its take-up,
// until its last sync succeeded (marks.go).
func (q *queue) mark(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.markLocked(id)
}

func (q *queue) markLocked(id string) {
	if q.dir != "" {
		q.marks.add(id)
	}
}

// unmark lets person id's mark go once replication let go of their file
// after a last sync, unless a write queued them again meanwhile.
func (q *queue) unmark(id string) {
	if q.dir == "" {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.byID[id] != nil {
		return
	}
	q.marks.remove(id)
}

// flush leaves the journal holding the marks alone, at a clean stop.
func (q *queue) flush() {
	if q.dir == "" {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.marks.close()
}

// load queues the files that a previous run left marked on disk: written,
// and maybe not replicated, when it was killed.
func (q *queue) load() {
	ids, at, err := q.marks.load()
	if err != nil {
		q.log.Warn("replication: queue", "err", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, id := range ids {
		q.putLocked(id, at[id], at[id], false) // queued since it was marked
	}
	if len(q.byID) > 0 {
		q.log.Info("replication: files written before the last stop wait to be replicated", "files", len(q.byID))
	}
}

// Queue is how many written files wait for a replicator, and for how long
// the oldest has waited (its replica is at least that far behind).
func (c *Cache) Queue() (n int, oldest time.Duration) { return c.q.state() }

// Queued says whether person id waits in the queue for a replicator.
func (c *Cache) Queued(id string) bool {
	_, ok := c.q.since(id)
	return ok
}

// Synced records that replication synced person id's file, watched, in a
// sync that began at began and not asked by the queue (the catch-up loop,
// "Sync now", a drill): the writes queued before then are on the replica.
// A file not watched now had nothing synced.
func (c *Cache) Synced(id string, began time.Time) {
	if c.watchedFile(id) != nil {
		c.q.syncedSince(id, began)
	}
}

// QueuedSince is since when person id has waited in the queue (the age of
// the oldest write of theirs the replica lacks), and whether they wait.
func (c *Cache) QueuedSince(id string) (time.Time, bool) { return c.q.since(id) }
