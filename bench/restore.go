package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nah-app/nah/bench/fixture"
)

// RestoreResult is one measurement of threshold 7, written to
// bench/results/restore-NAME-TIME.json.
type RestoreResult struct {
	Fixture      string    `json:"fixture"`
	Time         time.Time `json:"time"`
	Cores        int       `json:"cores"`
	GoVersion    string    `json:"go_version"`
	Files        int       `json:"files"`
	History      int       `json:"from_history"`
	Sweep        int       `json:"from_sweep"`
	DataMB       float64   `json:"restored_mb"`
	ReplicaMB    float64   `json:"replica_mb"`
	ReplicateSec float64   `json:"replicate_seconds"` // making the replica: a post by everyone, then a clean stop
	Seconds      float64   `json:"restore_seconds"`   // nah restore, exec to exit
	PeakRSSMB    float64   `json:"restore_peak_rss_mb"`
	Workers      int       `json:"workers"`
	Command      string    `json:"command"`
}

// restoreCmd measures SPEC threshold 7: the whole-server restore of a
// fixture from its replica. It copies the fixture, serves it with
// replication on (a replica directory beside it) and has every person post
// once, so that every file enters Litestream's watched set and gets a
// history on the replica; stops the server; then times `nah restore` into
// an empty directory and checks every file came back.
func restoreCmd(ctx context.Context, args []string) error {
	fset := flag.NewFlagSet("restore", flag.ExitOnError)
	name, bin, cache, out := commonFlags(fset)
	workers := fset.Int("workers", 0, "nah restore -workers (0: its default)")
	thresholds := fset.String("thresholds", "bench/THRESHOLDS.md", "the file whose restore table is rewritten")
	fset.Parse(args)
	f, ok := fixture.Fixtures[*name]
	if !ok {
		usage()
	}
	data, people, cleanup, err := copyFixture(ctx, *cache, f)
	if err != nil {
		return err
	}
	defer cleanup()
	work := filepath.Dir(data)
	repl, restored := filepath.Join(work, "replica"), filepath.Join(work, "restored")
	res := RestoreResult{Fixture: f.Name, Time: time.Now().UTC(), Cores: runtime.NumCPU(), GoVersion: runtime.Version(), Workers: *workers}

	t0 := time.Now()
	if err := replicateAll(ctx, *bin, data, repl, people); err != nil {
		return err
	}
	res.ReplicateSec = time.Since(t0).Seconds()
	res.ReplicaMB = mb(dirSize(repl))

	argv := []string{"restore", "-from", repl, "-to", restored}
	if *workers > 0 {
		argv = append(argv, "-workers", strconv.Itoa(*workers))
	}
	cmd := exec.CommandContext(ctx, *bin, argv...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	fmt.Fprintf(os.Stderr, "timing nah %s\n", strings.Join(argv, " "))
	t1 := time.Now()
	err = cmd.Run()
	res.Seconds = time.Since(t1).Seconds()
	if err != nil {
		return fmt.Errorf("nah restore: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.PeakRSSMB = float64(ru.Maxrss) / 1024
	}
	m := regexp.MustCompile(`Restored (\d+) files? .*: (\d+) from Litestream history, (\d+) from sweeps`).FindStringSubmatch(stdout.String())
	if m == nil {
		return fmt.Errorf("nah restore said:\n%s", stdout.String())
	}
	res.Files, _ = strconv.Atoi(m[1])
	res.History, _ = strconv.Atoi(m[2])
	res.Sweep, _ = strconv.Atoi(m[3])
	if want := len(people) + 1; res.Files != want {
		return fmt.Errorf("%d files restored, want %d (everyone and the directory)", res.Files, want)
	}
	res.DataMB = mb(dirSize(restored))
	res.Command = fmt.Sprintf("make build && go run ./bench restore -fixture %s -bin %s", f.Name, *bin)

	file, err := writeResult(*out, "restore-"+f.Name, res.Time, res)
	if err != nil {
		return err
	}
	table := restoreMarkdown(res)
	fmt.Print(table)
	fmt.Printf("\nwritten to %s\n", file)
	return updateThresholds(*thresholds, "restore-"+f.Name, table)
}

// replicateAll serves data with replication to repl, has every person
// post once from 4 clients (each file is watched, synced whole, then
// written), and stops the server with SIGTERM, which gives every watched
// file a last sync.
func replicateAll(ctx context.Context, bin, data, repl string, people []fixture.Person) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	base := "http://" + port
	cmd := exec.Command(bin, "serve")
	cmd.Env = []string{"NAH_ADDR=" + port, "NAH_DATA_DIR=" + data, "NAH_LOG_LEVEL=warn", "NAH_REPLICA_URL=" + repl, "NAH_SWEEP_EVERY=off"}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Process.Kill()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	c := newClient(4)
	for t0 := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if r, err := c.Get(base + "/healthz"); err == nil {
			r.Body.Close()
			break
		}
		if time.Since(t0) > 30*time.Second {
			return fmt.Errorf("server did not start")
		}
	}
	fmt.Fprintf(os.Stderr, "replicating: %d people post once each\n", len(people))
	jobs := make(chan fixture.Person)
	errc := make(chan error, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for p := range jobs {
				req, _ := http.NewRequestWithContext(ctx, "POST", base+"/api/v1/moments", strings.NewReader(`{"body":"cmVwbGljYXRlZA=="}`))
				req.Header.Set("Authorization", "Bearer "+p.Token)
				req.Header.Set("Content-Type", "application/json")
				r, err := c.Do(req)
				if err != nil {
					errc <- err
					return
				}
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
				if r.StatusCode != 201 {
					errc <- fmt.Errorf("post as %s: %s", p.Handle, r.Status)
					return
				}
			}
		})
	}
feed:
	for _, p := range people {
		select {
		case jobs <- p:
		case err := <-errc:
			close(jobs)
			wg.Wait()
			return err
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("server exit: %w", err)
		}
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("server did not stop 2 min after SIGTERM")
	}
	return ctx.Err()
}

func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
		return nil
	})
	return n
}

func restoreMarkdown(r RestoreResult) string {
	var b strings.Builder
	verdict := "pass"
	if r.Seconds >= 60 {
		verdict = "FAIL"
	}
	goal := "pass"
	if r.Seconds >= 10 {
		goal = "missed"
	}
	workers := "default"
	if r.Workers > 0 {
		workers = strconv.Itoa(r.Workers)
	}
	fmt.Fprintf(&b, "### restore, %s, %s (%d cores, %s)\n\n", r.Fixture, r.Time.Format("2006-01-02 15:04 UTC"), r.Cores, r.GoVersion)
	fmt.Fprintf(&b, "`%s`\n\n", r.Command)
	b.WriteString("| check | limit | measured | |\n| --- | --- | --- | --- |\n")
	fmt.Fprintf(&b, "| 7. restore of the whole server from its replica | < 60 s | %.1f s | %s |\n", r.Seconds, verdict)
	fmt.Fprintf(&b, "| goal: restore of the whole server | < 10 s | %.1f s | %s |\n\n", r.Seconds, goal)
	fmt.Fprintf(&b, "%d files (%d from Litestream history, %d from sweeps), %.1f MB restored from a %.1f MB replica directory, workers %s, restoring process peak RSS %.0f MB; making the replica (everyone posts once, clean stop) took %.1f s.\n",
		r.Files, r.History, r.Sweep, r.DataMB, r.ReplicaMB, workers, r.PeakRSSMB, r.ReplicateSec)
	return b.String()
}
