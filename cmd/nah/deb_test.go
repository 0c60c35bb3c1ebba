package main

import (
	"crypto/md5"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// releaseArtifact is the file of bin/release (made by `make release`)
// whose name matches pattern; the test fails without it in CI, where
// `make test` makes the release first, and skips elsewhere.
func releaseArtifact(t *testing.T, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(sourceDir, "..", "..", "bin", "release", pattern))
	if len(m) != 1 {
		msg := fmt.Sprintf("bin/release/%s: %d files; run make release first", pattern, len(m))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return m[0]
}

// needMachine skips a test that installs into this machine's /usr, /etc
// and /var/lib, unless CI is set (CI's machine is made for the run) or
// NAH_TEST_INSTALL=1 says this one may be changed.
func needMachine(t *testing.T) {
	t.Helper()
	if os.Getenv("CI") != "true" && os.Getenv("NAH_TEST_INSTALL") != "1" {
		t.Skip("installs nah into this machine's /usr/bin, /etc and /var/lib: set NAH_TEST_INSTALL=1 (CI does)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("installing a package needs root")
	}
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// previousDeb is the release's package with previousRelease's binary in it
// and an older version: what a family installed before this release.
func previousDeb(t *testing.T, deb string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	sh(t, "dpkg-deb", "-R", deb, root)
	bin, err := os.ReadFile(previousBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/nah"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for file, re := range map[string]string{"control": `(?m)^Version: .*$`, "md5sums": `(?m)^[0-9a-f]{32}(  usr/bin/nah)$`} {
		path := filepath.Join(root, "DEBIAN", file)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		repl := "Version: 0.0.0~previous"
		if file == "md5sums" {
			repl = fmt.Sprintf("%x${1}", md5.Sum(bin))
		}
		b = regexp.MustCompile(re).ReplaceAll(b, []byte(repl))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "nah_0.0.0~previous.deb")
	sh(t, "dpkg-deb", "--root-owner-group", "-Zgzip", "-b", root, out)
	return out
}

// startService runs the installed /usr/bin/nah as the unit does: as the
// user nah, with the unit's Environment= lines and the environment file;
// on a loopback port of its own, with open sign-up for the test.
func startService(t *testing.T) *proc {
	t.Helper()
	unit, err := os.ReadFile("/lib/systemd/system/nah.service")
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, m := range regexp.MustCompile(`(?m)^Environment=(.*)$`).FindAllStringSubmatch(string(unit), -1) {
		env = append(env, m[1])
	}
	envFile, err := os.ReadFile("/etc/nah/nah.env")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(envFile), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			env = append(env, line)
		}
	}
	env = append(env, "NAH_ADDR=127.0.0.1:0", "NAH_OPEN_SIGNUP=true")
	cmd := exec.Command("setpriv", "--reuid=nah", "--regid=nah", "--init-groups", "/usr/bin/nah", "serve")
	cmd.Dir = "/"
	return startCmd(t, cmd, "/var/lib/nah", env...)
}

// TestDebianPackage installs the previous release's package, serves a
// family from it as its service would, upgrades to this release's package
// with the data in place, then removes and purges it: the data stays.
func TestDebianPackage(t *testing.T) {
	deb := releaseArtifact(t, "nah_*_"+runtime.GOARCH+".deb")
	needMachine(t)
	analyze := needTool(t, "systemd-analyze", "systemd")
	if exec.Command("dpkg", "-s", "nah").Run() == nil {
		t.Log("nah was installed: purged first")
		sh(t, "dpkg", "--purge", "nah")
	}
	os.RemoveAll("/var/lib/nah")
	os.RemoveAll("/var/lib/nah-replica")
	t.Cleanup(func() {
		exec.Command("dpkg", "--purge", "nah").Run()
		os.RemoveAll("/var/lib/nah")
		os.RemoveAll("/var/lib/nah-replica")
		exec.Command("userdel", "nah").Run()
	})

	out := sh(t, "dpkg", "-i", previousDeb(t, deb))
	if !strings.Contains(out, "systemctl enable --now nah") || !strings.Contains(out, "journalctl -u nah -o cat | grep -A2 'No console admin'") {
		t.Errorf("the first install does not say how to get the first-admin link:\n%s", out)
	}
	for path, want := range map[string]struct {
		mode os.FileMode
		user string
	}{
		"/usr/bin/nah":                    {0o755, "root"},
		"/etc/nah/nah.env":                {0o600, "root"},
		"/var/lib/nah":                    {0o700 | os.ModeDir, "nah"},
		"/var/lib/nah-replica":            {0o700 | os.ModeDir, "nah"},
		"/lib/systemd/system/nah.service": {0o644, "root"},
		"/usr/share/doc/nah/copyright":    {0o644, "root"},
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		owner := strings.TrimSpace(sh(t, "stat", "-c", "%U", path))
		if fi.Mode()&(os.ModeDir|os.ModePerm) != want.mode || owner != want.user {
			t.Errorf("%s: %v owned by %s, want %v owned by %s", path, fi.Mode(), owner, want.mode, want.user)
		}
	}
	if out, err := exec.Command(analyze, "verify", "/lib/systemd/system/nah.service").CombinedOutput(); err != nil || strings.Contains(string(out), "nah.service") {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	p := startService(t)
	p.waitLog(t, regexp.MustCompile(`No console admin yet`), 10*time.Second)
	_, token := p.signup(t, "ann")
	id := p.post(t, token, "posted on the previous release")
	p.stop(t)
	// The operator's settings, which the upgrade must keep.
	f, err := os.OpenFile("/etc/nah/nah.env", os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, "NAH_SHUTDOWN_TIMEOUT=15s")
	f.Close()

	out = sh(t, "dpkg", "-i", deb)
	if strings.Contains(out, "nah is installed") {
		t.Errorf("an upgrade repeats the first install's text:\n%s", out)
	}
	if env, _ := os.ReadFile("/etc/nah/nah.env"); !strings.Contains(string(env), "\nNAH_SHUTDOWN_TIMEOUT=15s\n") {
		t.Errorf("the upgrade lost the operator's setting:\n%s", env)
	}
	// The release's binary says what it is: the package's version, the
	// commit and its time, stamped by goreleaser.
	version := strings.TrimSpace(sh(t, "dpkg-deb", "-f", deb, "Version"))
	if v := sh(t, "/usr/bin/nah", "version"); !regexp.MustCompile(`^nah ` + regexp.QuoteMeta(version) + `\ncommit [0-9a-f]{40}\nbuilt 20\d\d-\d\d-\d\dT\S+\ngo1\.`).MatchString(v) {
		t.Errorf("nah version after the upgrade to %s:\n%s", version, v)
	}
	// The unit is the text `nah service` prints for the package's paths.
	unit, _ := os.ReadFile("/lib/systemd/system/nah.service")
	cmd := exec.Command("/usr/bin/nah", "service", "-bin", "/usr/bin/nah")
	cmd.Env = []string{}
	if printed, err := cmd.Output(); err != nil || string(printed) != string(unit) {
		t.Errorf("the package's unit is not what nah service prints (%v):\n%s\n---\n%s", err, unit, printed)
	}
	p = startService(t)
	if feed := strings.Join(p.feedIDs(t, token), " "); !strings.Contains(feed, id) {
		t.Errorf("the moment posted before the upgrade is gone: %s", feed)
	}
	p.stop(t)

	sh(t, "dpkg", "-r", "nah")
	for path, kept := range map[string]bool{"/usr/bin/nah": false, "/var/lib/nah/directory.db": true, "/etc/nah/nah.env": true} {
		if _, err := os.Stat(path); (err == nil) != kept {
			t.Errorf("after dpkg -r, %s: %v (want kept: %v)", path, err, kept)
		}
	}
	out = sh(t, "dpkg", "--purge", "nah")
	if !strings.Contains(out, "Kept the data in /var/lib/nah") {
		t.Errorf("purging does not say what it removes and keeps:\n%s", out)
	}
	for path, kept := range map[string]bool{"/etc/nah": false, "/var/lib/nah/directory.db": true} {
		if _, err := os.Stat(path); (err == nil) != kept {
			t.Errorf("after dpkg --purge, %s: %v (want kept: %v)", path, err, kept)
		}
	}
}
