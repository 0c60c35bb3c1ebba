// Package digest runs the daily digests: one loop inside the server that,
// each minute, finds the people whose local digest minute it is, counts
// what is new for them from their connections, and sends one push per
// device through the push relay, spread over the first seconds of the
// minute. It has its own clock, start, stop and relay client, reads and
// writes only through store, and app reads its Status and Totals.
//
// Exactly once a day (docs/api.md "Daily digests"): a slot (schedule.go) is
// claimed in the directory before its pushes and marked done after, batched
// into one transaction; a claimed slot is never claimed again that local
// day, one claimed but not done is resent with the same digest id, and a
// slot more than an hour old is not sent.
package digest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// Config configures the loop. Zero values take the defaults below.
type Config struct {
	// RelayURL is NAH_PUSH_RELAY_URL; empty: digests are computed and
	// counted, not sent. RelayToken is NAH_PUSH_RELAY_TOKEN, a secret.
	RelayURL, RelayToken string
	// Now is the loop's clock; default time.Now. Tests call Run with their
	// own times instead of waiting for minutes.
	Now func() time.Time
	// Spread is how long after the start of a minute the last push may
	// start: DefaultSpread; negative for all at once.
	Spread   time.Duration
	Workers  int           // pushes in flight at once; DefaultWorkers
	Timeout  time.Duration // per relay request; DefaultTimeout
	Attempts int           // tries per push; DefaultAttempts
	Backoff  time.Duration // before the first retry, doubling; DefaultBackoff
	Logger   *slog.Logger  // default: discard
}

// Defaults. Sends are spread over 10 s so that 5,000 people who all chose
// 08:00 reach the relay at ~500 a second rather than at once. 16 workers
// keep 16 requests in flight: at the relay's usual ~10 ms that is ~1,600
// pushes a second, well above the spread's rate, while the counting that
// opens person files stays within a fraction of the file cache. A try that
// takes 5 s has failed; three tries with 0.5 s and 1 s of backoff
// (jittered) give a relay that blinks a second and a half to come back.
const (
	DefaultSpread   = 10 * time.Second
	DefaultWorkers  = 16
	DefaultTimeout  = 5 * time.Second
	DefaultAttempts = 3
	DefaultBackoff  = 500 * time.Millisecond
)

// Bounds of one run.
const (
	// catchUp is how late a slot may still be sent: a server that was
	// down at someone's digest minute sends it once when it is back within
	// the hour, and not at all after that.
	catchUp = time.Hour
	// runBudget is how long a run may dispatch pushes: it ends before the
	// next minute's run is due, so runs never overlap and never queue. The
	// people it did not reach are not claimed, and the next run (which
	// takes the current minute's people first) catches them up.
	runBudget = 50 * time.Second
	// firstDigestWindow is what a first digest counts: the day before it.
	firstDigestWindow = 24 * time.Hour
	// devicesAtOnce bounds one person's pushes in flight: all their
	// devices (nah.MaxDevices) at once, so ten devices on a relay that hangs
	// cost one person's budget, not ten times three tries one after
	// another, which held a worker for minutes and delayed the next
	// people. At most Workers x 10 requests are in flight.
	devicesAtOnce = nah.MaxDevices
)

// personBudget is how long one person's pushes may take in all: two tries'
// time (10 s by default). What a hanging relay has not answered by then
// has failed, and the worker goes on to the next person.
func (l *Loop) personBudget() time.Duration { return 2 * l.cfg.Timeout }

// retriesPerRun bounds a run's retries: a few for a relay that blinks,
// plus one for every ten pushes; a relay that is down costs each push one
// try, not three.
func retriesPerRun(pushes int) int64 { return 20 + int64(pushes)/10 }

// Loop is the digest loop. Start it after the store is open and Stop it
// before the store closes.
type Loop struct {
	cfg   Config
	store *store.Store
	log   *slog.Logger
	relay *relay // nil when no relay is configured
	board board

	zones map[string]*time.Location // by name: the zone database's names only, so bounded

	keyChanges chan keyChange // keychange.go
	keyStopped chan struct{}

	stop     chan struct{}
	stopped  chan struct{}
	started  bool
	stopOnce sync.Once
}

