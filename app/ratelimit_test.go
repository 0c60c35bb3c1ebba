package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/internal/testutil"
)

// holdHasher takes every hashing slot, so that a request that reaches the
// hasher waits there; the returned func gives them back (once).
func holdHasher(t *testing.T, h *hasher) (release func()) {
	t.Helper()
	n := cap(h.slots)
	for range n {
		h.slots <- struct{}{}
	}
	done := false
	release = func() {
		if !done {
			done = true
			for range n {
				<-h.slots
			}
		}
	}
	t.Cleanup(release)
	return release
}

// sendAll sends every request concurrently and returns the statuses as they
// arrive (-1 for a transport error).
func sendAll(c *http.Client, reqs []func() *http.Request) <-chan int {
	out := make(chan int, len(reqs))
	for _, mk := range reqs {
		go func() {
			res, err := c.Do(mk())
			if err != nil {
				out <- -1
				return
			}
			res.Body.Close()
			out <- res.StatusCode
		}()
	}
	return out
}

// collect reads up to n statuses from ch, waiting at most d in all.
func collect(ch <-chan int, n int, d time.Duration) map[int]int {
	got := map[int]int{}
	timeout := time.After(d)
	for range n {
		select {
		case s := <-ch:
			got[s]++
		case <-timeout:
			return got
		}
	}
	return got
}

func apiSignin(ts *testServer, handle, password string) func() *http.Request {
	return func() *http.Request {
		b, _ := json.Marshal(map[string]string{"handle": handle, "password": password})
		req, _ := http.NewRequest("POST", ts.URL+"/api/v1/sessions", strings.NewReader(string(b)))
		return req
	}
}

