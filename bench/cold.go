package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nah-app/nah/bench/fixture"
)

// coldCmd starts each binary of -bin (comma-separated) -n times in turn on
// a fresh copy of the fixture, each time exec to the first feed served, and
// prints the median and range per binary: one start is too noisy to judge,
// and binaries alternated in one session share the machine's state.
func coldCmd(ctx context.Context, args []string) error {
	fset := flag.NewFlagSet("cold", flag.ExitOnError)
	name, bin, cache, _ := commonFlags(fset)
	n := fset.Int("n", 7, "starts per binary")
	var env envList
	fset.Var(&env, "env", "KEY=VALUE for the server's environment, repeatable")
	fset.Parse(args)
	f, ok := fixture.Fixtures[*name]
	if !ok || *n < 1 || *n > 100 {
		usage()
	}
	bins := strings.Split(*bin, ",")
	took := make([][]float64, len(bins))
	cpus := make([][]float64, len(bins))
	for i := range *n {
		for b, path := range bins {
			data, people, cleanup, err := copyFixture(ctx, *cache, f)
			if err != nil {
				return err
			}
			wall, cpu, err := coldStart(ctx, path, data, people, env...)
			cleanup()
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			took[b] = append(took[b], wall)
			cpus[b] = append(cpus[b], cpu)
			fmt.Fprintf(os.Stderr, "start %d, %s: %.1f ms, %.1f ms CPU\n", i+1, path, wall, cpu)
		}
	}
	fmt.Printf("| binary | starts | median | range | CPU median | CPU range |\n| --- | --- | --- | --- | --- | --- |\n")
	for b, path := range bins {
		w, c := slices.Sorted(slices.Values(took[b])), slices.Sorted(slices.Values(cpus[b]))
		fmt.Printf("| %s | %d | %.1f ms | %.1f-%.1f ms | %.1f ms | %.1f-%.1f ms |\n", path, len(w), median(w), w[0], w[len(w)-1], median(c), c[0], c[len(c)-1])
	}
	return nil
}

// median of sorted s.
func median(s []float64) float64 {
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// coldStart starts bin on data as measure does, times exec to the first
// feed of people[0] served (polled every millisecond) in wall time and in
// the server's CPU time (cpuMs), and stops it with SIGTERM.
func coldStart(ctx context.Context, bin, data string, people []fixture.Person, env ...string) (wall, cpu float64, err error) {
	port, err := freePort()
	if err != nil {
		return 0, 0, err
	}
	cmd := exec.Command(bin, "serve")
	cmd.Env = append([]string{"NAH_ADDR=" + port, "NAH_DATA_DIR=" + data, "NAH_REPLICA_URL=" + data + ".replica", "NAH_LOG_LEVEL=warn"}, env...)
	cmd.Stderr = os.Stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer cmd.Process.Kill()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	req, _ := http.NewRequest("GET", "http://"+port+"/api/v1/feed", nil)
	req.Header.Set("Authorization", "Bearer "+people[0].Token)
	c := newClient(1)
	defer c.CloseIdleConnections()
	for {
		if _, ok := get(ctx, c, req); ok {
			break
		}
		if time.Since(t0) > 30*time.Second {
			return 0, 0, fmt.Errorf("no feed served 30 s after start")
		}
		time.Sleep(time.Millisecond)
	}
	wall, cpu = ms(time.Since(t0)), cpuMs(cmd.Process.Pid)

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		return 0, 0, fmt.Errorf("no exit 60 s after SIGTERM")
	}
	return wall, cpu, nil
}

// cpuMs is the CPU time process pid's threads have run so far, in ms, from
// /proc/PID/task/*/schedstat (nanoseconds, where /proc/PID/stat counts
// 10 ms ticks: too coarse for a start of tens of ms). Wall time to the first
// feed carries whatever else the machine runs; CPU time much less.
func cpuMs(pid int) float64 {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			ns += n
		}
	}
	return float64(ns) / 1e6
}
