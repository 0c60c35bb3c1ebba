package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/app"
	"github.com/nah-app/nah/bench/fixture"
	"github.com/nah-app/nah/digest"
	"github.com/nah-app/nah/store"
)

// The digest benchmark: 5,000 people all due at 08:00 UTC, families of six,
// two posters in 341 families so 2,046 have something new. In-process, on
// copies of one seeded directory: Run against a relay answering 202, all at
// once then spread over 10 s, then 50 feed readers' p95 during a spread run.

const (
	digestPeople  = 5000
	digestFamily  = 6
	digestBusy    = 341 // families with posters: 341 x 6 = 2,046 people with something new
	digestReaders = 50
)

// DigestResult is one run of the digest benchmark.
type DigestResult struct {
	Time      time.Time `json:"time"`
	Cores     int       `json:"cores"`
	GoVersion string    `json:"go_version"`
	People    int       `json:"people"`
	WithNew   int       `json:"with_new"`

	AllAtOnce DigestRun `json:"all_at_once"`
	Spread    DigestRun `json:"spread_10s"`

	FeedBefore Latency `json:"feed_before_digests"`
	FeedDuring Latency `json:"feed_during_digests"`
}

// DigestRun is one mode's figures.
type DigestRun struct {
	Due      int     `json:"due"`
	WithNew  int     `json:"with_new"`
	Sent     int     `json:"sent"`
	Failed   int     `json:"failed"`
	WallS    float64 `json:"wall_s"`
	P95ms    float64 `json:"p95_ms"`
	RelayHit int64   `json:"relay_requests"`
}

func digestCmd(ctx context.Context, args []string) error {
	fset := flag.NewFlagSet("digest", flag.ExitOnError)
	home, _ := os.UserCacheDir()
	cache := fset.String("cache", filepath.Join(home, "nah-bench"), "where the seeded fixture is kept between runs")
	out := fset.String("out", "bench/results", "directory for the result JSON")
	fset.Parse(args)

	due := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	src := filepath.Join(*cache, "digest-5k")
	if _, err := os.Stat(filepath.Join(src, "ready")); err != nil {
		os.RemoveAll(src)
		fmt.Fprintf(os.Stderr, "seeding digest-5k into %s (once; later runs reuse it)\n", src)
		if err := seedDigest(ctx, src, due); err != nil {
			return err
		}
	}
	var hits atomic.Int64
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer relay.Close()

	res := DigestResult{Time: time.Now().UTC(), Cores: runtime.NumCPU(), GoVersion: runtime.Version(), People: digestPeople, WithNew: digestBusy * digestFamily}
	for _, mode := range []struct {
		name   string
		spread time.Duration
		into   *DigestRun
	}{{"all at once", -1, &res.AllAtOnce}, {"spread over 10 s", digest.DefaultSpread, &res.Spread}} {
		err := withCopy(src, due, func(s *store.Store) error {
			l, err := digest.New(digest.Config{RelayURL: relay.URL, Now: func() time.Time { return due }, Spread: mode.spread}, s, nil)
			if err != nil {
				return err
			}
			before := hits.Load()
			r := l.Run(due)
			*mode.into = DigestRun{Due: r.Due, WithNew: r.WithNew, Sent: r.Sent, Failed: r.Failed, WallS: r.Duration.Seconds(), P95ms: ms(r.P95), RelayHit: hits.Load() - before}
			fmt.Fprintf(os.Stderr, "%s: %+v\n", mode.name, *mode.into)
			return nil
		})
		if err != nil {
			return err
		}
	}
	err := withCopy(src, due, func(s *store.Store) error {
		people, err := readerSessions(ctx, s)
		if err != nil {
			return err
		}
		a := app.New(app.Config{Now: time.Now, Settings: nil}, s, slog.New(slog.DiscardHandler))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := app.NewServer("", a, slog.New(slog.DiscardHandler))
		go srv.Serve(ln)
		defer srv.Close()
		base := "http://" + ln.Addr().String()
		res.FeedBefore = feedLoad(ctx, base, people, digestReaders, 10*time.Second)
		l, err := digest.New(digest.Config{RelayURL: relay.URL, Now: func() time.Time { return due }}, s, nil)
		if err != nil {
			return err
		}
		done := make(chan digest.Run, 1)
		go func() { done <- l.Run(due) }()
		res.FeedDuring = feedLoad(ctx, base, people, digestReaders, digest.DefaultSpread)
		r := <-done
		fmt.Fprintf(os.Stderr, "feeds during a spread run (sent %d, %v): %+v\n", r.Sent, r.Duration.Round(time.Millisecond), res.FeedDuring)
		return nil
	})
	if err != nil {
		return err
	}
	file, err := writeResult(*out, "digest", res.Time, res)
	if err != nil {
		return err
	}
	fmt.Print(digestMarkdown(res))
	fmt.Printf("\nwritten to %s\n", file)
	return nil
}

