package personfile

import (
	"log/slog"
	"sync"
	"time"
)

// queue holds the files written while replication did not watch them,
// oldest first, each once, until a replicator takes them up: bounded by
// the number of people, never by clients. With a dir, each person waiting
// (or watched and not yet let go of after a last sync) is listed in its
// journal of marks (marks.go), so that the next start after a kill takes
// up every one.
type queue struct {
	dir string
	log *slog.Logger

	mu     sync.Mutex
	since  map[string]wait // who is queued, since when
	ids    []place         // their order (addLocked)
	seq    uint64          // places made so far
	wake   *sync.Cond      // on mu: ids grew or the queue closed
	closed bool
	done   chan struct{} // closed with the queue
	marks  marks         // on mu
}

// wait is when a person was queued, and their place's number.
type wait struct {
	at  time.Time
	seq uint64
}

// place is one person's place in the queue's order: theirs while since
// holds the same number, else left behind by a claim or a pop.
type place struct {
	id  string
	seq uint64
}

// agePoll is how often a replicator that waits for the queue to fall
// behind looks at it: a few wakeups a second, no CPU to speak of.
const agePoll = 100 * time.Millisecond

func newQueue(dir string, log *slog.Logger) *queue {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	q := &queue{dir: dir, log: log, since: make(map[string]wait), done: make(chan struct{})}
	q.marks = marks{dir: dir, log: log, set: make(map[string]bool)}
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

// putBack puts person id, claimed while waiting since at, at the front of
// the queue, unless a write queued them again meanwhile: the file could
// not be shipped, and waits to be taken up, as long as it has waited.
func (q *queue) putBack(id string, at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.since[id]; ok {
		return
	}
	q.seq++
	q.since[id] = wait{at, q.seq}
	q.ids = append([]place{{id, q.seq}}, q.ids...)
	q.wake.Signal()
}

// addLocked queues id at the end. A claim leaves its place in ids until
// it reaches the front, so ids is rebuilt from since once it has twice as
// many places as people queued: bounded by the people, never by posts.
func (q *queue) addLocked(id string, at time.Time) {
	if len(q.ids) >= 2*len(q.since)+64 {
		q.ids = q.orderLocked()
	}
	q.seq++
	q.since[id] = wait{at, q.seq}
	q.ids = append(q.ids, place{id, q.seq})
	q.wake.Signal()
}

func (q *queue) live(p place) bool {
	w, ok := q.since[p.id]
	return ok && w.seq == p.seq
}

// orderLocked is the places of who is queued, oldest first.
func (q *queue) orderLocked() []place {
	out := make([]place, 0, len(q.since))
	for _, p := range q.ids {
		if q.live(p) {
			out = append(out, p)
		}
	}
	return out
}

// trimLocked drops the places left behind at the front.
func (q *queue) trimLocked() {
	for len(q.ids) > 0 && !q.live(q.ids[0]) {
		q.ids[0] = place{}
		q.ids = q.ids[1:]
	}
}

// pop waits for the oldest person queued, queued at least age ago, and
// takes them out; false once the queue is closed. A wait for an age
// looks again every agePoll.
func (q *queue) pop(age time.Duration) (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		q.trimLocked()
		if q.closed {
			return "", false
		}
		if len(q.ids) > 0 && time.Since(q.since[q.ids[0].id].at) >= age {
			break
		}
		if age == 0 {
			q.wake.Wait()
			continue
		}
		q.mu.Unlock()
		time.Sleep(agePoll)
		q.mu.Lock()
	}
	id := q.ids[0].id
	q.ids[0] = place{}
	q.ids = q.ids[1:]
	delete(q.since, id)
	return id, true
}

// claim takes person id out of the queue wherever they wait, and says
// since when, and whether they were queued: their file is about to close,
// and is shipped first (closeFile).
func (q *queue) claim(id string) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w, ok := q.since[id]
	if ok {
		delete(q.since, id)
	}
	return w.at, ok
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
	var ids []string
	for _, p := range q.orderLocked() {
		ids = append(ids, p.id)
	}
	q.ids, q.since = nil, make(map[string]wait)
	return ids
}

// state is how many people wait, and for how long the oldest has waited.
func (q *queue) state() (n int, oldest time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.trimLocked()
	if len(q.ids) > 0 {
		oldest = time.Since(q.since[q.ids[0].id].at)
	}
	return len(q.since), oldest
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
	if _, ok := q.since[id]; ok {
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
		if _, ok := q.since[id]; !ok {
			q.addLocked(id, at[id]) // queued since it was marked
		}
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
