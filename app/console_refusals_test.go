package app

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// seen is the condition that the refusal sel is on screen saying says
// (innerText: rendered and not hidden) and has the focus.
func seen(sel, says string) string {
	return fmt.Sprintf(`(() => { const el = document.querySelector(%q);
  return el !== null && el.checkVisibility() && el.innerText.includes(%q) && document.activeElement === el })()`, sel, says)
}

// spendTicket sends the restore's confirmation on the page, as another
// tab would, so that its button then sends a ticket already spent.
func spendTicket(t *testing.T, ctx context.Context) {
	t.Helper()
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch("/console/backups/restore", {method: "POST", body: new URLSearchParams(new FormData(document.querySelector("#restore-confirm").form))}).then((r) => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || status != 200 {
		t.Fatalf("the confirmation sent from another tab: %d %v", status, err)
	}
}

// TestConsoleRefusalsInBrowser: with JavaScript on, each refusal of the
// console is on screen next to what it is about, with the focus on it:
// htmx used to drop 4xx and 5xx answers, so none of them showed.
func TestConsoleRefusalsInBrowser(t *testing.T) {
	ctx, consoleErrors := startBrowser(t)
	rs := newReplicatedServer(t)
	mustAdmin(t, rs.store, "root", "admin-password")
	ann := rs.signup(t, "ann")
	rs.post(t, ann, []byte("one"))
	mustSync(t, rs.backups)

	must := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	waitFor := func(step, cond string) {
		t.Helper()
		browserWait(t, ctx, step, cond)
	}
	signIn := func(step, name, password string) {
		t.Helper()
		must(step, chromedp.Do(ctx,
			chromedp.Navigate(rs.URL+"/console/login"),
			chromedp.SendKeys(chromedp.CSS("#name"), name),
			chromedp.SendKeys(chromedp.CSS("#password"), password),
			chromedp.Click(chromedp.CSS("button[type=submit]"))))
	}

	// 1. A wrong password.
	signIn("wrong password", "root", "wrong-password")
	waitFor("wrong password", seen("#error", "the name or password is wrong"))

	// 2. Too many attempts: the limit of a name, spent from this address,
	// says when to try again in words.
	c := consoleClient(t)
	for range signinFailuresPerHandle {
		postForm(t, c, rs.URL+"/console/login", url.Values{"name": {"zed"}, "password": {"wrong-password"}})
	}
	signIn("too many attempts", "zed", "wrong-password")
	waitFor("too many attempts", seen("#error", "Too many attempts: try again in about 15 minutes."))

	signIn("sign in", "root", "admin-password")
	waitFor("overview", `location.pathname === "/console"`)

	// 3. A handle already taken, in the Create form.
	must("people", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console/people")))
	waitFor("people", `document.querySelector("#create-person") !== null`)
	must("create ann again", chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("details summary")),
		chromedp.SendKeys(chromedp.CSS("#new-handle"), "ann"),
		chromedp.SendKeys(chromedp.CSS("#new-password"), "password-ann2"),
		chromedp.Click(chromedp.CSS("#create-person button"))))
	waitFor("handle taken", seen("#create-person #create-error", "that handle is taken"))

	// 4. A mistyped handle, in the Delete form.
	must("ann's page", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console/people/"+ann.id)))
	waitFor("ann's page", `document.querySelector("#confirm") !== null`)
	must("delete with a typo", chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#confirm"), "anne"),
		chromedp.Click(chromedp.CSS("#delete"))))
	waitFor("mistyped handle", seen("#delete-error", "Type the handle ann exactly"))

	// 5, 6. A restore of nobody, and of a time to come, from the Backups
	// page's form.
	past := time.Now().Add(-time.Minute).UTC().Format("2006-01-02T15:04:05")
	future := time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04:05")
	for _, tc := range []struct{ who, at, says string }{
		{"nobody", past, "no such person"},
		{"ann", future, "is in the future"},
		{"ann", "2001-01-01T00:00:00", "is before ann joined"},
	} {
		must("backups", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console/backups")))
		waitFor("backups", `document.querySelector("#restore-who") !== null`)
		must("who "+tc.who, chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#restore-who"), tc.who)))
		setRestoreTime(t, ctx, tc.at)
		must("restore "+tc.who, chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS("#restore-person button"))))
		waitFor("restore "+tc.who, seen("#error", tc.says))
	}

	// 7. A confirmation already used (in another tab), confirmed again.
	confirm := "/console/backups/restore?" + url.Values{"person": {ann.id}, "at": {time.Now().UTC().Format(time.RFC3339)}}.Encode()
	must("confirmation", chromedp.Do(ctx, chromedp.Navigate(rs.URL+confirm)))
	waitFor("confirmation", `document.querySelector("#restore-confirm") !== null`)
	spendTicket(t, ctx)
	must("confirm", chromedp.Do(ctx, chromedp.Click(chromedp.ID("restore-confirm"))))
	waitFor("used already", seen("#error", "This confirmation was already used once"))

	// 8. Sync now with the target away: a file where its folder was.
	rs.takeTargetAway(t)
	rs.post(t, ann, []byte("while the target is away"))
	must("backups", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console/backups")))
	waitFor("backups", `document.querySelector("#sync-now") !== null`)
	must("sync now", chromedp.Do(ctx, chromedp.Click(chromedp.ID("sync-now"))))
	waitFor("sync failed", seen("#sync-error", "Sync failed"))

	// Without JavaScript the refusal is a page of its own, and the
	// browser's autofocus puts the focus on it too.
	must("javascript off", chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return err
	})))
	must("delete with a typo, no javascript", chromedp.Do(ctx,
		chromedp.Navigate(rs.URL+"/console/people/"+ann.id),
		chromedp.SendKeys(chromedp.CSS("#confirm"), "anne"),
		chromedp.Click(chromedp.CSS("#delete")),
		chromedp.WaitReady(chromedp.ID("delete-error"))))
	if off, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`typeof htmx === "undefined"`)); err != nil || !off {
		t.Fatalf("javascript is still on: %v", err)
	}
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](seen("#delete-error", "Type the handle ann exactly"), chromedp.WithPollingTimeout(10*time.Second)))
	if err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("mistyped handle without javascript: %v\n%s", err, body)
	}

	// Chromium logs each 4xx or 5xx answer as a console error: here
	// they are the refusals themselves. Any other error fails.
	for _, e := range consoleErrors() {
		if !strings.Contains(e, "Failed to load resource: the server responded with a status of") {
			t.Errorf("browser console error: %s", e)
		}
	}
}

