package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "modernc.org/sqlite"

	"github.com/nah-app/nah/bench/fixture"
)

// PocketBase beside nah (bench/THRESHOLDS.md, "nah beside PocketBase"):
// bench/pocketbase is PocketBase v0.40.4 with the collections of nah's
// workload; run -pocketbase BIN seeds it from the same fixture through its
// own API and measures it with nah's phases.

const (
	pbServer   = "pocketbase v0.40.4" // bench/pocketbase/go.mod
	pbEmail    = "bench@bench.invalid"
	pbPassword = "bench-superuser-password"
	// pbFeedPath is a person's feed: the newest 30 moments the list rule
	// lets them see (their own and their connections', bench/pocketbase's
	// FeedRule). skipTotal=1 spares the count PocketBase makes by default
	// for totalItems, which nah's feed does not give either.
	pbFeedPath = "/api/collections/moments/records?sort=-created&perPage=30&skipTotal=1"
	pbPostPath = "/api/collections/moments/records"
	// pbTokenSeconds is how long the seed's tokens live: the cached seed is
	// reused for ten years.
	pbTokenSeconds = 10 * 365 * 24 * 3600
	// pbBatch is the records of one /api/batch request of the seed; it is
	// the MaxRequests bench/pocketbase sets.
	pbBatch = 100
	// pbSchema names the seeds of bench/pocketbase's collections as they
	// are: change it with them, and the next run seeds again.
	pbSchema = "s2"
)

// pbPerson is fixture person i in PocketBase: record id pbID(i) and a
// token made by a superuser's impersonation.
type pbPerson struct {
	ID    string `json:"id"`
	Token string `json:"token"`
}

// pbID is fixture person i's record id: PocketBase's ids are 15 characters
// of [a-z0-9].
func pbID(i int) string { return fmt.Sprintf("u%014d", i) }

// pbDate is PocketBase's layout of a date.
func pbDate(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000Z") }

// pbServe starts bin on data and waits until it answers /api/health.
func pbServe(ctx context.Context, bin, data string) (cmd *exec.Cmd, base string, done chan error, err error) {
	addr, err := freePort()
	if err != nil {
		return nil, "", nil, err
	}
	cmd = exec.Command(bin, "serve", "--http="+addr, "--dir="+data)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, "", nil, err
	}
	done = make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	base = "http://" + addr
	for t0 := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if r, err := http.Get(base + "/api/health"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return cmd, base, done, nil
			}
		}
		if time.Since(t0) > 30*time.Second || ctx.Err() != nil {
			cmd.Process.Kill()
			return nil, "", nil, fmt.Errorf("%s did not start", bin)
		}
	}
}

// pbStop sends SIGTERM and waits for the exit.
func pbStop(cmd *exec.Cmd, done chan error) error {
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(stopLimit):
		cmd.Process.Kill()
		return fmt.Errorf("no exit %v after SIGTERM", stopLimit)
	}
}

// pbCall is jsonCall with PocketBase's token as the whole Authorization
// header, and 200 for an answer.
func pbCall(ctx context.Context, c *http.Client, method, url, token string, in, out any) error {
	return jsonCall(ctx, c, method, url, token, in, 200, out)
}

