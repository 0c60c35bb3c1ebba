package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nah-app/nah/bench/fixture"
)

// Result is one run, as written to bench/results/*.json.
type Result struct {
	Server    string    `json:"server,omitempty"` // empty: nah; else what was measured (run -pocketbase)
	Fixture   string    `json:"fixture"`
	Time      time.Time `json:"time"`
	Cores     int       `json:"cores"`
	GoVersion string    `json:"go_version"`
	Env       []string  `json:"env,omitempty"` // settings other than the defaults
	// Seed is what the server started on: empty or "fixture", the generated
	// fixture with no replica yet; "api", the API seed with its replica
	// (bench footprint), with no wait for the replica after the warm-up.
	Seed string `json:"seed,omitempty"`

	ColdStartMs float64 `json:"cold_start_ms"`
	IdleRSSMB   float64 `json:"idle_rss_mb"`
	Feed1       Latency `json:"feed_1_reader"`
	Feed50      Latency `json:"feed_50_readers"`
	Post16      Latency `json:"post_16_writers"`
	PostWarmup  Latency `json:"post_warmup_16_writers"` // everyone posts once, first (load.go's warmLoad)
	// WarmupCaughtUpS is how long the replica took to hold the warm-up's
	// posts (every file's first snapshot), waited for before the measured
	// post phases; -1: not within a minute.
	WarmupCaughtUpS float64 `json:"warmup_caught_up_s,omitempty"`
	// PostMix16 is the 16-writer phase again, each post by a person drawn
	// by the fixture's own posting rates (fixture.PostingRates), after the
	// uniform one.
	PostMix16       Latency    `json:"post_mix_16_writers"`
	Ceiling50       Latency    `json:"ceiling_50_readers"`
	CeilingRatio    float64    `json:"feeds_per_s_ratio_to_ceiling"`
	PeakRSSMB       float64    `json:"peak_rss_mb"`
	OpenFDs         int        `json:"open_fds_after_load"`
	OpenPersonFiles int        `json:"open_person_files_after_load"`
	DataDirMB       float64    `json:"data_dir_mb_after_stop"`
	BinaryMB        float64    `json:"binary_mb"`
	WALLeft         int        `json:"non_empty_wal_after_stop"`
	StopS           float64    `json:"stop_seconds"`            // SIGTERM to exit, after the phases
	Drill           *DrillLoad `json:"drill,omitempty"`         // run -drill: drills kept running through the phases
	PostCost        *PostCost  `json:"post_cost,omitempty"`     // the 16-writer phase, per post
	PostMixCost     *PostCost  `json:"post_mix_cost,omitempty"` // the mixed 16-writer phase, per post

	ReplicaLag *ReplicaLag `json:"replica_lag,omitempty"` // during the uniform 16-writer phase and after
	// ReplicaLagMix is the same around the mixed phase: a server that
	// leaves its ships for after the phase looks cheaper a post there.
	ReplicaLagMix *ReplicaLag `json:"replica_lag_mix,omitempty"`

	DiskSync *DiskSync `json:"disk_sync,omitempty"` // before the server started (disksync.go)
}

// PostCost is what one post of the 16-writer phase cost the server beyond
// its insert, from the server's counters and /proc before and after it.
type PostCost struct {
	Opens   float64 `json:"opens"`    // person files opened
	Closes  float64 `json:"closes"`   // person files closed
	TakeUps float64 `json:"take_ups"` // files handed to replication
	Ships   float64 `json:"ships"`    // files shipped without a take-up
	CPUms   float64 `json:"cpu_ms"`   // the server's CPU time (user + system)
}

// commonFlags adds the flags every measuring subcommand takes: the
// fixture, the binary, the fixtures' cache and where results go.
func commonFlags(fset *flag.FlagSet) (name, bin, cache, out *string) {
	name = fset.String("fixture", "people-1k", "fixture name")
	bin = fset.String("bin", "bin/nah", "the release binary to measure")
	home, _ := os.UserCacheDir()
	cache = fset.String("cache", filepath.Join(home, "nah-bench"), "where seeded fixtures are kept between runs")
	out = fset.String("out", "bench/results", "directory for the result JSON")
	return name, bin, cache, out
}

// writeResult writes a run's result as dir/NAME-TIME.json and returns the
// file's path.
func writeResult(dir, name string, at time.Time, res any) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	file := filepath.Join(dir, name+"-"+at.Format("20060102-150405")+".json")
	b, _ := json.MarshalIndent(res, "", "  ")
	return file, os.WriteFile(file, append(b, '\n'), 0o644)
}

