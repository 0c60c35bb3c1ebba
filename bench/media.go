package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nah-app/nah/bench/fixture"
)

// The media benchmark: N people upload a file of -size MiB at
// once, then N download them at once, against a fresh server process per
// N, so that each N has its own peak resident memory (VmHWM): memory must
// stay flat in N, since a transfer holds a 32 KiB buffer and never a file.
// The ceiling is a plain `cp` of the same bytes on the same disk, then
// sync, since every upload is fsynced before it is answered.

// MediaResult is one run, as written to bench/results/media-NAME-TIME.json.
type MediaResult struct {
	Fixture   string       `json:"fixture"`
	Time      time.Time    `json:"time"`
	Cores     int          `json:"cores"`
	GoVersion string       `json:"go_version"`
	SizeMiB   int          `json:"size_mib"`
	Runs      []MediaRun   `json:"runs"`
	Ceiling   MediaCeiling `json:"ceiling"`
}

// MediaRun is N concurrent uploads then N concurrent downloads.
type MediaRun struct {
	Concurrent   int     `json:"concurrent"`
	UploadMiBs   float64 `json:"upload_mib_s"`
	DownloadMiBs float64 `json:"download_mib_s"`
	UploadErrs   int     `json:"upload_errors"`
	DownloadErrs int     `json:"download_errors"`
	PeakRSSMB    float64 `json:"peak_rss_mb"`
}

// MediaCeiling is `cp` of N files of the same size, with and without an
// fsync of each copy, which makes it as durable as an upload.
type MediaCeiling struct {
	Files      int     `json:"files"`
	CpMiBs     float64 `json:"cp_mib_s"`
	CpSyncMiBs float64 `json:"cp_sync_mib_s"`
}

func mediaCmd(ctx context.Context, args []string) error {
	fset := flag.NewFlagSet("media", flag.ExitOnError)
	name, bin, cache, out := commonFlags(fset)
	sizeMiB := fset.Int("size", 10, "MiB per file")
	conc := fset.String("concurrent", "10,50", "comma-separated numbers of concurrent transfers, a fresh server for each")
	fset.Parse(args)
	f, ok := fixture.Fixtures[*name]
	if !ok {
		usage()
	}
	res := MediaResult{Fixture: f.Name, Time: time.Now().UTC(), Cores: runtime.NumCPU(), GoVersion: runtime.Version(), SizeMiB: *sizeMiB}
	body := make([]byte, *sizeMiB<<20)
	rand.Read(body)
	for _, s := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-concurrent: %q", s)
		}
		data, people, cleanup, err := copyFixture(ctx, *cache, f)
		if err != nil {
			return err
		}
		run, err := mediaRun(ctx, *bin, data, people, body, n)
		cleanup()
		if err != nil {
			return err
		}
		res.Runs = append(res.Runs, run)
		res.Ceiling.Files = max(res.Ceiling.Files, n)
	}
	var err error
	if res.Ceiling, err = cpCeiling(body, res.Ceiling.Files); err != nil {
		return err
	}
	file, err := writeResult(*out, "media-"+f.Name, res.Time, res)
	if err != nil {
		return err
	}
	fmt.Print(mediaMarkdown(res))
	fmt.Printf("\nwritten to %s\n", file)
	return nil
}

