package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nah-app/nah/store"
)

// binary is the nah binary built once for the process tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nah-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "nah")
	// The store's process-wide SQLite settings before any connection of the
	// tests (testutil.Dump's): SQLite refuses them after its first.
	if err := store.ConfigureSQLite(); err != nil {
		panic(err)
	}
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	// Servers started with the default NAH_REPLICA_URL (./replica) keep
	// their replica in this temporary directory, not in the source tree;
	// go commands run from sourceDir.
	if sourceDir, err = os.Getwd(); err != nil {
		panic(err)
	}
	if err := os.Chdir(dir); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// sourceDir is this package's folder, the tests' working directory before
// TestMain leaves it.
var sourceDir string

// proc is a running nah server.
type proc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *bytes.Buffer
	mu     *sync.Mutex
	done   chan error

	// base and client, when set, are where and how call reaches the
	// server (over HTTPS); else http://addr with client.
	base   string
	client *http.Client
}

var listenRE = regexp.MustCompile(`listen=(\S+)`)

// start runs the binary on dataDir and waits until it listens.
func start(t *testing.T, dataDir string, env ...string) *proc {
	t.Helper()
	return startCmd(t, exec.Command(binary, "serve"), dataDir, env...)
}

// startCmd is start with the command that runs the server (a wrapper may
// exec the binary), and waits until it listens.
func startCmd(t *testing.T, cmd *exec.Cmd, dataDir string, env ...string) *proc {
	t.Helper()
	cmd.Env = append([]string{
		"NAH_ADDR=127.0.0.1:0",
		"NAH_DATA_DIR=" + dataDir,
		"NAH_REPLICA_URL=" + filepath.Clean(dataDir) + ".replica",
		"NAH_OPEN_SIGNUP=true",
		"NAH_SIGNUP_PER_HOUR=0",
		// Replication is on by default, to ./replica of the working
		// directory (cmd/nah here): each server gets its own beside its
		// data directory instead.
		"NAH_REPLICA_URL=" + dataDir + ".replica",
		"PATH=" + os.Getenv("PATH"),
	}, env...)
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stderr: new(bytes.Buffer), mu: new(sync.Mutex), done: make(chan error, 1)}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				addrc <- m[1]
			}
		}
	}()
	go func() { p.done <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	select {
	case p.addr = <-addrc:
	case err := <-p.done:
		t.Fatalf("server exited at start: %v\n%s", err, p.log())
	case <-time.After(20 * time.Second):
		t.Fatalf("server did not start\n%s", p.log())
	}
	return p
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

var client = &http.Client{Timeout: 10 * time.Second}

func (p *proc) call(method, path, token string, body any) (int, map[string]any, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	base, c := "http://"+p.addr, client
	if p.base != "" {
		base, c = p.base, p.client
	}
	req, _ := http.NewRequest(method, base+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	var out map[string]any
	json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out, nil
}

// signup makes an account as a phone app would: a 503 (every hashing slot
// busy for hashWait; with one slot on a 2-core machine, 50 sign-ups at
// once at bcrypt's default cost queue for 3.5 s or more) is retried after
// the Retry-After second.
func (p *proc) signup(t *testing.T, handle string) (id, token string) {
	t.Helper()
	st, out, err := p.call("POST", "/api/v1/accounts", "", map[string]string{"handle": handle, "password": "password-" + handle})
	for try := 0; err == nil && st == 503 && try < 30; try++ {
		time.Sleep(time.Second)
		st, out, err = p.call("POST", "/api/v1/accounts", "", map[string]string{"handle": handle, "password": "password-" + handle})
	}
	if err != nil || st != 201 {
		t.Fatalf("signup %s: %d %v %v", handle, st, out, err)
	}
	return out["person"].(map[string]any)["id"].(string), out["token"].(string)
}

// ownMoments lists every moment id of a person through the API.
func (p *proc) ownMoments(t *testing.T, id, token string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	next := ""
	for {
		path := "/api/v1/people/" + id + "/moments?limit=100"
		if next != "" {
			path += "&before=" + next
		}
		st, out, err := p.call("GET", path, token, nil)
		if err != nil || st != 200 {
			t.Fatalf("list: %d %v", st, err)
		}
		for _, m := range out["moments"].([]any) {
			ids[m.(map[string]any)["id"].(string)] = true
		}
		if out["next"] == nil {
			return ids
		}
		next = out["next"].(string)
	}
}

// TestCrashKeepsAcknowledgedMoments: 16 writers post, every 201 is recorded,
// the server is killed with SIGKILL mid-stream; after a restart on the same
// directory every acknowledged moment, and every session, is there. Under
// both values of NAH_SYNC: a crash of the process loses nothing even when
// commits are not fsynced (normal), since the kernel still holds what was
// written. What a power cut does to normal is SQLite's promise, untested.
func TestCrashKeepsAcknowledgedMoments(t *testing.T) {
	for _, mode := range []string{"full", "normal"} {
		t.Run(mode, func(t *testing.T) { crashKeepsAcknowledgedMoments(t, "NAH_SYNC="+mode) })
	}
}

func crashKeepsAcknowledgedMoments(t *testing.T, syncEnv string) {
	dir := t.TempDir()
	p := start(t, dir, syncEnv)
	if !strings.Contains(p.log(), " config.sync="+strings.TrimPrefix(syncEnv, "NAH_SYNC=")+" ") {
		t.Fatalf("the server did not take %s:\n%s", syncEnv, p.log())
	}
	type writer struct{ id, token string }
	writers := make([]writer, 16)
	for i := range writers {
		writers[i].id, writers[i].token = p.signup(t, fmt.Sprintf("writer%02d", i))
	}
	var mu sync.Mutex
	acked := map[int][]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	body := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 400))
	for i, w := range writers {
		wg.Go(func() {
			for ctx.Err() == nil {
				st, out, err := p.call("POST", "/api/v1/moments", w.token, map[string]string{"body": body})
				if err != nil {
					return // the server is gone
				}
				if st == 201 {
					mu.Lock()
					acked[i] = append(acked[i], out["id"].(string))
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(2 * time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	cancel()
	wg.Wait() // every acknowledgement received before the kill is recorded

	p2 := start(t, dir, syncEnv)
	total := 0
	for i, w := range writers {
		got := p2.ownMoments(t, w.id, w.token)
		for _, id := range acked[i] {
			if !got[id] {
				t.Errorf("writer %d: acknowledged moment %s lost in the crash", i, id)
			}
		}
		total += len(acked[i])
	}
	if total < 16 {
		t.Fatalf("only %d posts acknowledged before the kill; the test proved little", total)
	}
	t.Logf("%d acknowledged moments from 16 writers, all there after kill -9", total)
	p2.cmd.Process.Signal(syscall.SIGTERM)
	<-p2.done
}

// TestSIGTERMLeavesNoWAL: after posts from 50 people, SIGTERM exits 0 and no
// -wal file with anything in it is left.
func TestSIGTERMLeavesNoWAL(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir)
	var wg sync.WaitGroup
	body := base64.StdEncoding.EncodeToString([]byte("a moment"))
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Go(func() {
			_, token := p.signup(t, fmt.Sprintf("person%02d", i))
			for range 5 {
				if st, _, err := p.call("POST", "/api/v1/moments", token, map[string]string{"body": body}); err != nil || st != 201 {
					errs <- fmt.Errorf("post: %d %v", st, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.log())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no exit 20 s after SIGTERM")
	}
	wals := 0
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && strings.HasSuffix(path, "-wal") {
			wals++
			if info.Size() > 0 {
				t.Errorf("%s: %d bytes left after SIGTERM", path, info.Size())
			}
		}
		return nil
	})
	people, _ := os.ReadDir(filepath.Join(dir, "people"))
	if len(people) != 50 {
		t.Fatalf("%d person folders, want 50", len(people))
	}
	if log := p.log(); !strings.Contains(log, "shutting down") || !strings.Contains(log, "stopped") {
		t.Errorf("shutdown not logged:\n%s", log)
	}
}

// TestLogHoldsNoSecrets: no token, password or body reaches the log.
func TestLogHoldsNoSecrets(t *testing.T) {
	p := start(t, t.TempDir())
	_, token := p.signup(t, "ann")
	p.call("POST", "/api/v1/moments", token, map[string]string{"body": base64.StdEncoding.EncodeToString([]byte("secret-body"))})
	p.call("POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "wrong-password"})
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	log := p.log()
	for _, secret := range []string{token, "password-ann", "wrong-password", "c2VjcmV0LWJvZHk", "/api/v1"} {
		if strings.Contains(log, secret) {
			t.Errorf("the log holds %q:\n%s", secret, log)
		}
	}
}

func TestBadConfigExits2(t *testing.T) {
	for _, env := range []string{"NAH_MAX_OPEN_FILES=lots", "NAH_OPEN_SIGNUP=perhaps", "NAH_ADDR=nowhere", "NAH_SIGNUP_PER_HOUR=-1", "NAH_TRUSTED_PROXIES=10.0.0.0/99", "NAH_SHUTDOWN_TIMEOUT=soon", "NAH_PUBLIC_URL=nah.example.com", "NAH_MAX_CONNECTIONS=1", "NAH_SYNC=fast"} {
		cmd := exec.Command(binary, "serve")
		cmd.Env = []string{env, "NAH_DATA_DIR=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		name := strings.SplitN(env, "=", 2)[0]
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("%s: exit %v, want status 2", env, err)
		}
		if !strings.Contains(string(out), name) {
			t.Errorf("%s: the message does not name the variable: %s", env, out)
		}
	}
}

func TestHelpListsEveryVariable(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"help"}, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"nah serve", "nah joincode create", "nah admin create", "nah service", "nah version"} {
		if !strings.Contains(out.String(), "  "+cmd) {
			t.Errorf("help lacks %s", cmd)
		}
	}
	for _, v := range variables {
		if !strings.Contains(out.String(), v.Name) || v.Default != "" && !strings.Contains(out.String(), v.Default) {
			t.Errorf("help lacks %s (default %q)", v.Name, v.Default)
		}
	}
	out.Reset()
	run(context.Background(), []string{"version"}, func(string) string { return "" }, &out, io.Discard)
	if !strings.HasPrefix(out.String(), "nah ") {
		t.Errorf("version: %q", out.String())
	}
	if err := run(context.Background(), []string{"frobnicate"}, func(string) string { return "" }, io.Discard, io.Discard); err == nil {
		t.Error("unknown command accepted")
	}
}

// TestJoinCodeCommand: a code made by `nah joincode create` signs a person up
// on a server without open sign-up, once.
func TestJoinCodeCommand(t *testing.T) {
	dir := t.TempDir()
	out, err := exec.Command("env", "-i", "NAH_DATA_DIR="+dir, binary, "joincode", "create", "-ttl", "1h").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	code := strings.Fields(string(out))[0]
	p := start(t, dir, "NAH_OPEN_SIGNUP=false")
	st, _, _ := p.call("POST", "/api/v1/accounts", "", map[string]string{"handle": "ann", "password": "password-ann"})
	if st != 400 {
		t.Fatalf("sign-up without a code: %d", st)
	}
	st, _, _ = p.call("POST", "/api/v1/accounts", "", map[string]string{"handle": "ann", "password": "password-ann", "join_code": code})
	if st != 201 {
		t.Fatalf("sign-up with the code: %d", st)
	}
	st, _, _ = p.call("POST", "/api/v1/accounts", "", map[string]string{"handle": "bob", "password": "password-bob", "join_code": code})
	if st != 400 {
		t.Fatalf("the code worked twice: %d", st)
	}
}

// TestFirstStartPrintsSetupLink: with no admin, the server prints a
// one-time link that creates one; `nah admin create` prints another; the
// metrics listener answers in the Prometheus format.
func TestFirstStartPrintsSetupLink(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir, "NAH_METRICS_ADDR=127.0.0.1:0")
	var link, metrics string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && (link == "" || metrics == ""); time.Sleep(20 * time.Millisecond) {
		log := p.log()
		link = regexp.MustCompile(`http://\S+/console/setup/\S+`).FindString(log)
		if m := regexp.MustCompile(`msg=metrics listen=(\S+)`).FindStringSubmatch(log); m != nil {
			metrics = m[1]
		}
	}
	if link == "" || metrics == "" {
		t.Fatalf("no setup link or metrics address in the log:\n%s", p.log())
	}
	res, err := client.Get(link)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("setup link: %v %v", res, err)
	}
	res.Body.Close()
	res, err = client.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(b), "nah_open_person_files") || !strings.Contains(res.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %s", b)
	}
	// The public listener does not serve metrics.
	if res, err := client.Get("http://" + p.addr + "/metrics"); err != nil || res.StatusCode != 404 {
		t.Fatalf("metrics on the public listener: %v", res.StatusCode)
	}
	// The link creates the admin; the next start has no link to print,
	// and says where the console is all the same.
	res, err = client.PostForm(link, url.Values{"name": {"root"}, "password": {"admin-password"}, "password2": {"admin-password"}})
	if err != nil || res.StatusCode != 200 || strings.HasPrefix(res.Request.URL.Path, "/console/setup/") {
		t.Fatalf("create the admin: %v %v", res, err) // it redirects away from the link
	}
	res.Body.Close()
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	p = start(t, dir)
	consoleRE := regexp.MustCompile(`msg=console url=http://` + regexp.QuoteMeta(p.addr) + `/console\n`)
	for deadline := time.Now().Add(5 * time.Second); !consoleRE.MatchString(p.log()); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second start does not say where the console is:\n%s", p.log())
		}
	}
	if strings.Contains(p.log(), "/console/setup/") {
		t.Errorf("the second start, with an admin, printed a setup link:\n%s", p.log())
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done

	out, err := exec.Command("env", "-i", "NAH_DATA_DIR="+dir, binary, "admin", "create").CombinedOutput()
	if err != nil || !regexp.MustCompile(`http://127\.0\.0\.1:8090/console/setup/[A-Za-z0-9_-]{43}`).Match(out) {
		t.Fatalf("nah admin create: %v\n%s", err, out)
	}
}

// TestSetupLinkFromPublicURL: with NAH_PUBLIC_URL set, the first-start link
// and `nah admin create`'s start with it, not with the listen address.
func TestSetupLinkFromPublicURL(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir, "NAH_PUBLIC_URL=https://nah.example.com/family/")
	linkRE := regexp.MustCompile(`https://nah\.example\.com/family/console/setup/[A-Za-z0-9_-]{43}\s`)
	deadline := time.Now().Add(5 * time.Second)
	for !linkRE.MatchString(p.log()) {
		if time.Now().After(deadline) {
			t.Fatalf("no setup link from NAH_PUBLIC_URL in the log:\n%s", p.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	out, err := exec.Command("env", "-i", "NAH_DATA_DIR="+dir, "NAH_PUBLIC_URL=https://nah.example.com/family", binary, "admin", "create").CombinedOutput()
	if err != nil || !linkRE.Match(out) {
		t.Fatalf("nah admin create: %v\n%s", err, out)
	}
}

// TestAddressInUseExits2WithBackups: an error after the backups loop has
// started (here the listen address, taken) still ends the process at once
// with status 2: the loop stops with serve, not only with a signal.
func TestAddressInUseExits2WithBackups(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(binary, "serve")
	cmd.Env = []string{"NAH_ADDR=" + ln.Addr().String(), "NAH_DATA_DIR=" + t.TempDir(), "NAH_REPLICA_URL=" + t.TempDir()}
	done := make(chan error, 1)
	var out bytes.Buffer
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(out.String(), "NAH_ADDR") {
			t.Fatalf("exit %v, want status 2 naming NAH_ADDR:\n%s", err, out.String())
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("still running 15 s after failing to listen:\n%s", out.String())
	}
}