// New makes a loop on an open store. A relay URL that is not an http or
// https URL is an error.
func New(cfg Config, s *store.Store, log *slog.Logger) (*Loop, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Spread == 0 {
		cfg.Spread = DefaultSpread
	}
	cfg.Spread = max(cfg.Spread, 0)
	cfg.Workers = cmp.Or(cfg.Workers, DefaultWorkers)
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.Attempts = cmp.Or(cfg.Attempts, DefaultAttempts)
	cfg.Backoff = cmp.Or(cfg.Backoff, DefaultBackoff)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Loop{cfg: cfg, store: s, log: log, zones: make(map[string]*time.Location),
		keyChanges: make(chan keyChange, keyChangeQueue), keyStopped: make(chan struct{}),
		stop: make(chan struct{}), stopped: make(chan struct{})}
	if cfg.RelayURL != "" {
		if err := CheckRelayURL(cfg.RelayURL); err != nil {
			return nil, err
		}
		l.relay = newRelay(cfg, &l.board.latency)
	}
	return l, nil
}

// CheckRelayURL says what is wrong with a relay URL, or nil.
func CheckRelayURL(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("want the http or https URL of the push relay, such as https://push.example.com/v1/push")
	}
	return nil
}

// Start runs the loop in its own goroutine: a run at once (catching up
// what the last hour owes), then one at the start of every minute; and the
// sender of key change pushes (KeyChanged) in another.
func (l *Loop) Start() {
	l.started = true
	go l.loop()
	go l.sendKeyChanges()
}

// Stop ends the loop: no push starts or retries after it is called, and it
// returns once the tries under way have finished (each within Timeout) and
// their people are marked done.
func (l *Loop) Stop() {
	l.stopOnce.Do(func() { close(l.stop) })
	if l.started {
		<-l.stopped
		<-l.keyStopped
	}
}

func (l *Loop) loop() {
	defer close(l.stopped)
	for {
		l.Run(l.cfg.Now())
		now := l.cfg.Now()
		t := time.NewTimer(now.Truncate(time.Minute).Add(time.Minute).Sub(now))
		select {
		case <-t.C:
		case <-l.stop:
			t.Stop()
			return
		}
	}
}

// job is one person owed a digest.
type job struct {
	person  string
	slot    int64 // unix ms
	from    int64 // the window is (from, slot]
	devices int
	resumed bool // claimed before, not done: a crash cut it off
}

// Run does one minute's work as of now, and returns what it did. The loop
// calls it every minute; tests and the benchmark call it with their own
// times. Runs must not overlap: the loop's do not.
func (l *Loop) Run(now time.Time) (r Run) {
	start := time.Now()
	ctx := context.Background()
	r.At = now
	defer func() {
		r.Duration = time.Since(start)
		l.board.finished(r)
	}()
	jobs, err := l.due(ctx, now)
	if err != nil {
		l.log.Error("digests: read the schedule", "err", err)
		return r
	}
	r.Due = len(jobs)
	// Nothing new by the in-memory times, or nowhere to send: done at
	// once, without opening a file, in one transaction.
	var quiet []store.DigestMark
	var busy []job
	for _, j := range jobs {
		if !j.resumed && (j.devices == 0 || !l.store.MaybeNew(ctx, j.person, j.from)) {
			quiet = append(quiet, store.DigestMark{Person: j.person, Slot: j.slot, From: j.from, Done: true})
			continue
		}
		busy = append(busy, j)
	}
	if len(quiet) > 0 {
		if err := l.store.MarkDigests(ctx, quiet); err != nil {
			l.log.Error("digests: mark the quiet ones done", "err", err)
		}
		r.Skipped += len(quiet)
	}
	if len(busy) == 0 {
		return r
	}
	l.send(now, start, busy, &r)
	return r
}

