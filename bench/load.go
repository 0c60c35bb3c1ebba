package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nah-app/nah/bench/fixture"
)

// newClient keeps connections alive (one per worker) and does no
// compression, so the client costs as little as it can.
func newClient(workers int) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConns:        workers * 2,
			MaxIdleConnsPerHost: workers * 2,
			MaxConnsPerHost:     workers * 2,
			DisableCompression:  true,
			IdleConnTimeout:     time.Minute,
		},
	}
}

// Latency summarises one load phase. Percentiles are exact, from every
// sample.
type Latency struct {
	Workers   int     `json:"workers"`
	Seconds   float64 `json:"seconds"`
	Requests  int     `json:"requests"`
	Errors    int     `json:"errors"`
	PerSecond float64 `json:"per_second"`
	P50ms     float64 `json:"p50_ms"`
	P95ms     float64 `json:"p95_ms"`
	P99ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
	MeanBytes int     `json:"mean_bytes,omitempty"`
}

func summarise(workers int, took time.Duration, samples []time.Duration, errs int, bytes int64) Latency {
	slices.Sort(samples)
	pct := func(q float64) float64 {
		if len(samples) == 0 {
			return 0
		}
		i := int(q*float64(len(samples))+0.999999) - 1
		return ms(samples[max(0, min(i, len(samples)-1))])
	}
	l := Latency{
		Workers: workers, Seconds: took.Seconds(), Requests: len(samples), Errors: errs,
		PerSecond: float64(len(samples)) / took.Seconds(),
		P50ms:     pct(0.50), P95ms: pct(0.95), P99ms: pct(0.99),
	}
	if len(samples) > 0 {
		l.MaxMs = ms(samples[len(samples)-1])
		l.MeanBytes = int(bytes / int64(len(samples)))
	}
	return l
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// load runs workers that each call do in a loop for d and records every
// latency. do returns the bytes read and whether the answer was right.
func load(ctx context.Context, workers int, d time.Duration, do func(rng *rand.Rand) (int64, bool)) Latency {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		mu      sync.Mutex
		samples = make([]time.Duration, 0, 1<<16)
		errs    atomic.Int64
		total   atomic.Int64
		wg      sync.WaitGroup
	)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			local := make([]time.Duration, 0, 1<<12)
			for ctx.Err() == nil {
				t := time.Now()
				n, ok := do(rng)
				el := time.Since(t)
				if ctx.Err() != nil && !ok {
					break // cut off by the end of the phase, not an error
				}
				if !ok {
					errs.Add(1)
					continue
				}
				total.Add(n)
				local = append(local, el)
			}
			mu.Lock()
			samples = append(samples, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return summarise(workers, time.Since(start), samples, int(errs.Load()), total.Load())
}

// feedLoad reads random people's feeds with their own tokens. Requests are
// built once per person; a GET without a body can be sent many times.
func feedLoad(ctx context.Context, base string, people []fixture.Person, workers int, d time.Duration) Latency {
	reqs := make([]*http.Request, len(people))
	for i, p := range people {
		reqs[i], _ = http.NewRequest("GET", base+"/api/v1/feed", nil)
		reqs[i].Header.Set("Authorization", "Bearer "+p.Token)
	}
	return readLoad(ctx, reqs, workers, d)
}

// readLoad sends requests picked at random from reqs, each answered 200.
func readLoad(ctx context.Context, reqs []*http.Request, workers int, d time.Duration) Latency {
	c := newClient(workers)
	defer c.CloseIdleConnections()
	return load(ctx, workers, d, func(rng *rand.Rand) (int64, bool) {
		return get(ctx, c, reqs[rng.IntN(len(reqs))])
	})
}

func get(ctx context.Context, c *http.Client, req *http.Request) (int64, bool) {
	res, err := c.Do(req.WithContext(ctx))
	if err != nil {
		return 0, false
	}
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return n, err == nil && res.StatusCode == 200
}

// uniform picks any of n people with the same chance.
func uniform(n int) func(*rand.Rand) int {
	return func(rng *rand.Rand) int { return rng.IntN(n) }
}

// weighted picks person i with a chance in proportion to weight[i]: the
// fixture's posting rates (fixture.PostingRates), under which the 5% who
// post five times a day make 45% of the moments. nil if no weight is
// positive.
func weighted(weight []float64) func(*rand.Rand) int {
	cum := make([]float64, len(weight))
	total := 0.0
	for i, w := range weight {
		total += max(w, 0)
		cum[i] = total
	}
	if total <= 0 {
		return nil
	}
	return func(rng *rand.Rand) int {
		x := rng.Float64() * total
		return min(sort.Search(len(cum), func(i int) bool { return cum[i] > x }), len(cum)-1)
	}
}

// postLoad posts 400-byte moments as people chosen by pick.
func postLoad(ctx context.Context, base string, people []fixture.Person, pick func(*rand.Rand) int, workers int, d time.Duration) Latency {
	body := make([]byte, 400)
	for i := range body {
		body[i] = byte(i * 7)
	}
	payload := []byte(`{"body":"` + base64.StdEncoding.EncodeToString(body) + `"}`)
	return writeLoad(ctx, nahPost(base, people, payload), 201, pick, workers, d)
}

// nahPost makes person i's post of payload to nah.
func nahPost(base string, people []fixture.Person, payload []byte) func(context.Context, int) *http.Request {
	auth := make([]string, len(people))
	for i, p := range people {
		auth[i] = "Bearer " + p.Token
	}
	return func(ctx context.Context, i int) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/api/v1/moments", bytes.NewReader(payload))
		req.Header.Set("Authorization", auth[i])
		return req
	}
}

