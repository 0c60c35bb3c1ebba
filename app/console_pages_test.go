package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/nah-app/nah/store"
	"github.com/nah-app/nah/ui"
)

// Every console page in real Chromium at a desktop's size and in a phone's
// emulation: nothing scrolls sideways on the phone, and axe-core finds no
// serious or critical violation at either size.

// axeScript is axe-core's browser build, pinned in app/testdata/axe
// (`make axe` installs it, as .ci/run does through make test).
func axeScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "axe", "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		if os.Getenv("CI") != "" || os.Getenv("UI_BROWSER_REQUIRED") != "" {
			t.Fatalf("axe-core is not installed (make axe): %v", err)
		}
		t.Skipf("axe-core is not installed (make axe); skipping: %v", err)
	}
	return string(b)
}

// axeRun runs axe-core over the page and returns its serious and critical
// violations, one line each with up to three of the elements.
const axeRun = `axe.run(document, {resultTypes: ["violations"]}).then(r => JSON.stringify(
  r.violations.filter(v => v.impact === "serious" || v.impact === "critical").map(v =>
    ({nodes: v.nodes.length, says: v.impact + " " + v.id + " (" + v.nodes.length + "): " + v.nodes.slice(0, 3).map(n => n.target.join(" ")).join(", ")}))))`

// smallText lists the first few texts on screen under 12 px, the chart's
// included: SVG text is measured as drawn, since it shrinks with its
// drawing.
const smallText = `[...document.querySelectorAll("body *")]
  .filter(e => e.checkVisibility() && [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()))
  .filter(e => (e instanceof SVGElement ? e.getBoundingClientRect().height : parseFloat(getComputedStyle(e).fontSize)) < 12)
  .slice(0, 5).map(e => e.tagName.toLowerCase() + " " + JSON.stringify(e.textContent.trim().slice(0, 30))).join(", ")`

// jargonShown lists the operator's words in the text on screen (innerText
// leaves out a closed details' content), and a person's id.
const jargonShown = `(() => {
  const words = document.body.innerText.match(/\bp95\b|transaction|\bcache|position \(|\btokens?\b|\bsessions?\b|\b[a-z2-7]{26}\b/gi);
  return words ? [...new Set(words)].join(", ") : "";
})()`

// consoleSize is a browser size the pages are checked at.
type consoleSize struct {
	name  string
	width int64
	phone bool
}

var consoleSizes = []consoleSize{{"desktop", 1280, false}, {"phone", 390, true}}

func emulate(s consoleSize) chromedp.Action[chromedp.Void] {
	if s.phone {
		// An iPhone 12's CSS viewport, as a phone's browser lays it out:
		// mobile emulation honours the viewport meta tag, which a narrow
		// desktop window does not.
		return chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile, chromedp.EmulateTouch, chromedp.EmulatePortrait)
	}
	return chromedp.EmulateViewport(1280, 900)
}