// mediaRun starts the server on data, has n people upload body at once,
// then download it at once, and reads the server's VmHWM.
func mediaRun(ctx context.Context, bin, data string, people []fixture.Person, body []byte, n int) (MediaRun, error) {
	run := MediaRun{Concurrent: n}
	if n > len(people) {
		return run, fmt.Errorf("%d transfers need as many people", n)
	}
	port, err := freePort()
	if err != nil {
		return run, err
	}
	base := "http://" + port
	cmd := exec.CommandContext(ctx, bin, "serve")
	cmd.Env = []string{"NAH_ADDR=" + port, "NAH_DATA_DIR=" + data, "NAH_LOG_LEVEL=warn"}
	cmd.Stderr = io.Discard // the first start's setup link is not the point
	if err := cmd.Start(); err != nil {
		return run, err
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	c := newClient(n)
	c.Timeout = 10 * time.Minute
	for t0 := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if r, err := c.Get(base + "/healthz"); err == nil {
			r.Body.Close()
			break
		}
		if time.Since(t0) > 30*time.Second {
			return run, fmt.Errorf("server did not start")
		}
	}
	ids := make([]string, n)
	var mu sync.Mutex
	all := func(do func(i int) error) (float64, int) {
		var wg sync.WaitGroup
		errs := 0
		start := time.Now()
		for i := range n {
			wg.Go(func() {
				if err := do(i); err != nil {
					mu.Lock()
					errs++
					mu.Unlock()
					fmt.Fprintln(os.Stderr, "media:", err)
				}
			})
		}
		wg.Wait()
		return float64(n*len(body)) / (1 << 20) / time.Since(start).Seconds(), errs
	}
	run.UploadMiBs, run.UploadErrs = all(func(i int) error {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/api/v1/media", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+people[i].Token)
		req.Header.Set("Content-Type", "image/jpeg")
		r, err := c.Do(req)
		if err != nil {
			return err
		}
		defer r.Body.Close()
		var m struct{ ID string }
		json.NewDecoder(r.Body).Decode(&m)
		if r.StatusCode != 201 {
			return fmt.Errorf("upload: %d", r.StatusCode)
		}
		ids[i] = m.ID
		return nil
	})
	run.DownloadMiBs, run.DownloadErrs = all(func(i int) error {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/people/"+people[i].ID+"/media/"+ids[i], nil)
		req.Header.Set("Authorization", "Bearer "+people[i].Token)
		r, err := c.Do(req)
		if err != nil {
			return err
		}
		defer r.Body.Close()
		k, err := io.Copy(io.Discard, r.Body)
		if err == nil && (r.StatusCode != 200 || k != int64(len(body))) {
			err = fmt.Errorf("download: %d, %d bytes", r.StatusCode, k)
		}
		return err
	})
	run.PeakRSSMB = procStatusMB(cmd.Process.Pid, "VmHWM")
	return run, nil
}

// cpCeiling times `cp` of n files of body from one folder to another on
// the disk the fixtures are copied to, then the same with sync.
func cpCeiling(body []byte, n int) (MediaCeiling, error) {
	ceil := MediaCeiling{Files: n}
	work, err := os.MkdirTemp("", "nah-bench-cp")
	if err != nil {
		return ceil, err
	}
	defer os.RemoveAll(work)
	src := filepath.Join(work, "src")
	os.Mkdir(src, 0o700)
	for i := range n {
		if err := os.WriteFile(filepath.Join(src, strconv.Itoa(i)), body, 0o600); err != nil {
			return ceil, err
		}
	}
	exec.Command("sync").Run()
	total := float64(n*len(body)) / (1 << 20)
	for i, withSync := range []bool{false, true} {
		dst := filepath.Join(work, "dst"+strconv.Itoa(i))
		start := time.Now()
		if out, err := exec.Command("cp", "-r", src, dst).CombinedOutput(); err != nil {
			return ceil, fmt.Errorf("cp: %v: %s", err, out)
		}
		if withSync {
			// fsync of each copy, as each upload is: sync with file
			// arguments (coreutils 8.24 and later) syncs just those.
			files, _ := filepath.Glob(filepath.Join(dst, "*"))
			if out, err := exec.Command("sync", files...).CombinedOutput(); err != nil {
				return ceil, fmt.Errorf("sync: %v: %s", err, out)
			}
			ceil.CpSyncMiBs = total / time.Since(start).Seconds()
		} else {
			ceil.CpMiBs = total / time.Since(start).Seconds()
			exec.Command("sync").Run()
		}
	}
	return ceil, nil
}

func mediaMarkdown(r MediaResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### media, %s, %s UTC (%d cores, %s)\n\n", r.Fixture, r.Time.Format("2006-01-02 15:04"), r.Cores, r.GoVersion)
	fmt.Fprintf(&b, "| concurrent %d MiB transfers | upload MiB/s | vs cp+sync | download MiB/s | vs cp | errors | peak VmHWM MB | < 250 MB |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n", r.SizeMiB)
	for _, x := range r.Runs {
		fmt.Fprintf(&b, "| %d | %.0f | %.2f | %.0f | %.2f | %d | %.0f | %s |\n", x.Concurrent, x.UploadMiBs, x.UploadMiBs/r.Ceiling.CpSyncMiBs,
			x.DownloadMiBs, x.DownloadMiBs/r.Ceiling.CpMiBs, x.UploadErrs+x.DownloadErrs, x.PeakRSSMB, map[bool]string{true: "pass", false: "FAIL"}[x.PeakRSSMB < 250])
	}
	fmt.Fprintf(&b, "\nceiling: cp of %d files of %d MiB on the same disk: %.0f MiB/s, %.0f MiB/s with sync.\n", r.Ceiling.Files, r.SizeMiB, r.Ceiling.CpMiBs, r.Ceiling.CpSyncMiBs)
	return b.String()
}
