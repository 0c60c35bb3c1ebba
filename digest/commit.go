package digest

import (
	"context"

	"github.com/nah-app/nah/store"
)

// committer groups the digest marks of a run's workers into shared
// transactions: a worker's claim waits for its commit (it must be durable
// before the push goes), and the claims that arrive meanwhile share the
// next one, so 2,000 people due at once cost ~130 fsyncs, not 2,000.
type committer struct {
	in   chan markReq
	done chan struct{}
}

type markReq struct {
	m    store.DigestMark
	done func(error) // called by the committer once the mark's commit ends
}

// maxMarkBatch bounds one transaction: a write holds the directory's one
// writer, which sign-ins and posts' flushes wait for.
const maxMarkBatch = 256

func newCommitter(s *store.Store) *committer {
	c := &committer{in: make(chan markReq), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for req := range c.in {
			batch := []markReq{req}
		more:
			for len(batch) < maxMarkBatch {
				select {
				case r, ok := <-c.in:
					if !ok {
						break more
					}
					batch = append(batch, r)
				default:
					break more
				}
			}
			marks := make([]store.DigestMark, len(batch))
			for i, r := range batch {
				marks[i] = r.m
			}
			err := s.MarkDigests(context.Background(), marks)
			for _, r := range batch {
				r.done(err)
			}
		}
	}()
	return c
}

// do writes m and returns once it is committed.
func (c *committer) do(m store.DigestMark) error {
	errc := make(chan error, 1)
	c.in <- markReq{m, func(err error) { errc <- err }}
	return <-errc
}

// later writes m without waiting; failed, if the write fails, is called
// from the committer.
func (c *committer) later(m store.DigestMark, failed func(error)) {
	c.in <- markReq{m, func(err error) {
		if err != nil {
			failed(err)
		}
	}}
}

// close ends the committer once every mark sent is written.
func (c *committer) close() {
	close(c.in)
	<-c.done
}