// consolePageURLs fills a replicated server with what each page shows and
// returns the pages to visit, by name, signed in (the sign-in page is
// visited signed out, first).
func consolePageURLs(t *testing.T, rs *replicatedServer) [][2]string {
	t.Helper()
	ctx := context.Background()
	ann := rs.signup(t, "ann")
	rs.post(t, ann, []byte("one"))
	rs.post(t, ann, []byte("two"))
	eve := rs.signup(t, "eve")
	if err := rs.store.DeletePerson(ctx, eve.id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rs.store.JoinCodes().Create(ctx, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	reset, err := rs.store.CreateLink(ctx, store.LinkReset, ann.id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mustSync(t, rs.backups)
	if _, err := rs.backups.Sweep.Run(ctx, time.Now()); err != nil { // a nightly copy to list
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	return [][2]string{
		{"overview", "/console"},
		{"people", "/console/people"},
		{"person", "/console/people/" + ann.id},
		{"joincodes", "/console/joincodes"},
		{"deleted", "/console/deleted"},
		{"backups", "/console/backups"},
		{"restore", "/console/backups/restore?" + url.Values{"person": {ann.id}, "at": {at}}.Encode()},
		{"digests", "/console/digests"},
		{"settings", "/console/settings"},
		{"notfound", "/console/no-such-page"},
		{"reset", "/reset/" + reset},
	}
}

func TestConsolePagesInBrowser(t *testing.T) {
	ctx, consoleErrors := startBrowser(t)
	axe := axeScript(t)
	rs := newReplicatedServer(t, func(c *serverConfig) { c.Version = "v0.0.0-test" }) // the footer too
	mustAdmin(t, rs.store, "root", "admin-password")
	rs.app.cfg.Settings = append(rs.app.cfg.Settings, // a group of each kind on Settings
		Setting{"NAH_PUBLIC_URL", "https://nah.example.com", "the environment"},
		Setting{"NAH_QUOTA_BYTES", "5GiB", "the environment"},
		Setting{"NAH_REPLICA_URL", rs.replicaDir, "the environment"},
		Setting{"NAH_PUSH_RELAY_TOKEN", "(set, not shown)", "the environment"})
	pages := consolePageURLs(t, rs)
	artifacts := os.Getenv("UI_ARTIFACT_DIR")

	must := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	var counts []string // per page: its serious and critical violations (elements)
	visit := func(size consoleSize, name string) {
		t.Helper()
		step := size.name + " " + name
		if size.phone {
			// Nothing scrolls sideways: the document is as wide as the
			// viewport. A phone's browser zooms out to fit a wider page,
			// which widens innerWidth with it, so each must be 390.
			w, err := chromedp.Run(ctx, chromedp.Evaluate[[]int64](`[document.documentElement.scrollWidth, document.documentElement.clientWidth, window.innerWidth]`))
			must(step+": widths", err)
			if w[0] != size.width || w[1] != size.width || w[2] != size.width {
				t.Errorf("%s: the document is %d px wide (client %d, window %d) in a %d px viewport", step, w[0], w[1], w[2], size.width)
			}
			small, err := chromedp.Run(ctx, chromedp.Evaluate[string](smallText))
			must(step+": text sizes", err)
			if small != "" {
				t.Errorf("%s: text smaller than 12 px: %s", step, small)
			}
		}
		// The operator's words (p95, transaction positions, caches) are
		// folded away, and a family member reads of signed-in phones,
		// never of tokens or sessions: none is in the text on screen.
		jargon, err := chromedp.Run(ctx, chromedp.Evaluate[string](jargonShown))
		must(step+": words", err)
		if jargon != "" {
			t.Errorf("%s: on screen: %s", step, jargon)
		}
		_, err = chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](axe))
		must(step+": inject axe-core", err)
		out, err := chromedp.Run(ctx, chromedp.Evaluate[string](axeRun, chromedp.EvalAwaitPromise))
		must(step+": axe-core", err)
		var vs []struct {
			Nodes int
			Says  string
		}
		must(step+": axe-core's answer", json.Unmarshal([]byte(out), &vs))
		elements := 0
		for _, v := range vs {
			elements += v.Nodes
			t.Errorf("%s: axe-core: %s", step, v.Says)
		}
		counts = append(counts, fmt.Sprintf("%s %d (%d)", step, len(vs), elements))
		if artifacts != "" {
			png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			must(step+": screenshot", err)
			must(step, os.MkdirAll(artifacts, 0o755))
			must(step, os.WriteFile(filepath.Join(artifacts, size.name+"-"+name+".png"), png, 0o644))
		}
	}
	for _, size := range consoleSizes {
		must(size.name, chromedp.Do(ctx, emulate(size), chromedp.Navigate(rs.URL+"/console/login")))
		browserWait(t, ctx, size.name+" sign-in", `document.querySelector("#name") !== null`)
		visit(size, "signin")
		must("sign in", chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.CSS("#name"), "root"),
			chromedp.SendKeys(chromedp.CSS("#password"), "admin-password"),
			chromedp.Click(chromedp.CSS("button[type=submit]"))))
		browserWait(t, ctx, size.name+" overview", `location.pathname === "/console"`)
		for _, p := range pages {
			must(p[0], chromedp.Do(ctx, chromedp.Navigate(rs.URL+p[1])))
			browserWait(t, ctx, size.name+" "+p[0], `document.readyState === "complete"`)
			visit(size, p[0])
		}
		must("sign out", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console"), chromedp.Click(chromedp.CSS(`form[action="/console/logout"] button`))))
		browserWait(t, ctx, "signed out", `location.pathname === "/console/login"`)
	}
	t.Logf("axe-core serious or critical violations per page (elements): %s", strings.Join(counts, ", "))
	// Chromium logs the 404 of each size's "notfound" page as an error;
	// any other error fails.
	notFound := 0
	for _, e := range consoleErrors() {
		if strings.Contains(e, "the server responded with a status of 404") && notFound < len(consoleSizes) {
			notFound++
			continue
		}
		t.Errorf("browser console error: %s", e)
	}
}

// TestConsoleLocalTimeInBrowser: times show in the browser's time zone,
// "3 minutes ago" when recent, with the exact local time and the server's
// UTC on hover.
func TestConsoleLocalTimeInBrowser(t *testing.T) {
	ctx, consoleErrors := startBrowser(t)
	ts := newTestServer(t)
	mustAdmin(t, ts.store, "root", "admin-password")
	ann := ts.signup(t, "ann")
	ts.post(t, ann, []byte("a moment, so the People list shows when she was last active"))
	p, err := ts.store.FindPersonByID(context.Background(), ann.id)
	if err != nil {
		t.Fatal(err)
	}
	auckland, err := time.LoadLocation("Pacific/Auckland")
	if err != nil {
		t.Fatal(err)
	}
	must := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	must("time zone", chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Pacific/Auckland"})
		return err
	})))
	must("sign in", chromedp.Do(ctx,
		chromedp.Navigate(ts.URL+"/console/login"),
		chromedp.SendKeys(chromedp.CSS("#name"), "root"),
		chromedp.SendKeys(chromedp.CSS("#password"), "admin-password"),
		chromedp.Click(chromedp.CSS("button[type=submit]"))))
	browserWait(t, ctx, "overview", `location.pathname === "/console"`)
	// Through a boosted link: the times of a swapped-in page are local too.
	must("people", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`a[href="/console/people"]`))))
	browserWait(t, ctx, "people", `document.querySelector("#people-list time") !== null`)
	must("ann", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#people-list a`))))
	browserWait(t, ctx, "ann's page", `document.querySelector("h1").innerText === "ann" && document.querySelector("main table time") !== null`)

	created := time.UnixMilli(p.CreatedAt)
	local := created.In(auckland).Format("2006-01-02 15:04")
	utc := created.UTC().Format("2006-01-02 15:04 UTC")
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => { const t = document.querySelector("main table time"); return [t.innerText, t.title]; })()`))
	must("joined", err)
	want := local
	if d := time.Since(created); d < 7*24*time.Hour {
		want = "" // recent: said as "… ago", checked below
	}
	if !strings.HasPrefix(got[1], local+" GMT+1") || !strings.HasSuffix(got[1], "("+utc+")") || (want != "" && !strings.HasPrefix(got[0], want)) || got[0] == utc {
		t.Errorf("joined shows %q, hover %q; want local %s (Auckland) with %s on hover", got[0], got[1], local, utc)
	}
	ago, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
  const t = document.createElement("time");
  t.dateTime = new Date(Date.now() - 3 * 60 * 1000).toISOString();
  t.textContent = "utc";
  document.querySelector("main").append(t);
  htmx.trigger(t, "htmx:load");
  return t.innerText;
})()`))
	must("ago", err)
	if ago != "3 minutes ago" {
		t.Errorf("a time 3 minutes ago shows %q", ago)
	}
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// TestConsoleHandOverInBrowser: a new join code and a reset link each say
// for whom and until when, with a copy button and a QR code of exactly the
// value shown; the join codes page says when open sign-up makes codes
// unnecessary.
func TestConsoleHandOverInBrowser(t *testing.T) {
	ctx, consoleErrors := startBrowser(t)
	ts := newTestServer(t, func(c *serverConfig) { c.OpenSignup = false })
	mustAdmin(t, ts.store, "root", "admin-password")
	ann, err := ts.store.CreatePerson(context.Background(), store.NewPerson{Handle: "ann", PasswordHash: "x"})
	if err != nil {
		t.Fatal(err)
	}
	must := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	must("sign in", chromedp.Do(ctx,
		chromedp.Navigate(ts.URL+"/console/login"),
		chromedp.SendKeys(chromedp.CSS("#name"), "root"),
		chromedp.SendKeys(chromedp.CSS("#password"), "admin-password"),
		chromedp.Click(chromedp.CSS("button[type=submit]"))))
	browserWait(t, ctx, "overview", `location.pathname === "/console"`)

	// held is the element whose text the QR code and the copy button hold.
	handOver := func(step, says, held string) {
		t.Helper()
		browserWait(t, ctx, step+": copy button", `document.querySelector("button.copy") !== null && document.querySelector("button.copy").checkVisibility()`)
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => {
  const v = document.querySelector("`+held+`"), n = document.querySelector("#secret-note"), q = document.querySelector("#qr path");
  const b = document.querySelector("button.copy");
  return [v.innerText.trim(), n && n.checkVisibility() ? n.innerText : "", q ? q.getAttribute("d") : "", b && b.checkVisibility() ? "copy" : ""];
})()`))
		must(step, err)
		secret := got[0]
		svg := ui.QRSVG(secret)
		if secret == "" || !strings.Contains(got[1], says) || got[2] == "" || !strings.Contains(svg, `d="`+got[2]+`"`) || got[3] != "copy" {
			t.Fatalf("%s: value %q, note %q, QR of the value %v, copy button %q", step, secret, got[1], got[2] != "" && strings.Contains(svg, got[2]), got[3])
		}
		must(step+": copy", chromedp.Do(ctx, chromedp.Click(chromedp.CSS("button.copy"))))
		browserWait(t, ctx, step+": copied", fmt.Sprintf(`(() => { const b = document.querySelector("button.copy");
  return b.innerText === "Copied" || (b.innerText.startsWith("Selected") && getSelection().toString().trim() === %q); })()`, secret))
	}
	must("join codes", chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/console/joincodes")))
	browserWait(t, ctx, "join codes", `document.querySelector("#open-signup-note") === null`)
	must("create code", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`form[action="/console/joincodes"] button`))))
	browserWait(t, ctx, "code shown", `document.querySelector("#secret") !== null`)
	handOver("join code", "in the app they choose Sign up and scan the QR code (it holds the link, with this server's address), or type this code. It works once, until ", "#secret-link")
	// The code's expiry is a time the browser shows in its own zone, as
	// every other time of the console.
	browserWait(t, ctx, "expiry in local time", `(() => { const e = document.querySelector("#secret-note time[datetime]"); return e !== null && e.dataset.utc !== undefined; })()`)

	must("ann", chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/console/people/"+ann.ID)))
	browserWait(t, ctx, "ann", `document.querySelector('form[action$="/reset"] button') !== null`)
	must("reset link", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`form[action$="/reset"] button`))))
	browserWait(t, ctx, "link shown", `document.querySelector("#secret") !== null`)
	handOver("reset link", "For ann: they open this link on their phone (or scan it)", "#secret")
	// The server's address is the listen address, 127.0.0.1: the link
	// reaches no phone, and the page says so.
	browserWait(t, ctx, "loopback warned", `document.querySelector("#secret-warning") !== null && document.querySelector("#secret-warning").innerText.startsWith("This link starts with `+ts.URL+`, an address only this machine reaches: a phone cannot open it.")`)

	if err := ts.store.SetSetting(context.Background(), settingOpenSignup, "true"); err != nil {
		t.Fatal(err)
	}
	must("join codes", chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/console/joincodes")))
	browserWait(t, ctx, "open sign-up said", `document.querySelector("#open-signup-note") !== null && document.querySelector("#open-signup-note").innerText.includes("codes are not needed now")`)
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}
