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
	m   store.DigestMark
	err chan error
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
				r.err <- err
			}
		}
	}()
	return c
}

// do writes m and returns once it is committed.
func (c *committer) do(m store.DigestMark) error {
	req := markReq{m: m, err: make(chan error, 1)}
	c.in <- req
	return <-req.err
}

// close ends the committer once every mark sent is written.
func (c *committer) close() {
	close(c.in)
	<-c.done
}