// TestConsoleReloadInBrowser: with JavaScript on, a reload after each
// action shows a console page, never the JSON of a POST-only route; an
// unknown console address and a wrong method are console pages with a way
// back.
func TestConsoleReloadInBrowser(t *testing.T) {
	ctx, consoleErrors := startBrowser(t)
	rs := newReplicatedServer(t)
	mustAdmin(t, rs.store, "root", "admin-password")
	ann := rs.signup(t, "ann")
	rs.post(t, ann, []byte("one"))
	mustSync(t, rs.backups)

	must := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	// reload reloads the page and checks it is the console's page at path
	// with title h1.
	reload := func(step, path, h1 string) {
		t.Helper()
		must(step+": reload", chromedp.Do(ctx, chromedp.Reload()))
		browserWait(t, ctx, step+": after the reload", fmt.Sprintf(
			`document.readyState === "complete" && document.contentType === "text/html" && location.pathname === %q && document.querySelector("h1") !== null && document.querySelector("h1").innerText === %q`, path, h1))
	}
	act := func(step, page, waitFor string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		must(step, chromedp.Do(ctx, chromedp.Navigate(rs.URL+page)))
		browserWait(t, ctx, step+": page", `document.readyState === "complete"`)
		must(step, chromedp.Do(ctx, actions...))
		browserWait(t, ctx, step+": answer", waitFor)
	}
	click := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.Click(chromedp.CSS(sel)) }
	keys := func(sel, s string) chromedp.Action[chromedp.Void] { return chromedp.SendKeys(chromedp.CSS(sel), s) }

	act("wrong password", "/console/login", `document.querySelector("#error") !== null`,
		keys("#name", "root"), keys("#password", "wrong-password"), click("button[type=submit]"))
	reload("wrong password", "/console/login", "Sign in")
	act("sign in", "/console/login", `location.pathname === "/console"`,
		keys("#name", "root"), keys("#password", "admin-password"), click("button[type=submit]"))
	reload("sign in", "/console", "Overview")

	person := "/console/people/" + ann.id
	act("reset link", person, `document.querySelector("#secret") !== null`, click(`form[action$="/reset"] button`))
	reload("reset link", person, "ann")
	act("disable", person, `document.querySelector("#state").innerText === "disabled"`, click("#toggle"))
	reload("disable", person, "ann")
	act("delete with a typo", person, `document.querySelector("#delete-error") !== null`, keys("#confirm", "anne"), click("#delete"))
	reload("delete with a typo", person, "ann")
	act("create refused", "/console/people", `document.querySelector("#create-error") !== null`,
		click("details summary"), keys("#new-handle", "ann"), keys("#new-password", "password-ann2"), click("#create-person button"))
	reload("create refused", "/console/people", "People")
	act("join code", "/console/joincodes", `document.querySelector("#secret") !== null`, click(`form[action="/console/joincodes"] button`))
	reload("join code", "/console/joincodes", "Join codes")
	act("revoke code", "/console/joincodes", `document.querySelector(".code-state").innerText === "revoked"`, click("td form button"))
	reload("revoke code", "/console/joincodes", "Join codes")
	act("settings", "/console/settings", `document.querySelector("[role=status]") !== null`, click(`form[action="/console/settings"] button`))
	reload("settings", "/console/settings", "Settings")
	act("sync now", "/console/backups", `document.body.innerText.includes("Synced in")`, click("#sync-now"))
	reload("sync now", "/console/backups", "Backups")
	confirm := "/console/backups/restore?" + url.Values{"person": {ann.id}, "at": {time.Now().UTC().Format(time.RFC3339)}}.Encode()
	must("restore refused", chromedp.Do(ctx, chromedp.Navigate(rs.URL+confirm)))
	browserWait(t, ctx, "restore refused: page", `document.querySelector("#restore-confirm") !== null`)
	spendTicket(t, ctx)
	must("restore refused", chromedp.Do(ctx, click("#restore-confirm")))
	browserWait(t, ctx, "restore refused: answer", `document.querySelector("#error") !== null`)
	reload("restore refused", "/console/backups/restore", "Restore ann")

	// No such page, and an action's address opened: console pages with a
	// way back to it.
	for _, tc := range []struct{ path, h1 string }{
		{"/console/no-such-page", "No such page"},
		{"/console/backups/sync", "Not a page to open"},
		{"/reset/a/b", "No such page"},
	} {
		must(tc.path, chromedp.Do(ctx, chromedp.Navigate(rs.URL+tc.path)))
		browserWait(t, ctx, tc.path, fmt.Sprintf(`document.contentType === "text/html" && document.querySelector("h1") !== null && document.querySelector("h1").innerText === %q && document.querySelector('main a[href="/console"]') !== null`, tc.h1))
	}
	must("sign out", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console"), click(`form[action="/console/logout"] button`)))
	browserWait(t, ctx, "signed out", `location.pathname === "/console/login"`)
	reload("sign out", "/console/login", "Sign in")

	for _, e := range consoleErrors() {
		if !strings.Contains(e, "Failed to load resource: the server responded with a status of") {
			t.Errorf("browser console error: %s", e)
		}
	}
}

