package main

import (
	"runtime"
	"strings"
	"testing"
)

// TestHealthcheckCommand: `nah healthcheck` exits 0 on a server that
// answers /healthz with status ok, and 1 once it is gone; `nah version`
// names the Go it was built with.
func TestHealthcheckCommand(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir)
	env := []string{"NAH_ADDR=" + p.addr}
	if out, errOut, code := nahRunEnv(t, env, "healthcheck"); code != 0 || !strings.Contains(out, `"status":"ok"`) {
		t.Errorf("healthcheck on a healthy server: exit %d\n%s%s", code, out, errOut)
	}
	p.stop(t)
	if out, errOut, code := nahRunEnv(t, env, "healthcheck"); code != 1 || !strings.Contains(errOut, "connection refused") {
		t.Errorf("healthcheck with no server: exit %d\n%s%s", code, out, errOut)
	}

	out, _, _ := nahRun(t, "version")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || lines[3] != runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH || !strings.HasPrefix(lines[1], "commit ") || !strings.HasPrefix(lines[2], "built ") {
		t.Errorf("nah version:\n%s", out)
	}
}
