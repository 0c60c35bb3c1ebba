package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// check is one line of the table: a threshold of SPEC section 5 or one of
// our own goals, with its limit written before any measurement.
type check struct {
	name    string
	limit   float64
	unit    string
	goal    bool // a goal, not a threshold: missing it fails nothing
	value   func(Result) float64
	atLeast bool // the value must be at least limit (else under it)
}

func checks(fixtureName string) []check {
	peakGoal := 120.0
	if fixtureName == "people-10k" {
		peakGoal = 200
	}
	return []check{
		{name: "1. feed p95, 50 readers", limit: 50, unit: "ms", value: func(r Result) float64 { return r.Feed50.P95ms }},
		{name: "2. post p95, 16 writers", limit: 100, unit: "ms", value: func(r Result) float64 { return r.Post16.P95ms }},
		{name: "3. idle resident memory", limit: 150, unit: "MB", value: func(r Result) float64 { return r.IdleRSSMB }},
		{name: "4. peak resident memory (VmHWM)", limit: 400, unit: "MB", value: func(r Result) float64 { return r.PeakRSSMB }},
		{name: "5. cold start to first feed", limit: 2000, unit: "ms", value: func(r Result) float64 { return r.ColdStartMs }},
		{name: "6. binary size", limit: 100, unit: "MB", value: func(r Result) float64 { return r.BinaryMB }},
		{name: "goal: feeds/s vs static ceiling", limit: 0.40, unit: "ratio", goal: true, atLeast: true, value: func(r Result) float64 { return r.CeilingRatio }},
		{name: "goal: feed p95, 50 readers", limit: 15, unit: "ms", goal: true, value: func(r Result) float64 { return r.Feed50.P95ms }},
		{name: "goal: post p95, 16 writers", limit: 5, unit: "ms", goal: true, value: func(r Result) float64 { return r.Post16.P95ms }},
		{name: "goal: idle resident memory", limit: 40, unit: "MB", goal: true, value: func(r Result) float64 { return r.IdleRSSMB }},
		{name: "goal: peak resident memory", limit: peakGoal, unit: "MB", goal: true, value: func(r Result) float64 { return r.PeakRSSMB }},
		{name: "goal: cold start to first feed", limit: 150, unit: "ms", goal: true, value: func(r Result) float64 { return r.ColdStartMs }},
	}
}

func (c check) pass(r Result) bool {
	if c.atLeast {
		return c.value(r) >= c.limit
	}
	return c.value(r) < c.limit
}