// TestConsoleDangerInBrowser: only what destroys (delete, a restore over a
// file) is red, so that it stands out; signing out, disabling and revoking
// a join code are ordinary buttons. A long action disables its button and
// says what it is doing while it runs.
func TestConsoleDangerInBrowser(t *testing.T) {
	ctx, consoleErrors := startBrowser(t)
	rs := newReplicatedServer(t)
	mustAdmin(t, rs.store, "root", "admin-password")
	ann := rs.signup(t, "ann")
	rs.post(t, ann, []byte("one"))
	mustSync(t, rs.backups)

	must := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	must("sign in", chromedp.Do(ctx,
		chromedp.Navigate(rs.URL+"/console/login"),
		chromedp.SendKeys(chromedp.CSS("#name"), "root"),
		chromedp.SendKeys(chromedp.CSS("#password"), "admin-password"),
		chromedp.Click(chromedp.CSS("button[type=submit]"))))
	browserWait(t, ctx, "overview", `location.pathname === "/console"`)

	// danger is the check that every sel is in the warning colour, unlike
	// the page's plain buttons, and, when zone, inside the danger zone.
	danger := func(step string, zone bool, sels ...string) {
		t.Helper()
		for _, sel := range sels {
			got, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(() => {
  const b = document.querySelector(%q), plain = document.querySelector('button:not(.danger)');
  if (!b) return "missing";
  const bg = getComputedStyle(b).backgroundColor;
  if (bg !== "rgb(176, 0, 32)" || bg === getComputedStyle(plain).backgroundColor) return "background " + bg;
  if (%v && !b.closest(".danger-zone")) return "outside the danger zone";
  return "";
})()`, sel, zone)))
			must(step, err)
			if got != "" {
				t.Errorf("%s: %s: %s", step, sel, got)
			}
		}
	}
	// plain is the check that no sel is red: only what destroys is.
	plain := func(step string, sels ...string) {
		t.Helper()
		for _, sel := range sels {
			got, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(() => {
  const b = document.querySelector(%q);
  return b ? getComputedStyle(b).backgroundColor : "missing";
})()`, sel)))
			must(step, err)
			if got == "rgb(176, 0, 32)" || got == "missing" {
				t.Errorf("%s: %s: %s, want an ordinary button", step, sel, got)
			}
		}
	}
	must("ann's page", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console/people/"+ann.id)))
	browserWait(t, ctx, "ann's page", `document.querySelector("#delete") !== null`)
	danger("ann's page", true, "#delete")
	plain("ann's page", "#toggle", `button[aria-label^="Sign out phone"]`, "#signout-all")
	if _, _, err := rs.store.JoinCodes().Create(context.Background(), time.Hour); err != nil {
		t.Fatal(err)
	}
	must("join codes", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console/joincodes")))
	browserWait(t, ctx, "join codes", `document.querySelector('button[aria-label^="Revoke code"]') !== null`)
	plain("join codes", `button[aria-label^="Revoke code"]`)
	must("ann's page", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console/people/"+ann.id)))
	browserWait(t, ctx, "ann's page", `document.querySelector("#delete") !== null`)
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("#restore-person").closest(".danger-zone") !== null`)); err != nil || !got {
		t.Errorf("the restore to a time is not in the danger zone (%v)", err)
	}
	confirm := "/console/backups/restore?" + url.Values{"person": {ann.id}, "at": {time.Now().UTC().Format(time.RFC3339)}}.Encode()
	must("confirmation", chromedp.Do(ctx, chromedp.Navigate(rs.URL+confirm)))
	browserWait(t, ctx, "confirmation", `document.querySelector("#restore-confirm") !== null`)
	danger("confirmation", false, "#restore-confirm")

	// Sync now: at the click its button is disabled, and the progress
	// line shows, so that it cannot be sent twice.
	must("backups", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console/backups")))
	browserWait(t, ctx, "backups", `document.querySelector("#sync-now") !== null`)
	busy, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
  const b = document.querySelector("#sync-now");
  b.click();
  const p = b.form.querySelector(".htmx-indicator");
  return b.disabled + " " + (p !== null && p.checkVisibility() && p.innerText.includes("Starting the sync"));
})()`))
	must("sync now", err)
	if busy != "true true" {
		t.Errorf("sync now while it runs: disabled and progress shown = %s", busy)
	}
	browserWait(t, ctx, "synced", `document.body.innerText.includes("Synced in")`)

	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}