// due reads the schedule and returns the people owed a digest at now,
// the newest slots first (so that this minute's people go before the
// catching-up of earlier ones).
func (l *Loop) due(ctx context.Context, now time.Time) ([]job, error) {
	rows, err := l.store.DigestSchedules(ctx)
	if err != nil {
		return nil, err
	}
	var jobs []job
	for _, d := range rows {
		loc, ok := l.zones[d.Timezone]
		if !ok {
			if loc, err = nah.LoadZone(d.Timezone); err != nil {
				continue // checked when saved; a zone the database dropped
			}
			l.zones[d.Timezone] = loc
		}
		s := lastSlot(now, d.Minute, loc)
		slot := s.UnixMilli()
		switch {
		case now.Sub(s) >= catchUp, slot < d.UpdatedAt, d.LastDigestAt > slot:
			continue // too late, chosen after the slot, or a later slot claimed
		case d.LastDigestAt == slot:
			if d.DoneAt != slot {
				jobs = append(jobs, job{d.Person, slot, d.CountedFrom, d.Devices, true})
			}
			continue
		case d.LastDigestAt != 0 && sameLocalDay(time.UnixMilli(d.LastDigestAt), s, loc):
			continue // today's digest went out at another time before a change of settings
		}
		from := d.LastDigestAt
		if from == 0 {
			from = slot - firstDigestWindow.Milliseconds()
		}
		jobs = append(jobs, job{d.Person, slot, from, d.Devices, false})
	}
	slices.SortFunc(jobs, func(a, b job) int {
		return cmp.Or(cmp.Compare(b.slot, a.slot), strings.Compare(a.person, b.person))
	})
	return jobs, nil
}

// send spreads the busy people's digests over the minute and runs them on
// the worker pool.
func (l *Loop) send(now, start time.Time, busy []job, r *Run) {
	pushes := 0
	for _, j := range busy {
		pushes += j.devices
	}
	budget := &retryBudget{}
	budget.left.Store(retriesPerRun(pushes))
	marks := newCommitter(l.store)
	defer marks.close()
	deadline := time.NewTimer(runBudget - time.Since(start))
	defer deadline.Stop()
	// The run's deadline ends the pushes under way too, not only the
	// dispatch of new ones. The loop's stop ends only retries: a try it cut
	// off may have reached the relay, and the next start would push again.
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(runBudget))
	defer cancel()

	var mu sync.Mutex // guards r and took
	took := make([]time.Duration, 0, len(busy))
	work := make(chan job)
	var wg sync.WaitGroup
	for range l.cfg.Workers {
		wg.Go(func() {
			for j := range work {
				t0 := time.Now()
				res := l.digest(ctx, j, marks, budget)
				d := time.Since(t0)
				mu.Lock()
				switch res {
				case resultSent:
					r.WithNew++
					r.Sent++
				case resultFailed:
					r.WithNew++
					r.Failed++
				case resultUnsent:
					r.WithNew++
					r.Skipped++
				case resultNothing:
					r.Skipped++
				case resultError:
					r.Failed++
				}
				if res != resultNothing {
					took = append(took, d)
				}
				mu.Unlock()
			}
		})
	}
	n := len(busy)
dispatch:
	for i, j := range busy {
		// Person i starts i/n of the way through the spread.
		at := start.Add(l.cfg.Spread * time.Duration(i) / time.Duration(n))
		if wait := time.Until(at); wait > 0 {
			select {
			case <-time.After(wait):
			case <-l.stop:
				r.Left = n - i
				break dispatch
			case <-deadline.C:
				r.Left = n - i
				break dispatch
			}
		}
		select {
		case work <- j:
		case <-l.stop:
			r.Left = n - i
			break dispatch
		case <-deadline.C:
			r.Left = n - i
			break dispatch
		}
	}
	close(work)
	wg.Wait()
	if r.Left > 0 {
		l.log.Warn("digests: the run ended before everyone due was reached; the next run takes them", "left", r.Left)
	}
	slices.Sort(took)
	if len(took) > 0 {
		r.P95 = took[(len(took)*95+99)/100-1]
	}
}

type result int

const (
	resultNothing result = iota // nothing new after all
	resultSent                  // at least one device took it
	resultFailed                // no device took it
	resultUnsent                // something new, no relay configured
	resultError                 // counting or claiming failed: the next run tries again
)

