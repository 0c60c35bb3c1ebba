package app

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// The console as a family member uses it from a phone, with JavaScript on:
// the Settings page's groups, a restore's time in the browser's own zone,
// and long actions (Import, a restore) that show their progress and cannot
// be sent twice.

// browserSignIn signs root in from the console's sign-in page.
func browserSignIn(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/console/login"),
		chromedp.SendKeys(chromedp.CSS("#name"), "root"),
		chromedp.SendKeys(chromedp.CSS("#password"), "admin-password"),
		chromedp.Click(chromedp.CSS("button[type=submit]"))); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	browserWait(t, ctx, "overview", `location.pathname === "/console"`)
}

// TestConsoleSettingsInBrowser: on a phone, the Settings page shows how to
// change a setting and each group's heading and sentence on screen
// (innerText), each setting in words with its value and its line.
func TestConsoleSettingsInBrowser(t *testing.T) {
	ctx, consoleErrors := startBrowser(t)
	ts := newTestServer(t)
	ts.app.cfg.Settings = append(ts.app.cfg.Settings, Setting{"NAH_QUOTA_BYTES", "5GiB", "the environment"})
	mustAdmin(t, ts.store, "root", "admin-password")
	if err := chromedp.Do(ctx, emulate(consoleSizes[1])); err != nil {
		t.Fatal(err)
	}
	browserSignIn(t, ctx, ts.URL)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`a[href="/console/settings"]`))); err != nil {
		t.Fatal(err)
	}
	browserWait(t, ctx, "settings", `location.pathname === "/console/settings"`)
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => {
  const shown = (el) => el && el.checkVisibility() ? el.innerText.replace(/\s+/g, " ").trim() : "(not shown)";
  const out = [shown(document.querySelector("#how-to-change"))];
  for (const g of document.querySelectorAll("[data-testid=setting-group]")) out.push(shown(g.querySelector("h2")) + ": " + shown(g.querySelector("h2 + p")));
  out.push(shown(document.querySelector('[data-setting="NAH_QUOTA_BYTES"]')));
  return out;
})()`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Every other setting is read when the server starts, from " + envFileWords + ": one line each, such as NAH_QUOTA_BYTES=5GiB. To change one, edit or add its line there, then restart the server (systemctl restart nah).",
		"Who can join: Whether a person needs a join code to make an account, and how many accounts one address may make.",
		"Moments, photos and storage: How large one moment or upload may be, how much each person may keep, and how long a deletion can be undone.",
		"Memory and speed: For whoever runs the machine: the defaults suit a small home server.",
		"Files and logs: Where the server keeps its data, and what it tells the operator.",
		"Storage per person Moments, photos and videos together; an upload past it is refused. 5GiB (set in the environment) NAH_QUOTA_BYTES",
	}
	if !slices.Equal(got, want) {
		t.Errorf("the Settings page on a phone shows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// TestConsoleRestoreLocalTimeInBrowser: in a browser in Auckland (13 hours
// ahead of UTC in December, 12 in June), the restore time is typed in
// Auckland's time under a label naming it, sent with its offset, confirmed
// in Auckland's time, and restores to that instant; read as UTC it would
// be hours in the future, and refused.
func TestConsoleRestoreLocalTimeInBrowser(t *testing.T) {
	ctx, consoleErrors := startBrowser(t)
	rs := newReplicatedServer(t)
	mustAdmin(t, rs.store, "root", "admin-password")
	ann := rs.signup(t, "ann")
	early, at := rs.postAroundTime(t, ann, 3)
	rs.post(t, ann, []byte("late"))
	mustSync(t, rs.backups)
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
	browserSignIn(t, ctx, rs.URL)
	must("ann's page", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console/people/"+ann.id)))
	browserWait(t, ctx, "ann's page", `document.querySelector("#restore-at") !== null`)
	_, off := at.In(auckland).Zone()
	gmt := fmt.Sprintf("GMT+%d", off/3600) // +13, or +12 in the southern winter
	label, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('label[for="restore-at"]').innerText`))
	must("label", err)
	if want := "As it was at (your time: Pacific/Auckland, " + gmt + ")"; label != want {
		t.Errorf("the restore time's label is %q, want %q", label, want)
	}
	must("choose the time", chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#restore-at"), at.In(auckland).Format("2006-01-02T15:04:05")),
		chromedp.Click(chromedp.CSS("#restore-person button"))))
	browserWait(t, ctx, "confirmation", `document.querySelector("#restore-confirm") !== null`)
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[new URL(location.href).searchParams.get("at"), document.querySelector('form input[name="at"]').value, document.querySelector("#restore-when").innerText]`))
	must("confirmation", err)
	sent, want := got[0], at.In(auckland).Format(time.RFC3339)
	if sent != want || got[1] != at.UTC().Format(time.RFC3339) {
		t.Errorf("the browser sent %q (confirmed as %q), want %q, the instant %s", sent, got[1], want, at.UTC().Format(time.RFC3339))
	}
	if wantShown := at.In(auckland).Format("2006-01-02 15:04:05") + " " + gmt; got[2] != wantShown {
		t.Errorf("the confirmation says the time is %q, want %q (Auckland)", got[2], wantShown)
	}
	must("confirm", chromedp.Do(ctx, chromedp.Click(chromedp.ID("restore-confirm"))))
	browserWait(t, ctx, "restored", `document.querySelector("#restore-result") !== null`)
	if got := momentIDs(t, rs.store, ann.id); !slices.Equal(got, early) {
		t.Errorf("ann after the restore: %v, want %v", got, early)
	}
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}
