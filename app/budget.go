package app

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/nah-app/nah"
)

// Admission control before memory. Every request holds some memory while it
// runs (its goroutine, buffers, its body, a page of bodies while a slow
// client reads it), and without a bound the sum grows with concurrency
// until the kernel kills the process. So all of it is taken from one
// budget, sized by cmd/nah from NAH_MEMORY_LIMIT, before it is allocated;
// when the budget is spent the request is answered 503 with Retry-After at
// once, rather than queued, since a queue is memory too.
type budget struct {
	limit int64
	used  atomic.Int64
	shed  atomic.Int64 // requests refused, ever
}

// DefaultMemoryBudget is Config.MemoryBudget when zero: what tests and
// tools get. The server's own comes from NAH_MEMORY_LIMIT.
const DefaultMemoryBudget = 64 << 20

// Charges taken from the budget, besides a request's own large buffers.
const (
	// requestCost is what any request holds while it runs: a goroutine
	// (8 KB of stack, often grown), net/http's buffers and the handler's
	// small allocations. 16 KB bounds the number of requests in flight at
	// budget/16 KB (about 5,900 with the server's default budget of 92 MiB)
	// whatever they are.
	requestCost = 16 << 10
	// pageWriterSize is the buffer a page is written through.
	pageWriterSize = 32 << 10
)

// take reserves n bytes, or reports false without reserving anything.
func (b *budget) take(n int64) bool { return b.takeUpTo(n, b.limit) }

// takeBulk is take for the large, client-sized part of a request: the bodies
// of a page read from files, of a post. It stops a quarter short of the
// limit, so that when slow clients of the largest pages hold all they may,
// every other request still finds room for its base cost and a page served
// from heads (most feeds); a page that must read bodies from files waits
// for the bulk share like the rest.
func (b *budget) takeBulk(n int64) bool { return b.takeUpTo(n, b.limit-b.limit/4) }

func (b *budget) takeUpTo(n, limit int64) bool {
	if b.used.Add(n) > limit {
		b.used.Add(-n)
		b.shed.Add(1)
		return false
	}
	return true
}

// give returns n bytes taken before.
func (b *budget) give(n int64) { b.used.Add(-n) }

// errOverloaded is the answer when the budget is spent: try again shortly.
func errOverloaded() error {
	e := nah.Errorf(nah.Unavailable, "overloaded", "the server is busy; try again shortly")
	e.RetryAfter = time.Second
	return e
}

// takeOrOverloaded takes n bytes and returns nil, or an overloaded error.
func (a *App) takeOrOverloaded(n int) error {
	if !a.mem.take(int64(n)) {
		return errOverloaded()
	}
	return nil
}

// takeBulkOrOverloaded is takeOrOverloaded for bodies (takeBulk).
func (a *App) takeBulkOrOverloaded(n int) error {
	if !a.mem.takeBulk(int64(n)) {
		return errOverloaded()
	}
	return nil
}

// admit is the middleware that charges every request its base cost for as
// long as it runs; the API answers 503 in JSON and the console the same
// through its page, both by the one error path.
func (a *App) admit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.mem.take(requestCost) {
			a.refuse(w, r, errOverloaded())
			return
		}
		defer a.mem.give(requestCost)
		next.ServeHTTP(w, r)
	})
}

// The long transfers (the full backup, a nightly copy, an import, a
// person's export) are admitted in two steps: a slot, one of the few of
// their kind that may run at once, then their memory from the budget.
// Each is taken at once or refused (a queue would be memory too), and in
// that order, so that a request refused at either step holds nothing.

// taker takes something a request holds while it runs, or refuses at once
// with the error to answer; give gives it back.
type taker func() (give func(), err error)

// admitTransfer takes slot, then memory; done gives both back.
func admitTransfer(slot, memory taker) (done func(), err error) {
	giveSlot, err := slot()
	if err != nil {
		return nil, err
	}
	giveMemory, err := memory()
	if err != nil {
		giveSlot()
		return nil, err
	}
	return func() {
		giveMemory()
		giveSlot()
	}, nil
}

// oneAtATime is a slot one request holds at a time (the full backup and a
// nightly copy share one, an import has its own): a second is overloaded.
type oneAtATime chan struct{}

func (s oneAtATime) take() (func(), error) {
	select {
	case s <- struct{}{}:
		return func() { <-s }, nil
	default:
		return nil, errOverloaded()
	}
}

// charge takes n bytes of the memory budget (take), or is overloaded.
func (a *App) charge(n int64) taker {
	return func() (func(), error) {
		if err := a.takeOrOverloaded(int(n)); err != nil {
			return nil, err
		}
		return func() { a.mem.give(n) }, nil
	}
}