func digestMarkdown(r DigestResult) string {
	pass := func(ok bool) string {
		if ok {
			return "pass"
		}
		return "fail"
	}
	return fmt.Sprintf(`### digest-5k, %s (%d cores, %s)

%d people due in the same minute, %d with something new, one device each, fake relay answering 202 at once.

| run | limit | wall time | p95 per person | sent | relay requests | |
| --- | --- | --- | --- | --- | --- | --- |
| all at once | < 60 s | %.2f s | %.1f ms | %d | %d | %s |
| spread over 10 s | < 60 s | %.2f s | %.1f ms | %d | %d | %s |

| feed, %d readers | limit | requests | p50 ms | p95 ms | p99 ms | |
| --- | --- | --- | --- | --- | --- | --- |
| 10 s before the minute | < 50 ms | %d | %.2f | %.2f | %.2f | %s |
| the 10 s of a spread digest run | < 50 ms | %d | %.2f | %.2f | %.2f | %s |
`, r.Time.Format("2006-01-02 15:04 UTC"), r.Cores, r.GoVersion, r.People, r.WithNew,
		r.AllAtOnce.WallS, r.AllAtOnce.P95ms, r.AllAtOnce.Sent, r.AllAtOnce.RelayHit, pass(r.AllAtOnce.WallS < 60 && r.AllAtOnce.Sent == r.WithNew),
		r.Spread.WallS, r.Spread.P95ms, r.Spread.Sent, r.Spread.RelayHit, pass(r.Spread.WallS < 60 && r.Spread.Sent == r.WithNew),
		digestReaders,
		r.FeedBefore.Requests, r.FeedBefore.P50ms, r.FeedBefore.P95ms, r.FeedBefore.P99ms, pass(r.FeedBefore.P95ms < 50 && r.FeedBefore.Errors == 0),
		r.FeedDuring.Requests, r.FeedDuring.P50ms, r.FeedDuring.P95ms, r.FeedDuring.P99ms, pass(r.FeedDuring.P95ms < 50 && r.FeedDuring.Errors == 0))
}

// withCopy opens a fresh copy of the seeded data directory, with the
// store's clock at due, and runs fn on it.
func withCopy(src string, due time.Time, fn func(*store.Store) error) error {
	work, err := os.MkdirTemp("", "nah-bench-digest")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := copyDir(filepath.Join(src, fixture.DataDir), work); err != nil {
		return err
	}
	s, err := store.Open(context.Background(), store.Config{Dir: work, Now: func() time.Time { return due }})
	if err != nil {
		return err
	}
	defer s.Close()
	return fn(s)
}

// readerSessions makes a session for the first 200 people, the feed
// readers.
func readerSessions(ctx context.Context, s *store.Store) ([]fixture.Person, error) {
	ps, _, err := s.ListPeople(ctx, "", 0, 200)
	if err != nil {
		return nil, err
	}
	out := make([]fixture.Person, len(ps))
	for i, p := range ps {
		tok, err := s.CreateSession(ctx, p.ID)
		if err != nil {
			return nil, err
		}
		out[i] = fixture.Person{ID: p.ID, Handle: p.Handle, Token: tok}
	}
	return out, nil
}

// seedDigest writes the digest fixture (see the top of this file) into
// dir, through the store, with the store's clock set before due.
func seedDigest(ctx context.Context, dir string, due time.Time) error {
	var now atomic.Int64
	now.Store(due.Add(-48 * time.Hour).UnixMilli())
	s, err := store.Open(ctx, store.Config{Dir: filepath.Join(dir, fixture.DataDir), Now: func() time.Time { return time.UnixMilli(now.Load()) }})
	if err != nil {
		return err
	}
	defer s.Close()
	ids := make([]string, digestPeople)
	for i := range ids {
		p, err := s.CreatePerson(ctx, store.NewPerson{Handle: fmt.Sprintf("kin%04d", i), PasswordHash: "x"})
		if err != nil {
			return err
		}
		ids[i] = p.ID
		if _, err := s.CreateMoment(ctx, p.ID, make([]byte, 400)); err != nil {
			return err
		}
		if err := s.Devices().Put(ctx, p.ID, fmt.Sprintf("device-%04d-%040d", i, i), nah.PlatformIOS); err != nil {
			return err
		}
		if err := s.SetDigest(ctx, p.ID, nah.Digest{Minute: due.Hour()*60 + due.Minute(), Timezone: "UTC", Enabled: true}); err != nil {
			return err
		}
		if i%500 == 499 {
			fmt.Fprintf(os.Stderr, "  %d people\n", i+1)
		}
	}
	var pairs [][2]string
	var marks []store.DigestMark
	for f := 0; f+digestFamily <= digestPeople; f += digestFamily {
		for a := f; a < f+digestFamily; a++ {
			for b := a + 1; b < f+digestFamily; b++ {
				pairs = append(pairs, [2]string{ids[a], ids[b]})
			}
		}
	}
	if err := s.ImportConnections(ctx, pairs, now.Load()); err != nil {
		return err
	}
	yesterday := due.Add(-24 * time.Hour).UnixMilli()
	for _, id := range ids {
		marks = append(marks, store.DigestMark{Person: id, Slot: yesterday, From: yesterday - 24*3600*1000, Done: true})
	}
	if err := s.MarkDigests(ctx, marks); err != nil {
		return err
	}
	now.Store(due.Add(-time.Hour).UnixMilli())
	for f := range digestBusy {
		for _, k := range []int{0, 1} {
			if _, err := s.CreateMoment(ctx, ids[f*digestFamily+k], make([]byte, 400)); err != nil {
				return err
			}
		}
	}
	if err := s.Close(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
}