func consoleSignin(ts *testServer, name, password string) func() *http.Request {
	return func() *http.Request {
		req, _ := http.NewRequest("POST", ts.URL+"/console/login", strings.NewReader(url.Values{"name": {name}, "password": {password}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return req
	}
}

// TestSigninLimitIsAtomic: a burst of wrong passwords cannot all be checked
// against the limit before any of them is counted. The hasher is held, so
// every attempt that is let through waits there: at most the limit may be
// let through, the rest are 429 at once, and the right password sent
// during the burst is 429 too. Per handle and per address, API and console.
func TestSigninLimitIsAtomic(t *testing.T) {
	ts := newTestServer(t)
	ts.signup(t, "ann")
	mustAdmin(t, ts.store, "root", "admin-password")
	c := ts.Client()
	wrong := func(mk func(i int) func() *http.Request, n int) []func() *http.Request {
		var rs []func() *http.Request
		for i := range n {
			rs = append(rs, mk(i))
		}
		return rs
	}
	cases := []struct {
		name  string
		burst []func() *http.Request
		limit int
		right func() *http.Request
	}{
		{"api per handle", wrong(func(int) func() *http.Request { return apiSignin(ts, "ann", "wrong-password") }, 50),
			signinFailuresPerHandle, apiSignin(ts, "ann", "password-ann")},
		{"console per name", wrong(func(int) func() *http.Request { return consoleSignin(ts, "root", "wrong-password") }, 50),
			signinFailuresPerHandle, consoleSignin(ts, "root", "admin-password")},
		{"api per address", wrong(func(i int) func() *http.Request { return apiSignin(ts, "guess"+strconv.Itoa(i), "wrong-password") }, 2*signinFailuresPerAddr),
			signinFailuresPerAddr, apiSignin(ts, "ann", "password-ann")},
		{"console per address", wrong(func(i int) func() *http.Request { return consoleSignin(ts, "guess"+strconv.Itoa(i), "wrong-password") }, 2*signinFailuresPerAddr),
			signinFailuresPerAddr, consoleSignin(ts, "root", "admin-password")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			release := holdHasher(t, ts.app.hasher)
			ch := sendAll(c, tc.burst)
			// Those over the limit need no hash: they are answered now.
			// Once they are, the limit's worth are counted and waiting
			// for the hasher (for less than hashWait).
			early := collect(ch, len(tc.burst)-tc.limit, 3*time.Second)
			right := sendAll(c, []func() *http.Request{tc.right})
			rightEarly := collect(right, 1, time.Second)
			release()
			late := collect(ch, len(tc.burst)-sumOf(early), 10*time.Second)
			rightLate := collect(right, 1-sumOf(rightEarly), 10*time.Second)
			if early[429]+late[429] < len(tc.burst)-tc.limit || early[401]+late[401] > tc.limit {
				t.Errorf("%d wrong passwords at once (limit %d): answered at once %v, after hashing %v", len(tc.burst), tc.limit, early, late)
			}
			if rightEarly[429] != 1 {
				t.Errorf("right password during the burst: %v at once, %v after hashing; want 429 at once", rightEarly, rightLate)
			}
			ts.clock.Advance(signinWindow) // a fresh window for the next case
		})
	}
}

func sumOf(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestSigninKeysAreValidated: a limiter is never keyed by raw client input.
// A name or handle that is not a valid handle counts only against the
// address; a valid one is keyed (the console's apart from the API's).
func TestSigninKeysAreValidated(t *testing.T) {
	ts := newTestServer(t)
	mustAdmin(t, ts.store, "root", "admin-password")
	c := consoleClient(t)
	huge := strings.Repeat("x", 4000)
	for _, name := range []string{huge, "Root", "root\x00", "ro"} {
		if p := postForm(t, c, ts.URL+"/console/login", url.Values{"name": {name}, "password": {"wrong-password"}}); p.status != 401 {
			t.Fatalf("console sign-in as %.20q: %d", name, p.status)
		}
		if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": name, "password": "wrong-password"}); r.status != 401 {
			t.Fatalf("API sign-in as %.20q: %d", name, r.status)
		}
	}
	postForm(t, c, ts.URL+"/console/login", url.Values{"name": {"root"}, "password": {"wrong-password"}})
	ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "wrong-password"})

	keys := func(l *limiter) []string {
		l.mu.Lock()
		defer l.mu.Unlock()
		var ks []string
		for k := range l.windows {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	if got, want := keys(ts.app.signinByHandle), []string{"admin root", "ann"}; !slices.Equal(got, want) {
		t.Errorf("handle limiter keys %.120q, want %q", got, want)
	}
	if got, want := keys(ts.app.signinByAddr), []string{"127.0.0.1", "admin 127.0.0.1"}; !slices.Equal(got, want) {
		t.Errorf("address limiter keys %.120q, want %q", got, want)
	}
}

// TestClientAddr: IPv4 clients are keyed by their address, IPv6 clients by
// their /64 (one subscriber's allocation: counting each of its 2^64
// addresses apart would make the limit per address meaningless), and an
// IPv4-mapped IPv6 address is IPv4. The same holds for an address a
// trusted proxy forwards.
func TestClientAddr(t *testing.T) {
	a := &App{cfg: Config{TrustedProxies: mustPrefixes("10.0.0.0/8", "fd00::/8")}}
	cases := []struct{ remote, xff, want string }{
		{"192.0.2.1:1234", "", "192.0.2.1"},
		{"[::ffff:192.0.2.1]:1234", "", "192.0.2.1"},
		{"[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:1234", "", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2::1]:1234", "", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:1234", "", "2001:db8:1:3::/64"},
		{"[fe80::1%eth0]:1234", "", "fe80::/64"},
		{"192.0.2.1:1234", "198.51.100.1", "192.0.2.1"}, // untrusted peer: header ignored
		{"10.0.0.1:1234", "198.51.100.1", "198.51.100.1"},
		{"10.0.0.1:1234", "2001:db8:9:9:1::1", "2001:db8:9:9::/64"},
		{"10.0.0.1:1234", "::ffff:198.51.100.1", "198.51.100.1"},
		{"[fd00::1]:1234", "2001:db8:9:9:1::1, fd00::2", "2001:db8:9:9::/64"},
		{"10.0.0.1:1234", "10.0.0.2", "10.0.0.1"}, // all trusted: the peer
		{"[fd00::1]:1234", "", "fd00::/64"},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		if got := a.clientAddr(r); got != c.want {
			t.Errorf("clientAddr(%s, X-Forwarded-For %q) = %q, want %q", c.remote, c.xff, got, c.want)
		}
	}
}

// TestSigninLimitPerIPv6Subnet: wrong passwords from many addresses of one
// /64 add up to one address's limit; another /64 is not touched.
func TestSigninLimitPerIPv6Subnet(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.TrustedProxies = mustPrefixes("127.0.0.1/32") })
	ts.signup(t, "ann")
	send := func(from, handle, password string) int {
		b, _ := json.Marshal(map[string]string{"handle": handle, "password": password})
		req, _ := http.NewRequest("POST", ts.URL+"/api/v1/sessions", strings.NewReader(string(b)))
		req.Header.Set("X-Forwarded-For", from)
		res, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for i := range signinFailuresPerAddr {
		if s := send(fmt.Sprintf("2001:db8:1:2:%x::1", i+1), "guess"+strconv.Itoa(i), "wrong-password"); s != 401 {
			t.Fatalf("failure %d: %d", i, s)
		}
	}
	if s := send("2001:db8:1:2:ffff::1", "ann", "password-ann"); s != 429 {
		t.Fatalf("a new address in the same /64 after %d failures: %d, want 429", signinFailuresPerAddr, s)
	}
	if s := send("2001:db8:1:3::1", "ann", "password-ann"); s != 201 {
		t.Fatalf("another /64: %d, want 201", s)
	}
}

