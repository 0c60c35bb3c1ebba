package main

import (
	"context"
	"database/sql"
	"encoding/base64"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	_ "modernc.org/sqlite"

	"github.com/nah-app/nah"
)

// The restore time of a person against the length of their history
// (bench/THRESHOLDS.md, "Restore by the length of a history"): a "week" and
// a "year" of one heavy poster (5 moments a day), in time scaled down by a
// short NAH_RETENTION, since the retention policy follows from the window
// alone: with a window of W, a week is W and a year 52 W. Two servers, one
// person each, post at the same rate at the same time; after a clean stop,
// nah restore of each replica is timed, alternated, and the restored file
// is checked to hold every moment.

// HistoryResult is bench restore-history's result.
type HistoryResult struct {
	Time      time.Time    `json:"time"`
	Cores     int          `json:"cores"`
	GoVersion string       `json:"go_version"`
	Window    string       `json:"window"` // NAH_RETENTION of both servers
	PerSecond float64      `json:"posts_per_second"`
	Runs      []HistoryRun `json:"runs"`
	Ratio     float64      `json:"median_ratio_long_to_short"`
	Command   string       `json:"command"`
}

// HistoryRun is one server's history and its restores.
type HistoryRun struct {
	Windows      int       `json:"windows"` // history length, in windows
	Moments      int       `json:"moments"`
	ReplicaFiles int       `json:"replica_ltx_files"` // of the person's file, after the stop
	ReplicaMB    float64   `json:"replica_mb"`
	FileMB       float64   `json:"restored_file_mb"`
	Seconds      []float64 `json:"restore_seconds"` // nah restore, exec to exit, each try
	Median       float64   `json:"median_s"`
}

func restoreHistoryCmd(ctx context.Context, args []string) error {
	fset := flag.NewFlagSet("restore-history", flag.ExitOnError)
	bin := fset.String("bin", "bin/nah", "the release binary to measure")
	out := fset.String("out", "bench/results", "directory for the result JSON")
	window := fset.Duration("window", 10*time.Second, "NAH_RETENTION of both servers: a week, scaled")
	long := fset.Int("windows", 52, "the long history, in windows (52: a year)")
	rate := fset.Float64("rate", 3.5, "posts a second: 35 a window is 5 a day")
	tries := fset.Int("tries", 5, "restores of each replica")
	fset.Parse(args)
	res := HistoryResult{Time: time.Now().UTC(), Cores: runtime.NumCPU(), GoVersion: runtime.Version(), Window: window.String(), PerSecond: *rate,
		Command: fmt.Sprintf("make build && go run ./bench restore-history -bin %s -window %v -windows %d -rate %g", *bin, *window, *long, *rate)}
	work, err := os.MkdirTemp("", "nah-bench-history")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	lengths := []int{1, *long}
	runs := make([]HistoryRun, len(lengths))
	errs := make(chan error, len(lengths))
	for k, n := range lengths {
		go func() {
			dir := filepath.Join(work, fmt.Sprint(n))
			var err error
			runs[k], err = historyServer(ctx, *bin, dir, *window, time.Duration(n)*(*window), *rate)
			runs[k].Windows = n
			errs <- err
		}()
	}
	for range lengths {
		if err := <-errs; err != nil {
			return err
		}
	}
	for range *tries {
		for k, n := range lengths {
			dir := filepath.Join(work, fmt.Sprint(n))
			to := filepath.Join(dir, "restored")
			os.RemoveAll(to)
			cmd := exec.CommandContext(ctx, *bin, "restore", "-from", filepath.Join(dir, "replica"), "-to", to)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
			t0 := time.Now()
			if b, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("nah restore: %v\n%s", err, b)
			}
			runs[k].Seconds = append(runs[k].Seconds, time.Since(t0).Seconds())
			file, moments, err := restoredPerson(ctx, to)
			if err != nil {
				return err
			}
			if moments != runs[k].Moments {
				return fmt.Errorf("history of %d windows: restored %d moments, %d were acknowledged", n, moments, runs[k].Moments)
			}
			runs[k].FileMB = file
		}
	}
	for k := range runs {
		s := slices.Clone(runs[k].Seconds)
		slices.Sort(s)
		runs[k].Median = s[len(s)/2]
	}
	res.Runs = runs
	res.Ratio = runs[1].Median / runs[0].Median
	file, err := writeResult(*out, "restore-history", res.Time, res)
	if err != nil {
		return err
	}
	fmt.Print(historyMarkdown(res))
	fmt.Printf("\nwritten to %s\n", file)
	return nil
}

