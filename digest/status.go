package digest

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// What the loop keeps for the console and the metrics: totals since
// start, the relay's latency, the last run, sends per minute over the last
// day and the last relay errors. All of it is bounded: a ring of 1,440
// minutes and one of 10 errors.

// Run is what one minute's run did. People are counted once each: due,
// and of those, with something new; then sent (at least one device took
// the push), failed (none did), or skipped (nothing new, no device, or no
// relay configured).
type Run struct {
	At       time.Time // the loop's clock when the run began
	Due      int
	WithNew  int
	Sent     int
	Failed   int
	Skipped  int
	Left     int           // due, not reached before the run's deadline: the next minute takes them
	Duration time.Duration // wall time of the run
	P95      time.Duration // per person with something new: count, claim, push, finish
}

// Totals are counters since start, for the metrics.
type Totals struct {
	Due, Sent, Failed, Skipped int64
	// Key change pushes (KeyChanged): taken by the relay, failed (the
	// relay refused or did not answer), dropped (the queue was full).
	KeyChangesSent, KeyChangesFailed, KeyChangesDropped int64
	// RelayLatency is every relay request's latency: cumulative counts
	// per bound of LatencyBounds, then the total.
	RelayLatency []int64
	RelaySum     time.Duration
	RelayCount   int64
}

// LatencyBounds are the relay latency histogram's bounds (the last is
// +Inf), in seconds.
var LatencyBounds = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, math.Inf(1)}

type histogram struct {
	counts [11]atomic.Int64 // len(LatencyBounds)
	sumNs  atomic.Int64
	n      atomic.Int64
}

func (h *histogram) observe(d time.Duration) {
	i, _ := slices.BinarySearch(LatencyBounds, d.Seconds())
	h.counts[min(i, len(LatencyBounds)-1)].Add(1)
	h.sumNs.Add(int64(d))
	h.n.Add(1)
}

// RelayError is one failure of the relay, without any token.
type RelayError struct {
	At      time.Time
	Message string
}

// Status is what the console's Digests page shows.
type Status struct {
	RelayConfigured bool
	RelayHost       string // the relay's host, without path or credentials
	Last            Run    // zero before the first run
	// SendsPerMinute is the pushes the relay took in each minute of the
	// last day, oldest first, ending with the current minute.
	SendsPerMinute []int
	Errors         []RelayError // newest first
}

const (
	dayMinutes = 24 * 60
	keptErrors = 10
)

// board holds the loop's status between runs.
type board struct {
	due, sent, failed, skipped atomic.Int64
	latency                    histogram

	keySent, keyFailed, keyDropped atomic.Int64 // key change pushes

	mu     sync.Mutex
	last   Run
	minute [dayMinutes]struct{ at, n int64 } // at: unix minute of the slot
	errs   []RelayError
}

func (b *board) delivered(now time.Time) {
	m := now.Unix() / 60
	b.mu.Lock()
	s := &b.minute[m%dayMinutes]
	if s.at != m {
		s.at, s.n = m, 0
	}
	s.n++
	b.mu.Unlock()
}

func (b *board) relayError(now time.Time, err error) {
	b.mu.Lock()
	b.errs = append([]RelayError{{At: now, Message: err.Error()}}, b.errs[:min(len(b.errs), keptErrors-1)]...)
	b.mu.Unlock()
}

func (b *board) finished(r Run) {
	b.due.Add(int64(r.Due))
	b.sent.Add(int64(r.Sent))
	b.failed.Add(int64(r.Failed))
	b.skipped.Add(int64(r.Skipped))
	b.mu.Lock()
	b.last = r
	b.mu.Unlock()
}

func (b *board) sendsPerMinute(now time.Time) []int {
	cur := now.Unix() / 60
	out := make([]int, dayMinutes)
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range dayMinutes {
		m := cur - int64(dayMinutes-1-k)
		if s := b.minute[m%dayMinutes]; s.at == m {
			out[k] = int(s.n)
		}
	}
	return out
}

func (b *board) totals() Totals {
	t := Totals{Due: b.due.Load(), Sent: b.sent.Load(), Failed: b.failed.Load(), Skipped: b.skipped.Load(),
		KeyChangesSent: b.keySent.Load(), KeyChangesFailed: b.keyFailed.Load(), KeyChangesDropped: b.keyDropped.Load(),
		RelaySum: time.Duration(b.latency.sumNs.Load()), RelayCount: b.latency.n.Load()}
	var cum int64
	for i := range b.latency.counts {
		cum += b.latency.counts[i].Load()
		t.RelayLatency = append(t.RelayLatency, cum)
	}
	return t
}