func runCmd(ctx context.Context, args []string) error {
	fset := flag.NewFlagSet("run", flag.ExitOnError)
	name, bin, cache, out := commonFlags(fset)
	d := fset.Duration("duration", 20*time.Second, "length of each load phase")
	thresholds := fset.String("thresholds", "bench/THRESHOLDS.md", "file whose generated table is rewritten; empty for none")
	drill := fset.Bool("drill", false, "keep a restore drill running through the measured phases (asked for from the console as each ends): their cost, against a run without")
	pbStats := fset.Bool("pocketbase-stats", false, "keep SQLite's statistics in PocketBase's copy (as after its midnight PRAGMA optimize); by default they are deleted before its start (see bench/README.md)")
	pocketbase := fset.String("pocketbase", "", "also measure this PocketBase (go -C bench/pocketbase build) after nah, on the same fixture seeded through its API, and print the two side by side")
	seed := fset.String("seed", "fixture", "fixture: the generated fixture with no replica yet (the warm-up pays every file's first snapshot, and the phases wait for them); api: the fixture seeded through nah's API and cleanly stopped with its replica (bench footprint), as a restarted server finds its data")
	settleFor := fset.Duration("settle", 6*time.Minute, "wait until this long after the last run's copy was removed before measuring (0: do not wait; see bench/THRESHOLDS.md, \"A copy removed\")")
	var env envList
	fset.Var(&env, "env", "KEY=VALUE for the server's environment, repeatable (experiments: a result so made is not a baseline)")
	fset.Parse(args)
	f, ok := fixture.Fixtures[*name]
	if !ok {
		usage()
	}
	var (
		data    string
		people  []fixture.Person
		cleanup func()
		err     error
	)
	switch *seed {
	case "fixture":
		data, people, cleanup, err = copyFixture(ctx, *cache, f)
	case "api":
		data, people, cleanup, err = copyAPISeed(ctx, *bin, *cache, f)
	default:
		usage()
	}
	if err != nil {
		return err
	}
	defer cleanup()
	settle(*cache, *settleFor)
	var cookie string
	if *drill {
		if cookie, err = adminSession(ctx, data); err != nil {
			return err
		}
	}
	res, err := measure(ctx, *bin, data, f, people, *d, cookie, *seed, env...)
	if err != nil {
		return err
	}
	file, err := writeResult(*out, f.Name, res.Time, res)
	if err != nil {
		return err
	}
	table := markdown(res)
	fmt.Print(table)
	fmt.Printf("\nwritten to %s\n", file)
	if *thresholds != "" {
		if err := updateThresholds(*thresholds, res.Fixture, table); err != nil {
			return err
		}
	}
	if *pocketbase == "" {
		return nil
	}
	cleanup() // nah's copy: PocketBase gets the disk to itself
	pb, file, err := runPocketBase(ctx, *pocketbase, *cache, *out, f, people, *d, !*pbStats)
	if err != nil {
		return err
	}
	fmt.Print("\n" + markdown(pb))
	fmt.Printf("\nwritten to %s\n\n", file)
	both := sideBySide(res, pb)
	fmt.Print(both)
	if *thresholds != "" {
		return updateThresholds(*thresholds, "pocketbase-"+f.Name, both)
	}
	return nil
}