// TestLimiterFullKeepsLockouts: an attacker with many addresses fills the
// limiter's map; a locked-out key is still locked out until its window
// ends, and the map stays bounded. When every key is locked out, a new key
// is refused (until the earliest window ends) rather than anyone forgotten.
func TestLimiterFullKeepsLockouts(t *testing.T) {
	clock := testutil.NewClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	l := newLimiter(3, time.Minute, clock.Now)
	take := func(key string) error { _, err := l.take(key); return err }
	for range 3 {
		take("victim")
	}
	take("partial")
	take("partial")
	if take("victim") == nil {
		t.Fatal("victim not locked out")
	}
	clock.Advance(time.Second)
	for i := range 2 * maxLimiterKeys {
		take(strconv.Itoa(i))
	}
	if err := take("victim"); nah.ErrorCode(err) != nah.RateLimited {
		t.Fatalf("after %d other keys the victim's lockout is forgotten: %v", 2*maxLimiterKeys, err)
	}
	if take("partial") != nil || take("partial") == nil {
		t.Error("after the flood, a key with two attempts counted lost them")
	}
	if n := len(l.windows); n > maxLimiterKeys {
		t.Errorf("%d keys, bound %d", n, maxLimiterKeys)
	}

	// Every key locked out: a new key is refused, nobody is forgotten.
	for i := 0; len(l.windows) < maxLimiterKeys; i++ {
		take("x" + strconv.Itoa(i))
	}
	for k := range l.windows {
		for take(k) == nil {
		}
	}
	err := take("newcomer")
	var e *nah.Error
	if !errors.As(err, &e) || e.Code != nah.RateLimited || e.RetryAfter <= 0 || e.RetryAfter > time.Minute {
		t.Fatalf("a new key while every key is locked out: %v", err)
	}
	if take("victim") == nil {
		t.Fatal("victim forgotten")
	}
	// When the windows end, the locked-out keys go and new keys come in.
	clock.Advance(time.Minute)
	if err := take("newcomer"); err != nil {
		t.Fatalf("a new key after the windows ended: %v", err)
	}
	if n := len(l.windows); n > maxLimiterKeys {
		t.Errorf("%d keys, bound %d", n, maxLimiterKeys)
	}
}