// writeLoad sends post(i) for people i chosen by pick; the answer must
// have status want.
func writeLoad(ctx context.Context, post func(context.Context, int) *http.Request, want int, pick func(*rand.Rand) int, workers int, d time.Duration) Latency {
	c := newClient(workers)
	defer c.CloseIdleConnections()
	return load(ctx, workers, d, func(rng *rand.Rand) (int64, bool) {
		res, err := c.Do(post(ctx, pick(rng)))
		if err != nil {
			return 0, false
		}
		n, _ := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return n, res.StatusCode == want
	})
}

// warmLoad has every person post once, 16 at a time, in order: with
// replication on, the first post of each person after the server starts
// on a data directory whose replica has never seen their file costs a
// whole snapshot of it; a server that has been running has paid that.
// Its figures are reported apart from the measured post phase.
func warmLoad(ctx context.Context, base string, people []fixture.Person, workers int) Latency {
	body := make([]byte, 400)
	payload := []byte(`{"body":"` + base64.StdEncoding.EncodeToString(body) + `"}`)
	return warmLoadWith(ctx, len(people), nahPost(base, people, payload), 201, workers)
}

// warmLoadWith sends post(i) once for every i in [0, n), workers at a
// time; the answer must have status want.
func warmLoadWith(ctx context.Context, n int, post func(context.Context, int) *http.Request, want, workers int) Latency {
	c := newClient(workers)
	defer c.CloseIdleConnections()
	var (
		next    atomic.Int64
		mu      sync.Mutex
		samples []time.Duration
		errs    atomic.Int64
		wg      sync.WaitGroup
	)
	start := time.Now()
	for range workers {
		wg.Go(func() {
			var local []time.Duration
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				req := post(ctx, i)
				t := time.Now()
				res, err := c.Do(req)
				if err != nil {
					errs.Add(1)
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != want {
					errs.Add(1)
					continue
				}
				local = append(local, time.Since(t))
			}
			mu.Lock()
			samples = append(samples, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return summarise(workers, time.Since(start), samples, int(errs.Load()), 0)
}

// ceilingLoad is feedLoad against the static server.
func ceilingLoad(ctx context.Context, base string, workers int, d time.Duration) Latency {
	req, _ := http.NewRequest("GET", base+"/", nil)
	c := newClient(workers)
	defer c.CloseIdleConnections()
	return load(ctx, workers, d, func(*rand.Rand) (int64, bool) { return get(ctx, c, req) })
}
