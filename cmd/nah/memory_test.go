package main

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nah-app/nah/internal/testutil"
)

// memoryCgroup makes a memory cgroup limited to limit bytes for the test
// and returns the file a process joins it through. cgroup v2 (the memory
// controller at the unified root) and v1 (/sys/fs/cgroup/memory) are both
// handled. Where neither can be made (not root, no controller) the test is
// skipped, except under CI=true, where CI promised it: there it fails.
func memoryCgroup(t *testing.T, limit int64) (procs string) {
	t.Helper()
	unavailable := func(why string, args ...any) string {
		msg := fmt.Sprintf("no memory cgroup for the test: "+why, args...)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
		return ""
	}
	name := fmt.Sprintf("nah-test-%d", os.Getpid())
	if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(ctl), "memory") {
		os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory"), 0)
		dir := filepath.Join("/sys/fs/cgroup", name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return unavailable("%v", err)
		}
		t.Cleanup(func() { os.Remove(dir) })
		if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
			return unavailable("memory.max: %v", err)
		}
		os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
		return filepath.Join(dir, "cgroup.procs")
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return unavailable("%v", err)
	}
	parent := ""
	for line := range strings.SplitSeq(string(self), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && strings.Contains(","+f[1]+",", ",memory,") {
			parent = filepath.Join("/sys/fs/cgroup/memory", f[2])
		}
	}
	if parent == "" {
		return unavailable("neither cgroup v2 with memory nor v1's memory controller")
	}
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return unavailable("%v", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		return unavailable("memory.limit_in_bytes: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "memory.swappiness"), []byte("0"), 0)
	return filepath.Join(dir, "cgroup.procs")
}

// vmHWM is the peak resident memory of process pid in bytes.
func vmHWM(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestSlowReadersInA400MBCgroup is the memory limit under attack: the server
// runs in a 400 MB memory cgroup, and 60 clients ask for the largest page
// there is (100 moments of 64 KiB: 8.7 MB of JSON) and do not read it.
// Before admission control the kernel killed the process; now it must shed
// load with 503 and Retry-After, keep serving honest feeds, and live.
func TestSlowReadersInA400MBCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("a process under memory pressure: not in -short")
	}
	procs := memoryCgroup(t, 400<<20)
	dir := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$0" && exec "$1" serve`, procs, binary)
	p := startCmd(t, cmd, dir)
	pid := p.cmd.Process.Pid

	_, bigToken := p.signup(t, "big")
	_, honestToken := p.signup(t, "honest")
	body := base64.StdEncoding.EncodeToString(make([]byte, 64<<10))
	for i := range 100 {
		if st, out, err := p.call("POST", "/api/v1/moments", bigToken, map[string]string{"body": body}); err != nil || st != 201 {
			t.Fatalf("post %d: %d %v %v", i, st, out, err)
		}
	}
	if st, _, err := p.call("POST", "/api/v1/moments", honestToken, map[string]string{"body": base64.StdEncoding.EncodeToString(make([]byte, 400))}); err != nil || st != 201 {
		t.Fatalf("honest post: %d %v", st, err)
	}

	conns := make([]net.Conn, 60)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() { conns[i] = testutil.SlowGet(t, p.addr, "/api/v1/feed?limit=100", bigToken) })
	}
	wg.Wait()
	time.Sleep(3 * time.Second) // the server writes until every socket is full

	alive := func() {
		t.Helper()
		select {
		case err := <-p.done:
			t.Fatalf("the server died under 60 slow readers (the kernel's OOM killer): %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	honest := 0
	for range 20 {
		st, _, err := p.call("GET", "/api/v1/feed", honestToken, nil)
		if err != nil {
			alive()
			t.Fatalf("honest feed while 60 slow readers wait: %v", err)
		}
		if st == 200 {
			honest++
		}
	}
	alive()
	peak := vmHWM(pid)

	// Now the slow readers read: each got its page or a 503 with Retry-After.
	var ok, shed int
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("slow reader: %v", err)
		}
		n, err := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		switch {
		case res.StatusCode == 200 && err == nil && n == res.ContentLength:
			ok++
		case res.StatusCode == 503 && res.Header.Get("Retry-After") != "":
			shed++
		default:
			t.Fatalf("slow reader: %d, %d of %d bytes, %v", res.StatusCode, n, res.ContentLength, err)
		}
	}
	t.Logf("60 slow readers of 8.7 MB pages in 400 MB: %d served, %d shed with 503; honest feeds %d/20; peak resident %d MB", ok, shed, honest, peak>>20)
	if shed == 0 || ok == 0 {
		t.Errorf("%d served and %d shed: the budget did not decide", ok, shed)
	}
	if honest != 20 {
		t.Errorf("%d of 20 honest feeds served while the slow readers waited", honest)
	}
	if peak >= 400<<20 {
		t.Errorf("peak resident memory %d MB, limit 400", peak>>20)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-p.done; err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, p.log())
	}
}