// digest counts, claims, pushes and finishes one person's digest.
func (l *Loop) digest(run context.Context, j job, marks *committer, budget *retryBudget) result {
	ctx := context.Background()
	count, authors, err := l.store.CountNew(ctx, j.person, j.from, j.slot)
	if err != nil {
		l.log.Error("digests: count what is new", "person", j.person, "err", err)
		return resultError
	}
	mark := store.DigestMark{Person: j.person, Slot: j.slot, From: j.from}
	if count == 0 || l.relay == nil {
		mark.Done = true
		if err := marks.do(mark); err != nil {
			l.log.Error("digests: mark done", "person", j.person, "err", err)
		}
		if count == 0 {
			return resultNothing
		}
		return resultUnsent
	}
	if !j.resumed {
		if err := marks.do(mark); err != nil {
			l.log.Error("digests: claim", "person", j.person, "err", err)
			return resultError // not claimed: the next run tries again
		}
	}
	devices, err := l.store.Devices().List(ctx, j.person)
	if err != nil {
		l.log.Error("digests: read devices", "person", j.person, "err", err)
		return resultError // claimed, not done: the next run resumes it
	}
	p := push{DigestID: digestID(j.person, j.slot), Title: "nah", Body: bodyText(count, authors), Count: count, Authors: authors}
	pctx, cancel := context.WithTimeout(run, l.personBudget())
	defer cancel()
	var (
		mu   sync.Mutex
		res  = resultFailed
		wg   sync.WaitGroup
		slot = make(chan struct{}, devicesAtOnce)
	)
	for _, d := range devices {
		slot <- struct{}{}
		wg.Go(func() {
			defer func() { <-slot }()
			p := p
			p.Token, p.Platform = d.Token, d.Platform
			oc, err := l.relay.send(pctx, l.stop, p, budget)
			switch oc {
			case delivered:
				mu.Lock()
				res = resultSent
				mu.Unlock()
				l.board.delivered(l.cfg.Now())
			case gone:
				if err := l.store.Devices().Delete(ctx, j.person, d.Token); err != nil && nah.ErrorCode(err) != nah.NotFound {
					l.log.Error("digests: remove an unregistered device", "person", j.person, "err", err)
				}
			case failed:
				l.board.relayError(l.cfg.Now(), err)
			}
		})
	}
	wg.Wait()
	if res != resultSent && run.Err() != nil {
		// Cut off by the run's end, not by the relay: the person stays
		// claimed and not done, so the next run resumes them (late
		// rather than never, within the hour's catch-up).
		return resultError
	}
	// Done need not wait for its commit: lost to a crash, it only means
	// the pushes go again under the same digest id.
	mark.Done = true
	marks.later(mark, func(err error) { l.log.Error("digests: mark done", "person", j.person, "err", err) })
	return res
}

// digestID names one person's digest of one slot, the same on every try,
// without revealing the person's id to the relay.
func digestID(person string, slot int64) string {
	h := sha256.Sum256([]byte(person + "/" + strconv.FormatInt(slot, 10)))
	return hex.EncodeToString(h[:12])
}

// bodyText is the push's text: "3 new moments from ana, rui and 2 others".
func bodyText(count int, authors []string) string {
	what := "1 new moment"
	if count != 1 {
		what = strconv.Itoa(count) + " new moments"
	}
	switch len(authors) {
	case 0:
		return what
	case 1:
		return what + " from " + authors[0]
	case 2, 3:
		return what + " from " + strings.Join(authors[:len(authors)-1], ", ") + " and " + authors[len(authors)-1]
	}
	return fmt.Sprintf("%s from %s, %s and %d others", what, authors[0], authors[1], len(authors)-2)
}

// Status is what the console shows of the loop.
func (l *Loop) Status() Status {
	st := Status{RelayConfigured: l.relay != nil, SendsPerMinute: l.board.sendsPerMinute(l.cfg.Now())}
	if u, err := url.Parse(l.cfg.RelayURL); err == nil && l.relay != nil {
		st.RelayHost = u.Host
	}
	l.board.mu.Lock()
	st.Last = l.board.last
	st.Errors = slices.Clone(l.board.errs)
	l.board.mu.Unlock()
	return st
}

// Totals are the counters the metrics expose.
func (l *Loop) Totals() Totals { return l.board.totals() }