func measure(ctx context.Context, bin, data string, f fixture.Fixture, people []fixture.Person, d time.Duration, drillCookie, seed string, env ...string) (Result, error) {
	res := Result{Fixture: f.Name, Time: time.Now().UTC(), Cores: runtime.NumCPU(), GoVersion: runtime.Version(), Env: env, Seed: seed}
	st, err := os.Stat(bin)
	if err != nil {
		return res, fmt.Errorf("binary: %w (make build first)", err)
	}
	res.BinaryMB = mb(st.Size())
	mix, err := mixOf(f, people)
	if err != nil {
		return res, err
	}
	if res.DiskSync, err = probeSync(filepath.Dir(data)); err != nil {
		return res, fmt.Errorf("sync probe: %w", err)
	}

	// Cold start: exec to the first feed served.
	port, err := freePort()
	if err != nil {
		return res, err
	}
	base := "http://" + port
	cmd := exec.Command(bin, "serve")
	metricsPort, err := freePort()
	if err != nil {
		return res, err
	}
	cmd.Env = append([]string{"NAH_ADDR=" + port, "NAH_DATA_DIR=" + data, "NAH_REPLICA_URL=" + data + ".replica", "NAH_LOG_LEVEL=warn", "NAH_METRICS_ADDR=" + metricsPort}, env...)
	cmd.Stderr = os.Stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return res, err
	}
	defer cmd.Process.Kill()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	req, _ := http.NewRequest("GET", base+"/api/v1/feed", nil)
	req.Header.Set("Authorization", "Bearer "+people[0].Token)
	pid := cmd.Process.Pid
	if res.ColdStartMs, res.IdleRSSMB, err = firstFeed(ctx, req, t0, pid); err != nil {
		return res, err
	}
	fmt.Fprintf(os.Stderr, "cold start %.0f ms, idle %.1f MB\n", res.ColdStartMs, res.IdleRSSMB)

	var stopDrills func() DrillLoad
	if drillCookie != "" {
		stopDrills = drillLoop(base, drillCookie)
	}
	fmt.Fprintf(os.Stderr, "feed, 1 reader, %v\n", d)
	res.Feed1 = feedLoad(ctx, base, people, 1, d)
	fmt.Fprintf(os.Stderr, "feed, 50 readers, %v\n", d)
	res.Feed50 = feedLoad(ctx, base, people, 50, d)
	fmt.Fprintf(os.Stderr, "post warm-up: everyone posts once, 16 writers\n")
	res.PostWarmup = warmLoad(ctx, base, people, 16)
	metrics := "http://" + metricsPort + "/metrics"
	// On the generated fixture the warm-up queued every file's first
	// snapshot; a server that has been running has paid them, so the
	// measured phase starts once the replica holds them (else its lag and
	// CPU a post are the warm-up's). A server restarted on its own replica
	// (seed api) owes none, and is measured without the wait.
	warmed := make(chan struct{})
	close(warmed)
	if seed == "api" {
		fmt.Fprintf(os.Stderr, "no wait for the replica (seed api)\n")
	} else if w := <-watchLag(metrics, warmed); w.CaughtUpS != 0 {
		res.WarmupCaughtUpS = w.CaughtUpS
		fmt.Fprintf(os.Stderr, "the replica held the warm-up's posts after %.1f s\n", w.CaughtUpS)
	}
	fmt.Fprintf(os.Stderr, "post, 16 writers, uniform, %v\n", d)
	stopLag := make(chan struct{})
	lagRes := watchLag(metrics, stopLag)
	res.Post16, res.PostCost = costedPosts(ctx, pid, metrics, func() Latency { return postLoad(ctx, base, people, uniform(len(people)), 16, d) })
	close(stopLag)
	if lag := <-lagRes; lag.SamplesTaken > 0 {
		res.ReplicaLag = &lag
		fmt.Fprintf(os.Stderr, "replica lag: at most %.1f s during the phase (%d files queued at most), back to 0 %.1f s after\n", lag.DuringMaxS, lag.QueuedMax, lag.CaughtUpS)
	}
	fmt.Fprintf(os.Stderr, "post, 16 writers, the fixture's mix, %v\n", d)
	stopLag = make(chan struct{})
	lagRes = watchLag(metrics, stopLag)
	res.PostMix16, res.PostMixCost = costedPosts(ctx, pid, metrics, func() Latency { return postLoad(ctx, base, people, mix, 16, d) })
	close(stopLag)
	if lag := <-lagRes; lag.SamplesTaken > 0 {
		res.ReplicaLagMix = &lag
		fmt.Fprintf(os.Stderr, "replica lag, mix: at most %.1f s during the phase (%d files queued at most), back to 0 %.1f s after\n", lag.DuringMaxS, lag.QueuedMax, lag.CaughtUpS)
	}
	if stopDrills != nil {
		dl := stopDrills()
		res.Drill = &dl
		fmt.Fprintf(os.Stderr, "drills started: %d; %s\n", dl.Started, dl.Last)
	}

	res.PeakRSSMB = procStatusMB(pid, "VmHWM")
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		res.OpenFDs = len(fds)
	}
	if r, err := http.Get(base + "/healthz"); err == nil {
		var h struct {
			OpenFiles int `json:"open_files"`
		}
		json.NewDecoder(r.Body).Decode(&h)
		r.Body.Close()
		res.OpenPersonFiles = h.OpenFiles
	}

	// Clean stop: SIGTERM, then the data directory as it is left. The stop
	// replicates every file still queued: after people-10k's phases (10,000
	// files written) it took longer than a minute, so it is timed, not cut.
	stopAt := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(stopLimit):
		return res, fmt.Errorf("no exit %v after SIGTERM", stopLimit)
	}
	res.StopS = time.Since(stopAt).Seconds()
	fmt.Fprintf(os.Stderr, "stopped %.1f s after SIGTERM\n", res.StopS)
	res.DataDirMB, res.WALLeft = dirStats(data)

	// The ceiling, with the same 50 readers, after the server has stopped so
	// the two never share the cores.
	if res.Ceiling50, err = runCeiling(ctx, res.Feed50.MeanBytes, d); err != nil {
		return res, err
	}
	if res.Ceiling50.PerSecond > 0 {
		res.CeilingRatio = res.Feed50.PerSecond / res.Ceiling50.PerSecond
	}
	return res, nil
}

