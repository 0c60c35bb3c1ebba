package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/internal/testutil"
)

// TestRestoreLTXBomb: a small LTX snapshot planted on the target, newer
// than bob's real history, whose header claims 2^31 pages of 4 KiB (8 TiB)
// and which holds 40,000 zero pages (164 MB once written) in 1.9 MB.
// `nah restore` and the drill (`nah restore -check`) refuse it by its
// header with a clear error and write little more than their copy of the
// snapshot (before: they wrote until the bomb ran out, 164 MB here).
func TestRestoreLTXBomb(t *testing.T) {
	data := t.TempDir()
	repl := filepath.Join(t.TempDir(), "replica")
	p := start(t, data, replicaEnv(repl, "NAH_DRILL_EVERY=off")...)
	var bob string
	for _, h := range []string{"ann", "bob"} {
		id, token := p.signup(t, h)
		p.post(t, token, "a moment of "+h)
		if h == "bob" {
			bob = id
		}
	}
	p.stop(t)
	bomb, err := testutil.LTXBomb(filepath.Join(repl, nah.PersonRel(bob)), 40_000, 1<<31)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(bomb)
	t.Logf("the bomb: %d bytes", st.Size())
	claims := "claims a database of 8796093022208 bytes (2147483648 pages of 4096)"

	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"nah restore", []string{"restore", "-from", repl, "-to", filepath.Join(t.TempDir(), "restored")},
			[]string{claims, "larger than this restore allows (4294967296 bytes)"}},
		{"the drill", []string{"restore", "-check", "-from", repl, "-data", data},
			[]string{claims, "larger than this restore allows (67"}},
	} {
		t0 := time.Now()
		out, wrote, code := runCounted(t, c.args...)
		t.Logf("%s: exit %d in %s, %d bytes written", c.name, code, time.Since(t0).Round(time.Millisecond), wrote)
		if code != 1 {
			t.Errorf("%s: exit %d, want 1\n%s", c.name, code, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s does not say %q:\n%s", c.name, w, out)
			}
		}
		if wrote > 16<<20 {
			t.Errorf("%s wrote %d bytes", c.name, wrote)
		}
	}
}

// runCounted runs the binary with args and returns its output, what it
// wrote (wchar of /proc/<pid>/io, sampled until it exits) and its exit
// code.
func runCounted(t *testing.T, args ...string) (out string, wrote int64, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var o bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &o
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	io := fmt.Sprintf("/proc/%d/io", cmd.Process.Pid)
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-time.After(2 * time.Millisecond):
			b, _ := os.ReadFile(io)
			for line := range strings.SplitSeq(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "wchar: "); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					wrote = max(wrote, n)
				}
			}
		}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), wrote, code
}