func historyMarkdown(r HistoryResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Restore of one person by the length of their history: window (NAH_RETENTION) %s, %.1f posts/s, %s (%d cores).\n\n", r.Window, r.PerSecond, r.Time.Format("2006-01-02 15:04 UTC"), r.Cores)
	b.WriteString("| history | moments | LTX files on the replica | replica MB | person file MB | nah restore, median s | tries |\n|---|---|---|---|---|---|---|\n")
	for _, run := range r.Runs {
		tries := make([]string, len(run.Seconds))
		for i, s := range run.Seconds {
			tries[i] = fmt.Sprintf("%.2f", s)
		}
		fmt.Fprintf(&b, "| %d windows | %d | %d | %.2f | %.2f | %.2f | %s |\n", run.Windows, run.Moments, run.ReplicaFiles, run.ReplicaMB, run.FileMB, run.Median, strings.Join(tries, " "))
	}
	fmt.Fprintf(&b, "\nThe long history restores in %.2f× the short one's time.\n", r.Ratio)
	return b.String()
}

// historyServer serves an empty data directory in dir with retention
// window, signs one person up, has them post at rate for d, and stops the
// server cleanly.
func historyServer(ctx context.Context, bin, dir string, window, d time.Duration, rate float64) (HistoryRun, error) {
	var run HistoryRun
	port, err := freePort()
	if err != nil {
		return run, err
	}
	base := "http://" + port
	cmd := exec.Command(bin, "serve")
	cmd.Env = []string{"NAH_ADDR=" + port, "NAH_DATA_DIR=" + filepath.Join(dir, "data"), "NAH_REPLICA_URL=" + filepath.Join(dir, "replica"),
		"NAH_LOG_LEVEL=warn", "NAH_OPEN_SIGNUP=true", "NAH_SWEEP_EVERY=off", "NAH_RETENTION=" + window.String()}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return run, err
	}
	defer cmd.Process.Kill()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	c := newClient(1)
	defer c.CloseIdleConnections()
	for t0 := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if r, err := c.Get(base + "/healthz"); err == nil {
			r.Body.Close()
			break
		}
		if time.Since(t0) > 30*time.Second {
			return run, fmt.Errorf("server did not start")
		}
	}
	var acct struct {
		Token string `json:"token"`
	}
	if err := nahCall(ctx, c, "POST", base+"/api/v1/accounts", "", map[string]string{"handle": "poster", "password": "bench-password"}, 201, &acct); err != nil {
		return run, err
	}
	body := make([]byte, 400)
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		body[0], body[1] = byte(run.Moments), byte(run.Moments>>8)
		in := map[string]string{"body": base64.StdEncoding.EncodeToString(body)}
		if err := nahCall(ctx, c, "POST", base+"/api/v1/moments", acct.Token, in, 201, nil); err != nil {
			return run, err
		}
		run.Moments++
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			return run, fmt.Errorf("server exit: %w", err)
		}
	case <-time.After(2 * time.Minute):
		return run, fmt.Errorf("server did not stop 2 min after SIGTERM")
	}
	repl := filepath.Join(dir, "replica")
	filepath.WalkDir(filepath.Join(repl, nah.PeopleRel), func(p string, e fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".ltx") {
			run.ReplicaFiles++
		}
		return nil
	})
	run.ReplicaMB = mb(dirSize(repl))
	return run, nil
}

// restoredPerson is the size in MB and the count of moments of the one
// person file restored into data.
func restoredPerson(ctx context.Context, data string) (float64, int, error) {
	files, _ := filepath.Glob(filepath.Join(data, filepath.FromSlash(nah.PersonRel("*"))))
	if len(files) != 1 {
		return 0, 0, fmt.Errorf("%d person files restored into %s, want 1", len(files), data)
	}
	st, err := os.Stat(files[0])
	if err != nil {
		return 0, 0, err
	}
	db, err := sql.Open("sqlite", "file:"+files[0]+"?mode=ro")
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	var n int
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM moments`).Scan(&n)
	return mb(st.Size()), n, err
}