// TestLimiterMemory measures a full limiter, for the bound's comment.
func TestLimiterMemory(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := newLimiter(10, time.Minute, time.Now)
	for i := range maxLimiterKeys {
		l.take(fmt.Sprintf("2001:db8:%x:%x::/64", i>>16, i&0xffff))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	used := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d keys: %.1f MB", len(l.windows), float64(used)/(1<<20))
	if used > 12<<20 {
		t.Errorf("a full limiter holds %.1f MB, more than its comment says", float64(used)/(1<<20))
	}
	runtime.KeepAlive(l)
}

// TestBogusSecretsAreRefusedWithoutHashing: a reset link, a setup link or a
// join code that is not usable is refused before any password is hashed
// (the hasher is held, so a request that reached it would wait), and after
// secretFailuresPerAddr of them from one address the answer is 429 with
// Retry-After, for every kind, until the window ends.
func TestBogusSecretsAreRefusedWithoutHashing(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.OpenSignup = false })
	holdHasher(t, ts.app.hasher)
	c := &http.Client{Timeout: 2 * time.Second}
	bogus := strings.Repeat("A", 43)
	kinds := []struct {
		name string
		req  func() *http.Request
		want int
	}{
		{"reset link", func() *http.Request {
			return formRequest(ts.URL+"/reset/"+bogus, url.Values{"password": {"new-password"}})
		}, 404},
		{"setup link", func() *http.Request {
			return formRequest(ts.URL+"/console/setup/"+bogus, url.Values{"name": {"root"}, "password": {"admin-password"}})
		}, 404},
		{"join code", func() *http.Request {
			req, _ := http.NewRequest("POST", ts.URL+"/api/v1/accounts", strings.NewReader(`{"handle":"eve","password":"password-eve","join_code":"abcdabcdabcdabcd"}`))
			return req
		}, 400},
		{"reset form", func() *http.Request {
			req, _ := http.NewRequest("GET", ts.URL+"/reset/"+bogus, nil)
			return req
		}, 404},
	}
	send := func(req *http.Request) *http.Response {
		t.Helper()
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s waited for a hashing slot: %v", req.Method, req.URL.Path, err)
		}
		res.Body.Close()
		return res
	}
	for i := range secretFailuresPerAddr {
		k := kinds[i%len(kinds)]
		if res := send(k.req()); res.StatusCode != k.want {
			t.Fatalf("bogus %s (%d): %d, want %d", k.name, i, res.StatusCode, k.want)
		}
	}
	for _, k := range kinds {
		res := send(k.req())
		if s, err := strconv.Atoi(res.Header.Get("Retry-After")); res.StatusCode != 429 || err != nil || s <= 0 {
			t.Errorf("bogus %s after %d bogus secrets: %d Retry-After %q, want 429", k.name, secretFailuresPerAddr, res.StatusCode, res.Header.Get("Retry-After"))
		}
	}
}

// TestGoodSecretsDoNotCount: using a right link or join code does not count
// against the limit of bogus ones.
func TestGoodSecretsDoNotCount(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.OpenSignup = false })
	for i := range secretFailuresPerAddr + 1 {
		code, _, err := ts.store.JoinCodes().Create(t.Context(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		handle := "user" + strconv.Itoa(i)
		if r := ts.do(t, "POST", "/api/v1/accounts", "", map[string]string{"handle": handle, "password": "password-x", "join_code": code}); r.status != 201 {
			t.Fatalf("sign-up %d with a good join code: %d %s", i, r.status, r.raw)
		}
	}
}

// TestHasherLeavesACore: password hashing never takes every core.
func TestHasherLeavesACore(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for procs, want := range map[int]int{1: 1, 2: 1, 4: 3, 8: 7} {
		runtime.GOMAXPROCS(procs)
		if got := cap(newHasher(4).slots); got != want {
			t.Errorf("GOMAXPROCS %d: %d hashing slots, want %d", procs, got, want)
		}
	}
}

func formRequest(u string, form url.Values) *http.Request {
	req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return req
}

// TestGiveBackStaysInItsWindow: an event refunded after its window ended
// (a password check that outlasted the window) gives nothing to the next
// window, which would otherwise allow max+1 attempts in it.
func TestGiveBackStaysInItsWindow(t *testing.T) {
	clock := testutil.NewClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	l := newLimiter(3, time.Minute, clock.Now)
	old, err := l.take("k")
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	for i := range 3 {
		if _, err := l.take("k"); err != nil {
			t.Fatalf("attempt %d of the new window: %v", i+1, err)
		}
	}
	old.giveBack()
	if _, err := l.take("k"); nah.ErrorCode(err) != nah.RateLimited {
		t.Fatalf("a fourth attempt in the new window after a refund from the old one: %v, want rate_limited", err)
	}
	// A refund into its own window still gives the attempt back.
	clock.Advance(time.Minute)
	at, err := l.take("k")
	if err != nil {
		t.Fatal(err)
	}
	l.take("k")
	l.take("k")
	at.giveBack()
	if _, err := l.take("k"); err != nil {
		t.Fatalf("after a refund in the same window: %v", err)
	}
}