// runCeiling starts the static server (bench ceiling) with pages of size
// bytes and loads it with 50 readers for d.
func runCeiling(ctx context.Context, size int, d time.Duration) (Latency, error) {
	self, err := os.Executable()
	if err != nil {
		return Latency{}, err
	}
	cc := exec.Command(self, "ceiling", "-size", strconv.Itoa(max(size, 1)))
	addr, err := startProcess(cc)
	if err != nil {
		return Latency{}, err
	}
	defer cc.Process.Kill()
	fmt.Fprintf(os.Stderr, "ceiling, 50 readers, %v\n", d)
	return ceilingLoad(ctx, "http://"+addr, 50, d), nil
}

// costedPosts runs a post phase and what each of its posts cost the
// server (nil when the metrics or /proc could not be read).
func costedPosts(ctx context.Context, pid int, metricsURL string, phase func() Latency) (Latency, *PostCost) {
	before := readCost(pid, metricsURL)
	l := phase()
	after := readCost(pid, metricsURL)
	if before == nil || after == nil || l.Requests == 0 {
		return l, nil
	}
	n := float64(l.Requests)
	c := &PostCost{Opens: (after.Opens - before.Opens) / n, Closes: (after.Closes - before.Closes) / n,
		TakeUps: (after.TakeUps - before.TakeUps) / n, Ships: (after.Ships - before.Ships) / n, CPUms: (after.CPUms - before.CPUms) / n}
	fmt.Fprintf(os.Stderr, "per post: %.2f opens, %.2f closes, %.2f take-ups, %.2f ships, %.2f ms CPU\n", c.Opens, c.Closes, c.TakeUps, c.Ships, c.CPUms)
	return l, c
}

// mixOf is the pick of the mixed post phase: people by the fixture's
// posting rates. people must be the fixture's, in its order (generated, so
// the same ids, or seeded through the API as p%05d); a fixture seeded by
// another generator is refused rather than weighted wrongly.
func mixOf(f fixture.Fixture, people []fixture.Person) (func(*rand.Rand) int, error) {
	ids, perDay := fixture.PostingRates(f)
	if len(ids) != len(people) {
		return nil, fmt.Errorf("fixture %s: %d people, its generator makes %d: seed it again", f.Name, len(people), len(ids))
	}
	for i, p := range people {
		if p.ID != ids[i] && p.Handle != fmt.Sprintf("p%05d", i) {
			return nil, fmt.Errorf("fixture %s: person %d is %s, its generator makes %s: seed it again", f.Name, i, p.ID, ids[i])
		}
	}
	pick := weighted(perDay)
	if pick == nil {
		return nil, fmt.Errorf("fixture %s: no one posts", f.Name)
	}
	return pick, nil
}

// stopLimit is how long measure waits for the server to exit after SIGTERM.
const stopLimit = 10 * time.Minute

// envList collects repeated -env flags.
type envList []string

func (e *envList) String() string     { return strings.Join(*e, " ") }
func (e *envList) Set(v string) error { *e = append(*e, v); return nil }

// readCost reads the server's counts of opens, closes and take-ups from its
// metrics and its CPU time so far from /proc (nil when either fails).
func readCost(pid int, metricsURL string) *PostCost {
	cpu, ok := procCPUms(pid)
	if !ok {
		return nil
	}
	c := &PostCost{CPUms: cpu}
	r, err := http.Get(metricsURL)
	if err != nil {
		return nil
	}
	defer r.Body.Close()
	sc := bufio.NewScanner(r.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		n, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			continue
		}
		switch name {
		case "nah_person_file_opens_total":
			c.Opens = n
		case "nah_person_file_closes_total":
			c.Closes = n
		case "nah_replica_takeups_total":
			c.TakeUps = n
		case "nah_replica_ships_total":
			c.Ships = n
		}
	}
	return c
}

// firstFeed waits for the server started at t0 to answer req (at most
// 30 s) and returns how long that took, in ms, and process pid's resident
// memory 5 s after the start, idle, in MB.
func firstFeed(ctx context.Context, req *http.Request, t0 time.Time, pid int) (coldMs, idleMB float64, err error) {
	c := newClient(1)
	for {
		if _, ok := get(ctx, c, req); ok {
			break
		}
		if time.Since(t0) > 30*time.Second {
			return 0, 0, fmt.Errorf("no feed served 30 s after start")
		}
		time.Sleep(time.Millisecond)
	}
	coldMs = ms(time.Since(t0))
	c.CloseIdleConnections()
	time.Sleep(time.Until(t0.Add(5 * time.Second)))
	return coldMs, procStatusMB(pid, "VmRSS"), nil
}
