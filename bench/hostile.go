package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nah-app/nah/bench/fixture"
)

// The hostile mix: every attack that was reproduced against the
// server, all at once, while honest readers read their feeds. What counts
// is the honest readers' p95, the server's peak resident memory, and that
// no attack ever gets a 500.

// HostileResult is one run of the mix, as written to bench/results.
type HostileResult struct {
	Fixture   string    `json:"fixture"`
	Time      time.Time `json:"time"`
	Cores     int       `json:"cores"`
	GoVersion string    `json:"go_version"`
	Seconds   float64   `json:"seconds"`

	Honest       Latency        `json:"honest_20_readers"`
	HonestStatus map[string]int `json:"honest_status"`
	Attacks      []Attack       `json:"attacks"`
	IdleOpened   int            `json:"idle_connections_opened"`
	PeakRSSMB    float64        `json:"peak_rss_mb"`
	RSSAfterMB   float64        `json:"rss_after_mb"`
	Alive        bool           `json:"alive_after"`
	Server5xx    int            `json:"server_5xx_not_503_507"`
}

// Attack counts the answers one attack got, by status ("err" when the
// connection failed or was refused).
type Attack struct {
	Name     string         `json:"name"`
	Requests int            `json:"requests"`
	Status   map[string]int `json:"status"`
}

// skipped are the attacks left out of this run (-skip).
var skipped map[string]bool

type counter struct {
	mu sync.Mutex
	m  map[string]int
	n  int
}

func (c *counter) add(status string) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[status]++
	c.n++
	c.mu.Unlock()
}

// send sends req and counts its answer, unless the mix ended meanwhile.
func send(mctx context.Context, c *http.Client, req *http.Request, cn *counter) {
	r, err := c.Do(req)
	if mctx.Err() != nil {
		return
	}
	cn.add(statusOf(r, err))
	if err == nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
}

func statusOf(res *http.Response, err error) string {
	if err != nil {
		return "err"
	}
	return fmt.Sprint(res.StatusCode)
}

func hostileCmd(ctx context.Context, args []string) error {
	fset := flag.NewFlagSet("hostile", flag.ExitOnError)
	name := fset.String("fixture", "people-1k", "fixture name")
	bin := fset.String("bin", "bin/nah", "the release binary to attack")
	home, _ := os.UserCacheDir()
	cache := fset.String("cache", filepath.Join(home, "nah-bench"), "where seeded fixtures are kept between runs")
	d := fset.Duration("duration", 30*time.Second, "length of the mix")
	out := fset.String("out", "bench/results", "directory for the result JSON")
	skip := fset.String("skip", "", "comma-separated attacks to leave out, for finding which one hurts: methods, slow, links, passwords, idle")
	fset.Parse(args)
	f, ok := fixture.Fixtures[*name]
	if !ok {
		usage()
	}
	skipped = map[string]bool{}
	for _, s := range strings.Split(*skip, ",") {
		skipped[s] = true
	}
	data, people, cleanup, err := copyFixture(ctx, *cache, f)
	if err != nil {
		return err
	}
	defer cleanup()
	res, err := hostile(ctx, *bin, data, f, people, *d)
	if err != nil {
		return err
	}
	file, err := writeResult(*out, "hostile-"+f.Name, res.Time, res)
	if err != nil {
		return err
	}
	fmt.Print(hostileMarkdown(res))
	fmt.Printf("\nwritten to %s\n", file)
	return nil
}