// jsonCall sends in as JSON (when not nil) with auth as the Authorization
// header (when not empty) and decodes the answer into out (when not nil);
// an answer other than want is an error with its body.
func jsonCall(ctx context.Context, c *http.Client, method, url, auth string, in any, want int, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != want {
		return fmt.Errorf("%s %s: %d %.300s", method, url, res.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// parallel runs do(i) for i in [0, n) on workers goroutines and returns
// the first error; progress gets a count now and then.
func parallel(ctx context.Context, n, workers int, what string, do func(i int) error) error {
	var (
		next, doneN atomic.Int64
		mu          sync.Mutex
		first       error
		wg          sync.WaitGroup
	)
	t0 := time.Now()
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				if err := do(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				if d := doneN.Add(1); d%max(int64(n)/10, 1) == 0 {
					fmt.Fprintf(os.Stderr, "  %s: %d/%d, %.0f s\n", what, d, n, time.Since(t0).Seconds())
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// pbMeasure is measure's phases against PocketBase on data: cold start,
// idle memory, feeds with 1 and 50 readers, the warm-up, 16 writers by
// people chosen uniformly and by the fixture's mix, peak memory; then the
// stop, the data directory and the ceiling for PocketBase's page size.
// There are no metrics to read: the cost of a post is its CPU time.
func pbMeasure(ctx context.Context, bin, data string, f fixture.Fixture, people []pbPerson, mix func(*rand.Rand) int, d time.Duration) (Result, error) {
	res := Result{Server: pbServer, Fixture: f.Name, Time: time.Now().UTC(), Cores: runtime.NumCPU(), GoVersion: runtime.Version()}
	st, err := os.Stat(bin)
	if err != nil {
		return res, err
	}
	res.BinaryMB = mb(st.Size())
	if res.DiskSync, err = probeSync(filepath.Dir(data)); err != nil {
		return res, fmt.Errorf("sync probe: %w", err)
	}
	addr, err := freePort()
	if err != nil {
		return res, err
	}
	base := "http://" + addr
	cmd := exec.Command(bin, "serve", "--http="+addr, "--dir="+data)
	cmd.Stderr = os.Stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return res, err
	}
	defer cmd.Process.Kill()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	feeds := make([]*http.Request, len(people))
	for i, p := range people {
		feeds[i], _ = http.NewRequest("GET", base+pbFeedPath, nil)
		feeds[i].Header.Set("Authorization", p.Token)
	}
	pid := cmd.Process.Pid
	if res.ColdStartMs, res.IdleRSSMB, err = firstFeed(ctx, feeds[0], t0, pid); err != nil {
		return res, err
	}
	fmt.Fprintf(os.Stderr, "pocketbase: cold start %.0f ms, idle %.1f MB\n", res.ColdStartMs, res.IdleRSSMB)

	fmt.Fprintf(os.Stderr, "pocketbase: feed, 1 reader, %v\n", d)
	res.Feed1 = readLoad(ctx, feeds, 1, d)
	fmt.Fprintf(os.Stderr, "pocketbase: feed, 50 readers, %v\n", d)
	res.Feed50 = readLoad(ctx, feeds, 50, d)

	body := make([]byte, 400)
	for i := range body {
		body[i] = byte(i * 7)
	}
	b64 := base64.StdEncoding.EncodeToString(body)
	payloads := make([][]byte, len(people))
	for i, p := range people {
		payloads[i] = []byte(`{"author":"` + p.ID + `","body":"` + b64 + `"}`)
	}
	post := func(ctx context.Context, i int) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+pbPostPath, bytes.NewReader(payloads[i]))
		req.Header.Set("Authorization", people[i].Token)
		req.Header.Set("Content-Type", "application/json")
		return req
	}
	fmt.Fprintf(os.Stderr, "pocketbase: post warm-up: everyone posts once, 16 writers\n")
	res.PostWarmup = warmLoadWith(ctx, len(people), post, 200, 16)
	fmt.Fprintf(os.Stderr, "pocketbase: post, 16 writers, uniform, %v\n", d)
	res.Post16, res.PostCost = cpuCostedPosts(pid, func() Latency { return writeLoad(ctx, post, 200, uniform(len(people)), 16, d) })
	fmt.Fprintf(os.Stderr, "pocketbase: post, 16 writers, the fixture's mix, %v\n", d)
	res.PostMix16, res.PostMixCost = cpuCostedPosts(pid, func() Latency { return writeLoad(ctx, post, 200, mix, 16, d) })

	res.PeakRSSMB = procStatusMB(pid, "VmHWM")
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		res.OpenFDs = len(fds)
	}
	stopAt := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(stopLimit):
		return res, fmt.Errorf("pocketbase: no exit %v after SIGTERM", stopLimit)
	}
	res.StopS = time.Since(stopAt).Seconds()
	res.DataDirMB, res.WALLeft = dirStats(data)
	res.Ceiling50, err = runCeiling(ctx, res.Feed50.MeanBytes, d)
	if err != nil {
		return res, err
	}
	if res.Ceiling50.PerSecond > 0 {
		res.CeilingRatio = res.Feed50.PerSecond / res.Ceiling50.PerSecond
	}
	return res, nil
}

// cpuCostedPosts runs a post phase and the server's CPU time per post
// (nil when /proc could not be read).
func cpuCostedPosts(pid int, phase func() Latency) (Latency, *PostCost) {
	before, ok1 := procCPUms(pid)
	l := phase()
	after, ok2 := procCPUms(pid)
	if !ok1 || !ok2 || l.Requests == 0 {
		return l, nil
	}
	c := &PostCost{CPUms: (after - before) / float64(l.Requests)}
	fmt.Fprintf(os.Stderr, "per post: %.2f ms CPU\n", c.CPUms)
	return l, c
}

// runPocketBase is run -pocketbase: PocketBase on a fresh copy of its seed
// of f, measured as nah was just measured; it writes the result beside
// nah's and returns it.
//
// noStats deletes SQLite's statistics (sqlite_stat1) from the copy first,
// what run does unless -pocketbase-stats: PocketBase makes them itself
// (PRAGMA optimize after a change of schema and every midnight), and with
// them SQLite 3.53 plans the feed's join with a Bloom filter that makes
// a feed many times slower than the plan without (modernc, people-1k,
// bench/README.md). Without, PocketBase is at its fastest.
func runPocketBase(ctx context.Context, bin, cache, out string, f fixture.Fixture, nahPeople []fixture.Person, d time.Duration, noStats bool) (Result, string, error) {
	seed, people, err := pbSeedDir(ctx, bin, cache, f)
	if err != nil {
		return Result{}, "", err
	}
	if len(people) != len(nahPeople) {
		return Result{}, "", fmt.Errorf("PocketBase's seed of %s has %d people, nah's %d: remove %s", f.Name, len(people), len(nahPeople), seed)
	}
	mix, err := mixOf(f, nahPeople)
	if err != nil {
		return Result{}, "", err
	}
	work, err := os.MkdirTemp("", "nah-bench-pocketbase")
	if err != nil {
		return Result{}, "", err
	}
	defer os.RemoveAll(work)
	data := filepath.Join(work, "pb_data")
	fmt.Fprintf(os.Stderr, "copying PocketBase's %s\n", f.Name)
	if err := copyDir(filepath.Join(seed, "pb_data"), data); err != nil {
		return Result{}, "", err
	}
	if noStats {
		if err := dropStats(ctx, filepath.Join(data, "data.db")); err != nil {
			return Result{}, "", err
		}
	}
	syscall.Sync()
	res, err := pbMeasure(ctx, bin, data, f, people, mix, d)
	if err != nil {
		return res, "", err
	}
	if noStats {
		res.Env = []string{"sqlite_stat1 deleted before the start"}
	}
	file, err := writeResult(out, "pocketbase-"+f.Name, res.Time, res)
	return res, file, err
}

// sideBySide is the table of nah and PocketBase measured in one run.
func sideBySide(n, p Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s, nah and %s, %s (%d cores, %s)\n\n", n.Fixture, p.Server, n.Time.Format("2006-01-02 15:04 UTC"), n.Cores, n.GoVersion)
	if len(n.Env) > 0 {
		fmt.Fprintf(&b, "nah's settings: `%s`\n\n", strings.Join(n.Env, " "))
	}
	if len(p.Env) > 0 {
		fmt.Fprintf(&b, "PocketBase: %s\n\n", strings.Join(p.Env, " "))
	}
	b.WriteString("| | nah | PocketBase | nah / PocketBase |\n| --- | --- | --- | --- |\n")
	row := func(name string, v func(Result) float64) {
		x, y := v(n), v(p)
		ratio := "-"
		if y != 0 {
			ratio = fmt.Sprintf("%.2f", x/y)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, trim(x), trim(y), ratio)
	}
	cpu := func(c *PostCost) float64 {
		if c == nil {
			return 0
		}
		return c.CPUms
	}
	row("posts/s, 16 writers, uniform", func(r Result) float64 { return r.Post16.PerSecond })
	row("post p95 ms, 16 writers, uniform", func(r Result) float64 { return r.Post16.P95ms })
	row("posts/s, 16 writers, the fixture's mix", func(r Result) float64 { return r.PostMix16.PerSecond })
	row("post p95 ms, 16 writers, mix", func(r Result) float64 { return r.PostMix16.P95ms })
	row("server CPU ms per post, uniform", func(r Result) float64 { return cpu(r.PostCost) })
	row("posts/s, warm-up (everyone once)", func(r Result) float64 { return r.PostWarmup.PerSecond })
	row("feeds/s, 50 readers", func(r Result) float64 { return r.Feed50.PerSecond })
	row("feed p95 ms, 50 readers", func(r Result) float64 { return r.Feed50.P95ms })
	row("feed p95 ms, 1 reader", func(r Result) float64 { return r.Feed1.P95ms })
	row("feed page bytes (mean)", func(r Result) float64 { return float64(r.Feed50.MeanBytes) })
	row("feeds/s as a share of the static ceiling", func(r Result) float64 { return r.CeilingRatio })
	row("cold start to first feed ms", func(r Result) float64 { return r.ColdStartMs })
	row("idle resident MB (5 s)", func(r Result) float64 { return r.IdleRSSMB })
	row("peak resident MB (VmHWM)", func(r Result) float64 { return r.PeakRSSMB })
	row("data directory MB after stop", func(r Result) float64 { return r.DataDirMB })
	row("binary MB", func(r Result) float64 { return r.BinaryMB })
	row("a sync on the disk before the start, µs of CPU", func(r Result) float64 {
		if r.DiskSync == nil {
			return 0
		}
		return r.DiskSync.CPUus
	})
	errs := func(r Result) int {
		return r.Feed1.Errors + r.Feed50.Errors + r.PostWarmup.Errors + r.Post16.Errors + r.PostMix16.Errors
	}
	fmt.Fprintf(&b, "\nErrors in the phases: nah %d, PocketBase %d. nah: replication on, `NAH_SYNC` its default; PocketBase: its defaults (WAL, synchronous=NORMAL), no request logs.\n", errs(n), errs(p))
	return b.String()
}

// dropStats deletes the planner's statistics of the SQLite database file.
func dropStats(ctx context.Context, file string) error {
	db, err := sql.Open("sqlite", file)
	if err != nil {
		return err
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'").Scan(&n); err != nil || n == 0 {
		return err
	}
	_, err = db.ExecContext(ctx, "DELETE FROM sqlite_stat1")
	return err
}
