package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// podmanConf is the containers.conf of the container tests. This kind of
// machine (cgroup v1 with hugetlb left on cgroup v2, and no
// CAP_SYS_RESOURCE) stops crun with "cgroups in hybrid mode not
// supported" and podman's default rlimits with "setrlimit RLIMIT_NOFILE:
// Operation not permitted"; runc and limits under the machine's run the
// same image unchanged.
const podmanConf = `[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
`

// podman runs podman with the tests' containers.conf and returns its
// output, failing the test on an error.
func podman(t *testing.T, args ...string) string {
	t.Helper()
	out, err := podmanCmd(t, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

var podmanConfFile string

func podmanCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	if podmanConfFile == "" {
		podmanConfFile = filepath.Join(os.TempDir(), "nah-test-containers.conf")
		if err := os.WriteFile(podmanConfFile, []byte(podmanConf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("podman", args...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+podmanConfFile)
	return cmd
}

// container is a running container of the image, reached as a proc.
type container struct {
	name string
	proc *proc
}

// runContainer starts the image on the volumes data and replica, with its
// port 8090 on a loopback port, and waits for a healthy /healthz.
func runContainer(t *testing.T, image, data, replica string) (container, time.Duration) {
	t.Helper()
	name := fmt.Sprintf("nah-test-%d", time.Now().UnixNano())
	t.Cleanup(func() { podmanCmd(t, "rm", "-f", "-t", "0", name).Run() })
	begin := time.Now()
	podman(t, "run", "-d", "--name", name, "-v", data+":/data", "-v", replica+":/replica", "-p", "127.0.0.1::8090", image)
	port := podman(t, "port", name, "8090")
	c := container{name, &proc{addr: port[strings.LastIndex(port, " ")+1:]}}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, out, err := c.proc.call("GET", "/healthz", "", nil)
		if err == nil && st == 200 && out["status"] == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no healthy /healthz 20 s after podman run: %d %v %v\n%s", st, out, err, podman(t, "logs", name))
		}
	}
	return c, time.Since(begin)
}

// stop sends SIGTERM (podman stop) and checks for a clean exit in seconds.
func (c container) stop(t *testing.T) time.Duration {
	t.Helper()
	begin := time.Now()
	podman(t, "stop", "-t", "20", c.name)
	took := time.Since(begin)
	if code := podman(t, "inspect", c.name, "--format", "{{.State.ExitCode}}"); code != "0" || took > 5*time.Second {
		t.Errorf("podman stop: exit code %s after %v\n%s", code, took, podman(t, "logs", c.name))
	}
	return took
}

// TestContainerImage loads the release's image for this machine, checks
// its configuration, and serves a family from it: the setup link from its
// log, a sign-up and a post, SIGTERM, then a second container on the same
// volumes finds them.
func TestContainerImage(t *testing.T) {
	archive := releaseArtifact(t, "nah_*_image_linux_"+runtime.GOARCH+".tar")
	needTool(t, "podman", "podman")
	needTool(t, "runc", "runc")
	loaded := podman(t, "load", "-q", "-i", archive)
	image := loaded[strings.LastIndex(loaded, " ")+1:]

	var cfg []struct {
		Size   int64
		Config struct {
			User    string
			Env     []string
			Volumes map[string]any
			Labels  map[string]string
		}
		Healthcheck struct{ Test []string }
	}
	if err := json.Unmarshal([]byte(podman(t, "image", "inspect", image)), &cfg); err != nil || len(cfg) != 1 {
		t.Fatalf("podman image inspect: %v", err)
	}
	c := cfg[0].Config
	t.Logf("%s: %.1f MB", image, float64(cfg[0].Size)/1e6)
	if cfg[0].Size > 35e6 {
		t.Errorf("the image is %d bytes, over 35 MB", cfg[0].Size)
	}
	if c.User == "" || strings.HasPrefix(c.User, "0") || c.User == "root" {
		t.Errorf("the image runs as %q", c.User)
	}
	if _, ok := c.Volumes["/data"]; !ok {
		t.Errorf("/data is not a volume: %v", c.Volumes)
	}
	if env := strings.Join(c.Env, " "); !strings.Contains(env, "NAH_ADDR=:8090") || !strings.Contains(env, "NAH_DATA_DIR=/data") {
		t.Errorf("the image's environment: %v", c.Env)
	}
	if strings.Join(cfg[0].Healthcheck.Test, " ") != "CMD /usr/bin/nah healthcheck" {
		t.Errorf("the health check: %v", cfg[0].Healthcheck.Test)
	}
	for _, l := range []string{"org.opencontainers.image.version", "org.opencontainers.image.source", "org.opencontainers.image.licenses"} {
		if c.Labels[l] == "" || c.Labels[l] == "dev" {
			t.Errorf("label %s: %q", l, c.Labels[l])
		}
	}

	data, replica := fmt.Sprintf("nah-test-data-%d", time.Now().UnixNano()), fmt.Sprintf("nah-test-replica-%d", time.Now().UnixNano())
	for _, v := range []string{data, replica} {
		podman(t, "volume", "create", v)
		t.Cleanup(func() { podmanCmd(t, "volume", "rm", "-f", v).Run() })
	}
	first, cold := runContainer(t, image, data, replica)
	t.Logf("podman run to a healthy /healthz: %v", cold)
	// The goal is under 1 s: 0.36-0.72 s measured here on 2 cores shared
	// with other builds; 3 s leaves room for CI's load.
	if cold > 3*time.Second {
		t.Errorf("cold start to a healthy /healthz took %v, over 3 s", cold)
	}
	if out, err := podmanCmd(t, "healthcheck", "run", first.name).CombinedOutput(); err != nil {
		t.Errorf("podman healthcheck run: %v\n%s", err, out)
	}
	link := regexp.MustCompile(`http://\S+(/console/setup/\S+)`).FindStringSubmatch(podman(t, "logs", first.name))
	if link == nil {
		t.Fatalf("no setup link in the log:\n%s", podman(t, "logs", first.name))
	}
	res, err := http.Get("http://" + first.proc.addr + link[1])
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("the setup link: %v %v", res, err)
	}
	res.Body.Close()
	// Sign-up is by join code in the image (NAH_OPEN_SIGNUP=false): the
	// code is made as an operator would, in the running container.
	code := strings.Fields(podman(t, "exec", first.name, "/usr/bin/nah", "joincode", "create"))[0]
	st, out, err := first.proc.call("POST", "/api/v1/accounts", "", map[string]string{"handle": "ann", "password": "password-ann", "join_code": code})
	if err != nil || st != 201 {
		t.Fatalf("sign-up with a join code: %d %v %v", st, out, err)
	}
	token := out["token"].(string)
	id := first.proc.post(t, token, "posted in a container")
	t.Logf("SIGTERM to exit: %v", first.stop(t))

	mount := podman(t, "volume", "inspect", data, "--format", "{{.Mountpoint}}")
	filepath.Walk(mount, func(p string, fi os.FileInfo, err error) error {
		if err == nil && strings.HasSuffix(p, "-wal") && fi.Size() > 0 {
			t.Errorf("%s: %d bytes after a clean stop", p, fi.Size())
		}
		return nil
	})

	second, _ := runContainer(t, image, data, replica)
	if feed := strings.Join(second.proc.feedIDs(t, token), " "); !strings.Contains(feed, id) {
		t.Errorf("the second container on the same volume lacks the moment: %s", feed)
	}
	second.stop(t)
}

// TestComposeFile runs packaging/compose.yaml with the release's image and
// podman-compose: the server answers on the published port, prints its
// setup link, keeps its data in one volume and ships its replica into the
// other.
func TestComposeFile(t *testing.T) {
	archive := releaseArtifact(t, "nah_*_image_linux_"+runtime.GOARCH+".tar")
	compose := needTool(t, "podman-compose", "podman-compose")
	needTool(t, "runc", "runc")
	loaded := podman(t, "load", "-q", "-i", archive)
	project := fmt.Sprintf("nahtest%d", time.Now().UnixNano())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	run := func(args ...string) string {
		t.Helper()
		cmd := podmanCmd(t)
		cmd.Path, cmd.Args = compose, append([]string{compose, "-p", project, "-f", filepath.Join(sourceDir, "..", "..", "packaging", "compose.yaml")}, args...)
		cmd.Env = append(cmd.Env, "NAH_IMAGE="+loaded[strings.LastIndex(loaded, " ")+1:], "NAH_PORT="+addr)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("podman-compose %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Cleanup(func() { run("down", "-v") })
	run("up", "-d")
	p := &proc{addr: addr}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, out, err := p.call("GET", "/healthz", "", nil); err == nil && st == 200 && out["status"] == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no healthy /healthz on %s 20 s after podman-compose up:\n%s", addr, run("logs"))
		}
	}
	if logs := run("logs", "nah"); !strings.Contains(logs, "No console admin yet") {
		t.Errorf("no setup link in the log:\n%s", logs)
	}
	for _, v := range []string{"data", "replica"} {
		mount := podman(t, "volume", "inspect", project+"_"+v, "--format", "{{.Mountpoint}}")
		if entries, err := os.ReadDir(mount); err != nil || len(entries) == 0 {
			t.Errorf("volume %s is empty: %v", v, err)
		}
	}
}