func hostile(ctx context.Context, bin, data string, f fixture.Fixture, people []fixture.Person, d time.Duration) (HostileResult, error) {
	res := HostileResult{Fixture: f.Name, Time: time.Now().UTC(), Cores: runtime.NumCPU(), GoVersion: runtime.Version(), Seconds: d.Seconds()}
	// The attacker is a stranger to everyone, as one would be: a new account
	// made with a join code, so that no honest feed holds its 64 KiB posts.
	jc := exec.Command(bin, "joincode", "create")
	jc.Env = []string{"NAH_DATA_DIR=" + data, "NAH_REPLICA_URL=" + data + ".replica", "NAH_LOG_LEVEL=warn"}
	jcOut, err := jc.Output()
	if err != nil {
		return res, fmt.Errorf("join code: %w", err)
	}
	code, _, _ := strings.Cut(string(jcOut), "\n")
	port, err := freePort()
	if err != nil {
		return res, err
	}
	base := "http://" + port
	cmd := exec.Command(bin, "serve")
	cmd.Env = []string{"NAH_ADDR=" + port, "NAH_DATA_DIR=" + data, "NAH_REPLICA_URL=" + data + ".replica", "NAH_LOG_LEVEL=warn"}
	cmd.Stderr = io.Discard // the flood's own log lines are not the point
	if err := cmd.Start(); err != nil {
		return res, err
	}
	defer cmd.Process.Kill()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	c := newClient(4)
	for t0 := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if r, err := c.Get(base + "/healthz"); err == nil {
			r.Body.Close()
			break
		}
		if time.Since(t0) > 30*time.Second {
			return res, fmt.Errorf("server did not start")
		}
	}
	pid := cmd.Process.Pid

	// The largest page there is: 100 moments of 64 KiB by the attacker,
	// read as their own list (8.7 MB of JSON).
	signup := fmt.Sprintf(`{"handle":"mallory","password":"mallory-password","join_code":%q}`, code)
	sr, err := c.Post(base+"/api/v1/accounts", "application/json", strings.NewReader(signup))
	if err != nil {
		return res, err
	}
	var acct struct {
		Person struct {
			ID string `json:"id"`
		} `json:"person"`
		Token string `json:"token"`
	}
	json.NewDecoder(sr.Body).Decode(&acct)
	sr.Body.Close()
	if sr.StatusCode != 201 {
		return res, fmt.Errorf("attacker's sign-up: %d", sr.StatusCode)
	}
	attacker := fixture.Person{ID: acct.Person.ID, Handle: "mallory", Token: acct.Token}
	victim := people[0]
	body := make([]byte, 64<<10)
	for i := range 100 {
		body[0] = byte(i)
		payload := []byte(`{"body":"` + base64.StdEncoding.EncodeToString(body) + `"}`)
		req, _ := http.NewRequest("POST", base+"/api/v1/moments", bytes.NewReader(payload))
		req.Header.Set("Authorization", "Bearer "+attacker.Token)
		r, err := c.Do(req)
		if err != nil {
			return res, err
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode != 201 {
			return res, fmt.Errorf("attacker's post: %d", r.StatusCode)
		}
	}
	bigPage := "/api/v1/people/" + attacker.ID + "/moments?limit=100"
	fmt.Fprintf(os.Stderr, "hostile mix for %v: method flood, 50 slow readers of 8.7 MB pages, bogus-link flood, 50 wrong passwords, 2,000 idle connections; 20 honest readers\n", d)

	mctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	attacks := map[string]*counter{}
	attack := func(key, name string, workers int, fn func(mctx context.Context, rng *mrand.Rand, c *counter)) {
		if skipped[key] {
			return
		}
		cn := &counter{}
		attacks[name] = cn
		for w := range workers {
			wg.Go(func() {
				rng := mrand.New(mrand.NewPCG(uint64(w), uint64(len(name))))
				for mctx.Err() == nil {
					fn(mctx, rng, cn)
				}
			})
		}
	}

	// 1. Made-up methods of 1 KB on keep-alive connections.
	attack("methods", "method flood", 2, func(mctx context.Context, rng *mrand.Rand, cn *counter) {
		conn, err := net.Dial("tcp", port)
		if err != nil {
			cn.add("err")
			time.Sleep(10 * time.Millisecond)
			return
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		for range 1000 {
			if mctx.Err() != nil {
				return
			}
			m := make([]byte, 1024)
			for i := range m {
				m[i] = 'A' + byte(rng.IntN(26))
			}
			fmt.Fprintf(conn, "%s /api/v1/feed HTTP/1.1\r\nHost: x\r\n\r\n", m)
			r, err := http.ReadResponse(br, nil)
			cn.add(statusOf(r, err))
			if err != nil {
				return
			}
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
	})
	// 2. Slow readers of the largest page: ask, wait 2 s, then read 4 KB
	// every 50 ms.
	attack("slow", "50 slow readers", 50, func(mctx context.Context, rng *mrand.Rand, cn *counter) {
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
			return nil
		}}
		conn, err := d.DialContext(mctx, "tcp", port)
		if err != nil {
			cn.add("err")
			time.Sleep(100 * time.Millisecond)
			return
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", bigPage, attacker.Token)
		select {
		case <-mctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
		conn.SetReadDeadline(time.Now().Add(40 * time.Second))
		r, err := http.ReadResponse(bufio.NewReader(conn), nil)
		cn.add(statusOf(r, err))
		if err != nil {
			return
		}
		buf := make([]byte, 4096)
		for mctx.Err() == nil {
			if _, err := r.Body.Read(buf); err != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		r.Body.Close()
	})
	// 3. Bogus one-time links with passwords.
	bogus := newClient(8)
	attack("links", "bogus-link flood", 8, func(mctx context.Context, rng *mrand.Rand, cn *counter) {
		tok := make([]byte, 32)
		rand.Read(tok)
		path := "/reset/"
		if rng.IntN(2) == 0 {
			path = "/console/setup/"
		}
		form := url.Values{"name": {"mallory"}, "password": {"a-long-enough-password"}}
		req, _ := http.NewRequestWithContext(mctx, "POST", base+path+base64.RawURLEncoding.EncodeToString(tok), strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		send(mctx, bogus, req, cn)
	})
	// 4. 50 concurrent wrong passwords for one person.
	wrong := newClient(50)
	attack("passwords", "50 wrong passwords", 50, func(mctx context.Context, rng *mrand.Rand, cn *counter) {
		payload := fmt.Sprintf(`{"handle":%q,"password":"wrong-password-%d"}`, victim.Handle, rng.IntN(1e9))
		req, _ := http.NewRequestWithContext(mctx, "POST", base+"/api/v1/sessions", strings.NewReader(payload))
		send(mctx, wrong, req, cn)
	})
	// 5. 2,000 idle keep-alive connections: one request each, then silence.
	var idle atomic.Int64
	var idleConns []net.Conn
	var idleMu sync.Mutex
	wg.Go(func() {
		if skipped["idle"] {
			return
		}
		for range 2000 {
			if mctx.Err() != nil {
				return
			}
			conn, err := net.DialTimeout("tcp", port, time.Second)
			if err != nil {
				continue
			}
			fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			if r, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
				idle.Add(1)
			}
			idleMu.Lock()
			idleConns = append(idleConns, conn)
			idleMu.Unlock()
		}
	})
	// The honest readers: everyone but the victim of the wrong passwords.
	honestStatus := &counter{}
	honestPeople := people[1:]
	reqs := make([]*http.Request, len(honestPeople))
	for i, p := range honestPeople {
		reqs[i], _ = http.NewRequest("GET", base+"/api/v1/feed", nil)
		reqs[i].Header.Set("Authorization", "Bearer "+p.Token)
	}
	hc := newClient(20)
	res.Honest = load(mctx, 20, d, func(rng *mrand.Rand) (int64, bool) {
		r, err := hc.Do(reqs[rng.IntN(len(reqs))].WithContext(mctx))
		if mctx.Err() != nil {
			return 0, false
		}
		honestStatus.add(statusOf(r, err))
		if err != nil {
			return 0, false
		}
		n, err := io.Copy(io.Discard, r.Body)
		r.Body.Close()
		return n, err == nil && r.StatusCode == 200
	})
	cancel()
	wg.Wait()
	res.PeakRSSMB = procStatusMB(pid, "VmHWM")
	res.RSSAfterMB = procStatusMB(pid, "VmRSS")
	res.IdleOpened = int(idle.Load())
	for _, conn := range idleConns {
		conn.Close()
	}
	res.HonestStatus = honestStatus.m
	names := make([]string, 0, len(attacks))
	for n := range attacks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		a := attacks[n]
		res.Attacks = append(res.Attacks, Attack{Name: n, Requests: a.n, Status: a.m})
		for s, k := range a.m {
			if strings.HasPrefix(s, "5") && s != "503" && s != "507" {
				res.Server5xx += k
			}
		}
	}
	for s, k := range honestStatus.m {
		if strings.HasPrefix(s, "5") && s != "503" && s != "507" {
			res.Server5xx += k
		}
	}
	select {
	case <-done:
	default:
		res.Alive = true
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
	}
	return res, nil
}

func hostileMarkdown(r HostileResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### hostile mix on %s, %s (%d cores, %s), %.0f s\n\n", r.Fixture, r.Time.Format("2006-01-02 15:04 UTC"), r.Cores, r.GoVersion, r.Seconds)
	fmt.Fprintf(&b, "| check | limit | measured | |\n| --- | --- | --- | --- |\n")
	pass := func(ok bool) string {
		if ok {
			return "pass"
		}
		return "fail"
	}
	fmt.Fprintf(&b, "| honest feed p95, 20 readers | < 50 ms | %.1f | %s |\n", r.Honest.P95ms, pass(r.Honest.P95ms < 50))
	fmt.Fprintf(&b, "| peak resident memory (VmHWM) | < 400 MB (aim 200) | %.0f | %s |\n", r.PeakRSSMB, pass(r.PeakRSSMB < 400))
	fmt.Fprintf(&b, "| 5xx other than 503 and 507 | 0 | %d | %s |\n", r.Server5xx, pass(r.Server5xx == 0))
	fmt.Fprintf(&b, "| server alive after | yes | %v | %s |\n\n", r.Alive, pass(r.Alive))
	fmt.Fprintf(&b, "honest: %d feeds, %.0f/s, p50 %.1f ms, p95 %.1f ms, p99 %.1f ms; answers %v\n\n", r.Honest.Requests, r.Honest.PerSecond, r.Honest.P50ms, r.Honest.P95ms, r.Honest.P99ms, r.HonestStatus)
	fmt.Fprintf(&b, "| attack | requests | answers |\n| --- | --- | --- |\n")
	for _, a := range r.Attacks {
		fmt.Fprintf(&b, "| %s | %d | %v |\n", a.Name, a.Requests, a.Status)
	}
	fmt.Fprintf(&b, "| 2,000 idle connections | %d answered then held idle | |\n", r.IdleOpened)
	fmt.Fprintf(&b, "\nresident memory after the mix %.0f MB\n", r.RSSAfterMB)
	return b.String()
}