// markdown renders a result as the table that THRESHOLDS.md carries.
func markdown(r Result) string {
	var b strings.Builder
	server := ""
	if r.Server != "" {
		server = ", " + r.Server
	}
	fmt.Fprintf(&b, "### %s%s, %s (%d cores, %s)\n\n", r.Fixture, server, r.Time.Format("2006-01-02 15:04 UTC"), r.Cores, r.GoVersion)
	if len(r.Env) > 0 {
		fmt.Fprintf(&b, "Settings: `%s`\n\n", strings.Join(r.Env, " "))
	}
	if r.Seed == "api" {
		b.WriteString("Started on the fixture seeded through the API and cleanly stopped with its replica (`bench footprint`), as a restarted server finds them; no wait for the replica after the warm-up.\n\n")
	}
	b.WriteString("| check | limit | measured | |\n| --- | --- | --- | --- |\n")
	for _, c := range checks(r.Fixture) {
		verdict := "pass"
		if !c.pass(r) {
			verdict = "FAIL"
			if c.goal {
				verdict = "missed"
			}
		}
		op := "<"
		if c.atLeast {
			op = "≥"
		}
		fmt.Fprintf(&b, "| %s | %s %s %s | %s | %s |\n", c.name, op, trim(c.limit), c.unit, trim(c.value(r)), verdict)
	}
	b.WriteString("| 7. restore from replica | < 60 s | measured by `go run ./bench restore`: see its table | |\n")
	fmt.Fprintf(&b, "\n| load | requests | errors | per s | p50 ms | p95 ms | p99 ms | max ms |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, l := range []struct {
		name string
		l    Latency
	}{{"feed, 1 reader", r.Feed1}, {"feed, 50 readers", r.Feed50}, {"post warm-up, everyone once", r.PostWarmup}, {"post, 16 writers, uniform", r.Post16}, {"post, 16 writers, the fixture's mix", r.PostMix16}, {"static ceiling, 50 readers", r.Ceiling50}} {
		if l.l.Requests == 0 && l.l.Errors == 0 {
			continue // not measured by the run that made this result
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.0f | %.2f | %.2f | %.2f | %.1f |\n", l.name, l.l.Requests, l.l.Errors, l.l.PerSecond, l.l.P50ms, l.l.P95ms, l.l.P99ms, l.l.MaxMs)
	}
	fmt.Fprintf(&b, "\nfeeds/s at 50 readers = %.0f%% of the static ceiling (%d-byte pages); open descriptors after load %d, open person files %d; clean stop in %.1f s, data directory after it %.1f MB, non-empty -wal files %d; binary %.1f MB.\n",
		100*r.CeilingRatio, r.Feed50.MeanBytes, r.OpenFDs, r.OpenPersonFiles, r.StopS, r.DataDirMB, r.WALLeft, r.BinaryMB)
	for _, pc := range []struct {
		name string
		c    *PostCost
	}{{"uniform", r.PostCost}, {"mixed", r.PostMixCost}} {
		if c := pc.c; c != nil && r.Server != "" {
			fmt.Fprintf(&b, "\nper post of the %s 16-writer phase: %.2f ms of the server's CPU.\n", pc.name, c.CPUms)
		} else if c != nil {
			fmt.Fprintf(&b, "\nper post of the %s 16-writer phase: %.2f file opens, %.2f closes, %.2f replication take-ups, %.2f ships, %.2f ms of the server's CPU.\n", pc.name, c.Opens, c.Closes, c.TakeUps, c.Ships, c.CPUms)
		}
	}
	if d := r.DiskSync; d != nil {
		fmt.Fprintf(&b, "\na sync of a growing file on the data's disk, before the start: %.0f µs of CPU, %.0f µs of wall (a post at NAH_SYNC=full makes one).\n", d.CPUus, d.WallUs)
	}
	if r.WarmupCaughtUpS != 0 {
		fmt.Fprintf(&b, "\nthe replica held the warm-up's posts (every file's first snapshot) %.1f s after it, before the measured post phases (-1: not within a minute).\n", r.WarmupCaughtUpS)
	}
	if l := r.ReplicaLag; l != nil {
		fmt.Fprintf(&b, "\nreplica lag: at most %.1f s during the uniform 16-writer phase (%d files queued at most), back to 0 %.1f s after it (-1: not within a minute).\n", l.DuringMaxS, l.QueuedMax, l.CaughtUpS)
	}
	if l := r.ReplicaLagMix; l != nil {
		fmt.Fprintf(&b, "\nreplica lag: at most %.1f s during the mixed 16-writer phase (%d files queued at most), back to 0 %.1f s after it (-1: not within a minute).\n", l.DuringMaxS, l.QueuedMax, l.CaughtUpS)
	}
	return b.String()
}

func trim(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// updateThresholds replaces the generated table of fixture in path: the
// text between its BEGIN and END markers, appended if absent. The rest of the
// file is written by hand.
func updateThresholds(path, fixtureName, table string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin := "<!-- BEGIN generated " + fixtureName + " -->"
	end := "<!-- END generated " + fixtureName + " -->"
	s := string(b)
	block := begin + "\n" + table + end
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i >= 0 && j > i {
		s = s[:i] + block + s[j+len(end):]
	} else {
		s = strings.TrimRight(s, "\n") + "\n\n" + block + "\n"
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

// compareCmd prints each figure of a result as a ratio to the baseline.
func compareCmd(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	baseline := fs.String("baseline", "bench/baseline.json", "the committed baseline")
	fs.Parse(args)
	var bases map[string]Result
	raw, err := os.ReadFile(*baseline)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &bases); err != nil {
		return fmt.Errorf("%s: %w", *baseline, err)
	}
	var r Result
	if file := fs.Arg(0); file != "" {
		raw, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
	} else {
		rs, err := newestResults("bench/results")
		if err != nil {
			return err
		}
		for _, x := range rs {
			if x.Time.After(r.Time) {
				r = x
			}
		}
		if r.Fixture == "" {
			return fmt.Errorf("no results in bench/results")
		}
	}
	base, ok := bases[r.Fixture]
	if !ok {
		return fmt.Errorf("the baseline has no %s", r.Fixture)
	}
	fmt.Printf("%s: %s against the baseline of %s (ratio > 1 means more)\n\n| figure | baseline | now | ratio |\n| --- | --- | --- | --- |\n",
		r.Fixture, r.Time.Format("2006-01-02 15:04"), base.Time.Format("2006-01-02 15:04"))
	for _, f := range []struct {
		name string
		v    func(Result) float64
	}{
		{"feed p95 ms, 50 readers", func(r Result) float64 { return r.Feed50.P95ms }},
		{"feeds/s, 50 readers", func(r Result) float64 { return r.Feed50.PerSecond }},
		{"feeds/s ratio to ceiling", func(r Result) float64 { return r.CeilingRatio }},
		{"feed p95 ms, 1 reader", func(r Result) float64 { return r.Feed1.P95ms }},
		{"post p95 ms, 16 writers", func(r Result) float64 { return r.Post16.P95ms }},
		{"posts/s, 16 writers", func(r Result) float64 { return r.Post16.PerSecond }},
		{"post p95 ms, 16 writers, mix", func(r Result) float64 { return r.PostMix16.P95ms }},
		{"posts/s, 16 writers, mix", func(r Result) float64 { return r.PostMix16.PerSecond }},
		{"idle MB", func(r Result) float64 { return r.IdleRSSMB }},
		{"peak MB", func(r Result) float64 { return r.PeakRSSMB }},
		{"cold start ms", func(r Result) float64 { return r.ColdStartMs }},
		{"binary MB", func(r Result) float64 { return r.BinaryMB }},
	} {
		b, n := f.v(base), f.v(r)
		ratio := "-"
		if b != 0 {
			ratio = fmt.Sprintf("%.2f", n/b)
		}
		fmt.Printf("| %s | %s | %s | %s |\n", f.name, trim(b), trim(n), ratio)
	}
	return nil
}

// newestResults returns the newest result of each fixture in dir.
func newestResults(dir string) (map[string]Result, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	out := map[string]Result{}
	for _, m := range matches {
		if b := filepath.Base(m); strings.HasPrefix(b, "hostile-") || strings.HasPrefix(b, "media-") || strings.HasPrefix(b, "digest-") || strings.HasPrefix(b, "restore-") || strings.HasPrefix(b, "pocketbase-") || strings.HasPrefix(b, "soak-") || strings.HasPrefix(b, "restart-") || strings.HasPrefix(b, "mls-") {
			continue // the hostile mix's, the media runs', the digests', the restores' and the MLS runs' results have shapes of their own; PocketBase's are not nah's
		}
		raw, err := os.ReadFile(m)
		if err != nil {
			return nil, err
		}
		var r Result
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
		if old, ok := out[r.Fixture]; !ok || r.Time.After(old.Time) {
			out[r.Fixture] = r
		}
	}
	return out, nil
}

// baselineCmd makes the baseline from the newest result of each fixture.
func baselineCmd(args []string) error {
	fs := flag.NewFlagSet("baseline", flag.ExitOnError)
	results := fs.String("results", "bench/results", "directory of results")
	out := fs.String("o", "bench/baseline.json", "the baseline to write")
	fs.Parse(args)
	rs, err := newestResults(*results)
	if err != nil {
		return err
	}
	if len(rs) == 0 {
		return fmt.Errorf("no results in %s", *results)
	}
	b, _ := json.MarshalIndent(rs, "", "  ")
	return os.WriteFile(*out, append(b, '\n'), 0o644)
}
