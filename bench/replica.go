package main

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/superfly/ltx"
)

// server is a nah started by the soak and restart phases, replicating to
// a directory the bench owns.
type server struct {
	cmd     *exec.Cmd
	done    chan error
	base    string // http://ADDR
	metrics string // its /metrics URL
}

// startServer starts bin serve on data, replicating to repl, and waits
// for /healthz to answer.
func startServer(bin, data, repl string, env []string) (*server, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	maddr, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve")
	cmd.Env = append([]string{"NAH_ADDR=" + addr, "NAH_DATA_DIR=" + data, "NAH_REPLICA_URL=" + repl, "NAH_LOG_LEVEL=warn", "NAH_METRICS_ADDR=" + maddr}, env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, done: make(chan error, 1), base: "http://" + addr, metrics: "http://" + maddr + "/metrics"}
	go func() { s.done <- cmd.Wait() }()
	for t0 := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if r, err := http.Get(s.base + "/healthz"); err == nil {
			r.Body.Close()
			return s, nil
		}
		if time.Since(t0) > 30*time.Second {
			cmd.Process.Kill()
			return nil, fmt.Errorf("%s did not start", bin)
		}
	}
}

// stop sends SIGTERM (a clean stop replicates every file still queued)
// and waits for the exit.
func (s *server) stop() error {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		return err
	case <-time.After(stopLimit):
		s.cmd.Process.Kill()
		return fmt.Errorf("no exit %v after SIGTERM", stopLimit)
	}
}

// waitReplicated waits until the metrics say the replica holds every
// change (nah_replica_queue and nah_replica_lag_seconds both 0, twice in a
// row), at most limit, and returns how long that took.
func waitReplicated(ctx context.Context, metrics string, limit time.Duration) (time.Duration, error) {
	t0 := time.Now()
	zeros := 0
	for time.Since(t0) < limit && ctx.Err() == nil {
		if lag, q, ok := readLag(metrics); ok && lag == 0 && q == 0 {
			if zeros++; zeros == 2 {
				return time.Since(t0), nil
			}
		} else {
			zeros = 0
		}
		time.Sleep(lagEvery)
	}
	return time.Since(t0), fmt.Errorf("replica not caught up %v after the posts", limit)
}

// ltxFile is an LTX file on the replica, by its path under the replica's
// root: DB/ltx/LEVEL/NAME.ltx, DB the file's path in the data directory.
type ltxFile struct {
	DB    string `json:"db"`
	Level string `json:"level"`
	Bytes int64  `json:"bytes"`
}

// scanLTX lists every LTX file under the replica's root (files being
// written, which end in .tmp, are not).
func scanLTX(root string) map[string]ltxFile {
	out := map[string]ltxFile{}
	filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() || !strings.HasSuffix(p, ".ltx") {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return nil // deleted since the listing: retention at work
		}
		rel, _ := filepath.Rel(root, p)
		db, rest, _ := strings.Cut(filepath.ToSlash(rel), "/ltx/")
		level, _, _ := strings.Cut(rest, "/")
		out[rel] = ltxFile{DB: db, Level: level, Bytes: info.Size()}
		return nil
	})
	return out
}

// ltxPages counts the pages of an LTX file and returns its header; -1
// pages if it cannot be read whole.
func ltxPages(path string) (int, ltx.Header) {
	fh, err := os.Open(path)
	if err != nil {
		return -1, ltx.Header{}
	}
	defer fh.Close()
	dec := ltx.NewDecoder(fh)
	if err := dec.Verify(); err != nil {
		return -1, dec.Header()
	}
	return dec.PageN(), dec.Header()
}
