package app

import (
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestSigninAttemptsInBrowser: failed console sign-ins and lockouts are on
// the Overview: the counts since start, and the last ones, newest first,
// with the account tried when it exists here ("unknown account" when not)
// and the address; the metrics count them too.
func TestSigninAttemptsInBrowser(t *testing.T) {
	ts := newTestServer(t)
	ts.signup(t, "ann")
	mustAdmin(t, ts.store, "root", "admin-password")
	for _, name := range []string{"root", "mallory"} {
		if p := postForm(t, consoleClient(t), ts.URL+"/console/login", url.Values{"name": {name}, "password": {"not-the-password"}}); p.status != 401 {
			t.Fatalf("console sign-in as %s with a wrong password: %d", name, p.status)
		}
	}
	for range signinFailuresPerHandle {
		if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "not-the-password"}); r.status != 401 {
			t.Fatalf("a wrong password for ann: %d", r.status)
		}
	}

	ctx, consoleErrors := startBrowser(t)
	browserSignIn(t, ctx, ts.URL)
	browserWait(t, ctx, "overview", `document.querySelector("#signins-counts") !== null`)
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[document.querySelector("#signins-counts").innerText,
  ...[...document.querySelectorAll("#signin-events tbody tr")].map((tr) => [...tr.querySelectorAll("td")].slice(1).map((td) => td.innerText).join(" | "))]`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Since the server started: 2 failed console sign-ins, 1 lockout",
		"App sign-in: account locked out (too many wrong passwords) | ann | 127.0.0.1",
		"Console sign-in: wrong name or password | unknown account | 127.0.0.1",
		"Console sign-in: wrong name or password | root | 127.0.0.1",
	}
	if len(got) != len(want) || !strings.HasPrefix(got[0], want[0]) || strings.Join(got[1:], "\n") != strings.Join(want[1:], "\n") {
		t.Errorf("the Overview shows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	screens(t, ctx, "signin-attempts")
	var m strings.Builder
	ts.app.writePrometheus(&m)
	for _, line := range []string{"nah_console_signin_failures_total 2\n", "nah_signin_lockouts_total 1\n"} {
		if !strings.Contains(m.String(), line) {
			t.Errorf("metrics lack %q", line)
		}
	}
	for _, e := range consoleErrors() {
		t.Errorf("browser console error: %s", e)
	}
}

// TestSigninLogBounded: 10,000 failed console sign-ins under random names
// (one in ten a valid handle, the rest any bytes up to 200) keep the log
// as it is: its 20 newest events, every name "unknown account" (no name a
// client chose), and the counts right: 10,000 failures, and one lockout
// of the address per 50 (the clock moves on past each lockout).
func TestSigninLogBounded(t *testing.T) {
	ts := newTestServer(t)
	mustAdmin(t, ts.store, "root", "admin-password")
	c := consoleClient(t)
	rng := rand.New(rand.NewPCG(41, 8))
	const attempts = 10_000
	for i := range attempts {
		var name string
		if i%10 == 0 {
			b := make([]byte, 3+rng.IntN(30))
			for j := range b {
				b[j] = "abcdefghijklmnopqrstuvwxyz0123456789"[rng.IntN(36)]
			}
			name = string(b)
		} else {
			b := make([]byte, 1+rng.IntN(200))
			for j := range b {
				b[j] = byte(rng.IntN(256))
			}
			name = string(b)
		}
		if p := postForm(t, c, ts.URL+"/console/login", url.Values{"name": {name}, "password": {"not-the-password"}}); p.status != 401 {
			t.Fatalf("attempt %d: %d", i, p.status)
		}
		if (i+1)%signinFailuresPerAddr == 0 {
			ts.clock.Advance(signinWindow) // the address's lockout ends
		}
	}
	v := ts.app.signins.view()
	if v.Failed != attempts || v.Lockouts != attempts/signinFailuresPerAddr || len(v.Events) != signinLogSize {
		t.Errorf("%d failures, %d lockouts, %d events; want %d, %d, %d", v.Failed, v.Lockouts, len(v.Events), attempts, attempts/signinFailuresPerAddr, signinLogSize)
	}
	for _, e := range v.Events {
		if e.Account != "unknown account" && e.Account != "any account" {
			t.Errorf("an event keeps the name %q", e.Account)
		}
	}
}
