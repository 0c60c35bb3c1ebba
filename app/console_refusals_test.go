package app

import (
	"context"
	"fmt"
	"net/url"
	"os"
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
	} {
		must("backups", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console/backups")))
		waitFor("backups", `document.querySelector("#restore-who") !== null`)
		must("restore "+tc.who, chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.CSS("#restore-who"), tc.who),
			chromedp.SetValue(chromedp.CSS("#restore-at"), tc.at),
			chromedp.Click(chromedp.CSS("#restore-person button"))))
		waitFor("restore "+tc.who, seen("#error", tc.says))
	}

	// 7. A restore to a time before any copy, confirmed.
	confirm := "/console/backups/restore?" + url.Values{"person": {ann.id}, "at": {"2001-01-01T00:00:00Z"}}.Encode()
	must("confirmation", chromedp.Do(ctx, chromedp.Navigate(rs.URL+confirm)))
	waitFor("confirmation", `document.querySelector("#restore-confirm") !== null`)
	must("confirm", chromedp.Do(ctx, chromedp.Click(chromedp.ID("restore-confirm"))))
	waitFor("no copy then", seen("#error", "holds no copy of ann's file"))

	// 8. Sync now with the target away: a file where its folder was.
	must("target away", os.RemoveAll(rs.replicaDir))
	must("target away", os.WriteFile(rs.replicaDir, []byte("not a directory"), 0o600))
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
