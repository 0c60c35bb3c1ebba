package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// serviceUnit runs `nah service` with env and args and returns the unit
// and what it said on stderr.
func serviceUnit(t *testing.T, env []string, args ...string) (unit, warnings string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"service"}, args...)...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("nah service %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.String(), stderr.String()
}

// TestServiceUnit: `nah service` prints a hardened unit for this binary
// and data directory, which systemd-analyze verify accepts as it is.
func TestServiceUnit(t *testing.T) {
	analyze := needTool(t, "systemd-analyze", "systemd")
	dataDir := t.TempDir()
	unit, warnings := serviceUnit(t, []string{"NAH_DATA_DIR=" + dataDir})
	for _, line := range []string{
		"ExecStart=" + binary + " serve", "User=nah", "EnvironmentFile=-/etc/nah/nah.env",
		"Environment=NAH_DATA_DIR=" + dataDir, "ReadWritePaths=" + dataDir + " " + dataDir + "-replica",
		"Environment=NAH_REPLICA_URL=" + dataDir + "-replica",
		"NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes", "ProtectHome=yes",
		"CapabilityBoundingSet=CAP_NET_BIND_SERVICE", "AmbientCapabilities=CAP_NET_BIND_SERVICE",
		"Restart=on-failure", "MemoryMax=400M", "Environment=NAH_MEMORY_LIMIT=320MiB",
	} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `$`).MatchString(unit) {
			t.Errorf("the unit lacks the line %s:\n%s", line, unit)
		}
	}
	if n := strings.Count(unit, "ReadWritePaths="); n != 1 {
		t.Errorf("%d ReadWritePaths= lines, want the data directory's only", n)
	}
	// The test's binary and data directory are under /tmp, which the
	// unit's PrivateTmp= hides: nah service says so.
	if strings.HasPrefix(binary, "/tmp/") != strings.Contains(warnings, "the binary is under /tmp") ||
		strings.HasPrefix(dataDir, "/tmp/") != strings.Contains(warnings, "the data directory (NAH_DATA_DIR) is under /tmp") {
		t.Errorf("warnings for %s and %s: %q", binary, dataDir, warnings)
	}

	// systemd-analyze verify: exit 0, and not a word about the unit
	// (unknown keys and bad values are only warnings to it).
	dir := t.TempDir()
	file := filepath.Join(dir, "nah.service")
	if err := os.WriteFile(file, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", file).CombinedOutput()
	if err != nil || bytes.Contains(out, []byte("nah.service")) {
		t.Fatalf("systemd-analyze verify: %v\n%s\n%s", err, out, unit)
	}

	// Another user and environment file; the default data directory,
	// which systemd makes; a larger memory limit.
	unit, _ = serviceUnit(t, []string{"NAH_MEMORY_LIMIT=1GiB"}, "-user", "family", "-env-file", "/etc/family/nah.env")
	for _, line := range []string{"User=family", "EnvironmentFile=-/etc/family/nah.env", "ReadWritePaths=/var/lib/nah /var/lib/nah-replica", "StateDirectory=nah nah-replica",
		"Environment=NAH_DATA_DIR=/var/lib/nah", "MemoryMax=1280M", "Environment=NAH_MEMORY_LIMIT=1024MiB"} {
		if !strings.Contains(unit, "\n"+line+"\n") {
			t.Errorf("the unit lacks the line %s:\n%s", line, unit)
		}
	}
	if err := os.WriteFile(file, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", file).CombinedOutput(); err != nil || bytes.Contains(out, []byte("nah.service")) {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}

	// A replica in a bucket needs no writable path; one on another disk does.
	for env, want := range map[string]string{
		"NAH_REPLICA_URL=s3://family/nah": "ReadWritePaths=/var/lib/nah\n",
		"NAH_REPLICA_URL=/mnt/usb/nah":    "ReadWritePaths=/var/lib/nah /mnt/usb/nah\n",
	} {
		unit, _ := serviceUnit(t, []string{env})
		if !strings.Contains(unit, want) || strings.Contains(unit, "Environment=NAH_REPLICA_URL") || !strings.Contains(unit, "StateDirectory=nah\n") {
			t.Errorf("%s: want %q, no NAH_REPLICA_URL line and StateDirectory=nah:\n%s", env, want, unit)
		}
	}

	for _, args := range [][]string{{"-user", "Not A User"}, {"-env-file", "relative.env"}, {"extra"}} {
		cmd := exec.Command(binary, append([]string{"service"}, args...)...)
		if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != 2 {
			t.Errorf("nah service %v: %v, want exit status 2", args, err)
		}
	}
}

// TestServiceMemoryMaxIsWhatTheServerReports: run in a cgroup limited to
// the unit's MemoryMax with the unit's NAH_MEMORY_LIMIT, as systemd would
// run it, the server reports that cgroup limit (cgroup_memory_max) and
// that NAH_MEMORY_LIMIT (memory_limit), and finds nothing to warn about;
// with a NAH_MEMORY_LIMIT too close to the cgroup's, it warns.
func TestServiceMemoryMaxIsWhatTheServerReports(t *testing.T) {
	unit, _ := serviceUnit(t, nil)
	m := regexp.MustCompile(`(?m)^MemoryMax=(\d+)M$`).FindStringSubmatch(unit)
	l := regexp.MustCompile(`(?m)^Environment=NAH_MEMORY_LIMIT=(\S+)$`).FindStringSubmatch(unit)
	if m == nil || l == nil {
		t.Fatalf("no MemoryMax or NAH_MEMORY_LIMIT in the unit:\n%s", unit)
	}
	mib, _ := strconv.ParseInt(m[1], 10, 64)
	memoryMax := mib << 20 // systemd's M is MiB
	limit, err := parseBytes(l[1])
	if err != nil {
		t.Fatal(err)
	}
	procs := memoryCgroup(t, memoryMax)
	reportRE := regexp.MustCompile(` memory_limit=(\d+) cgroup_memory_max=(\S+)`)
	for _, c := range []struct {
		env  string
		warn bool
	}{
		{"NAH_MEMORY_LIMIT=" + l[1], false},
		{"NAH_MEMORY_LIMIT=" + strconv.FormatInt(mib*9/10, 10) + "MiB", true},
	} {
		cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$0" && exec "$1" serve`, procs, binary)
		p := startCmd(t, cmd, t.TempDir(), c.env)
		p.stop(t)
		r := reportRE.FindStringSubmatch(p.log())
		if r == nil {
			t.Fatalf("%s: no memory_limit and cgroup_memory_max in the log:\n%s", c.env, p.log())
		}
		if r[2] != strconv.FormatInt(memoryMax, 10) {
			t.Errorf("%s: the server reports cgroup_memory_max=%s, the unit's MemoryMax is %d bytes", c.env, r[2], memoryMax)
		}
		if !c.warn && r[1] != strconv.FormatInt(limit, 10) {
			t.Errorf("the server reports memory_limit=%s, the unit's NAH_MEMORY_LIMIT is %d bytes", r[1], limit)
		}
		if warned := strings.Contains(p.log(), "NAH_MEMORY_LIMIT is over 4/5 of the cgroup's memory limit"); warned != c.warn {
			t.Errorf("%s in a %d MiB cgroup: warned %v, want %v\n%s", c.env, mib, warned, c.warn, p.log())
		}
	}
}
