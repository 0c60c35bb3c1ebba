package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nah-app/nah/bench/fixture"
)

// The server under measure as a process on this machine: started, found
// on its port, read from /proc, and the fixture's data directory copied
// and measured on disk.

var listenRE = regexp.MustCompile(`listen=(\S+)`)

// startProcess starts cmd and returns the address it prints on standard
// output as listen=ADDR.
func startProcess(cmd *exec.Cmd) (string, error) {
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		return "", err
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil && !sent {
				addr <- m[1]
				sent = true
			}
		}
	}()
	go func() { cmd.Wait(); pw.Close() }()
	select {
	case a := <-addr:
		return a, nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		return "", fmt.Errorf("%s did not start", cmd.Path)
	}
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// procStatusMB reads a kB field of /proc/PID/status in MB.
func procStatusMB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}

// procCPUms is the CPU time (user + system) of process pid so far, from
// /proc/PID/stat, exited threads included.
func procCPUms(pid int) (float64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// Fields after the command's closing parenthesis; utime and stime are
	// the 14th and 15th of the line, in clock ticks of 10 ms (USER_HZ 100).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0, false
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) * 10, true
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }

// copyFixture copies the cached fixture f (seeding it on first use) into a
// fresh data directory, and returns it with the fixture's people and a
// function that removes the copy. The copy is written to disk before it
// returns: the first measurement, the cold start, otherwise ran while the
// kernel wrote back the copy, and the first feed's file creations (each
// person file it opens makes its -wal and -shm) waited behind that
// writeback: alternate starts of one binary were slower right after the
// copy than after a sync.
func copyFixture(ctx context.Context, cache string, f fixture.Fixture) (data string, people []fixture.Person, cleanup func(), err error) {
	src, err := fixtureDir(ctx, cache, f)
	if err != nil {
		return "", nil, nil, err
	}
	raw, err := os.ReadFile(filepath.Join(src, fixture.PeopleFile))
	if err != nil {
		return "", nil, nil, err
	}
	if err := json.Unmarshal(raw, &people); err != nil {
		return "", nil, nil, err
	}
	work, err := os.MkdirTemp("", "nah-bench-run")
	if err != nil {
		return "", nil, nil, err
	}
	cleanup = func() { removeCopy(cache, work) }
	data = filepath.Join(work, "data")
	fmt.Fprintf(os.Stderr, "copying %s\n", f.Name)
	if err := copyDir(filepath.Join(src, fixture.DataDir), data); err != nil {
		cleanup()
		return "", nil, nil, err
	}
	syscall.Sync()
	return data, people, cleanup, nil
}

// copyDir copies a data directory file by file.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if e.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// dirStats is the size of the data directory in MB and its count of
// non-empty -wal files.
func dirStats(data string) (float64, int) {
	var size int64
	wal := 0
	filepath.WalkDir(data, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if info, err := e.Info(); err == nil {
				size += info.Size()
				if strings.HasSuffix(p, "-wal") && info.Size() > 0 {
					wal++
				}
			}
		}
		return nil
	})
	return mb(size), wal
}

// removedName is the file in the cache whose time is the last removal of
// a run's copy (removeCopy).
const removedName = "copy-removed"

// removeCopy removes a run's copy, work, and notes when in cache. On this
// machine's disk (ext4 without a journal) every file made afterwards skips
// the inodes freed in the last minute, five more while their table block
// is unwritten: two minutes after a copy of 25,000 files went, a replica
// file made cost 0.4 ms of the server's CPU against 0.03 ms
// (bench/THRESHOLDS.md, "A copy removed"); settle waits that out.
func removeCopy(cache, work string) {
	os.RemoveAll(work)
	os.WriteFile(filepath.Join(cache, removedName), nil, 0o644)
}

// settle waits until d has passed since the last removeCopy in cache,
// saying why, before a run measures.
func settle(cache string, d time.Duration) {
	fi, err := os.Stat(filepath.Join(cache, removedName))
	if err != nil {
		return
	}
	if wait := time.Until(fi.ModTime().Add(d)); wait > 0 {
		fmt.Fprintf(os.Stderr, "waiting %v: the last run's copy was removed %v ago, and until %v after, each file made skips the inodes it freed (-settle)\n",
			wait.Round(time.Second), time.Since(fi.ModTime()).Round(time.Second), d)
		time.Sleep(wait)
	}
}
