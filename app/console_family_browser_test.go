package app

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
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
	ts.app.cfg.Settings = append(ts.app.cfg.Settings, Setting{"NAH_QUOTA_BYTES", "5GiB", "the environment"}, Setting{"NAH_DELETE_GRACE", "168h0m0s", "the default"})
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
  out.push(shown(document.querySelector('[data-setting="NAH_DELETE_GRACE"] td[data-label="Now"]')));
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
		"7 days (the default)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("the Settings page on a phone shows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// On the phone the navigation is one row, and nothing scrolls the
	// page sideways; the first Tab reaches the skip link, which takes the
	// focus past the navigation to the page.
	nav, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
  const h = document.querySelector("header").getBoundingClientRect().height;
  return h / innerHeight < 0.12 && document.documentElement.scrollWidth <= innerWidth ? "" : "the header is " + h + " px of " + innerHeight + ", the page " + document.documentElement.scrollWidth + " px wide";
})()`))
	if err != nil || nav != "" {
		t.Errorf("the navigation on a phone: %s %v", nav, err)
	}
	if err := chromedp.Do(ctx, chromedp.KeyEvent("\t")); err != nil {
		t.Fatal(err)
	}
	browserWait(t, ctx, "skip link", `document.activeElement.matches("a.skip[href='#main']") && document.activeElement.getBoundingClientRect().left >= 0`)
	if err := chromedp.Do(ctx, chromedp.KeyEvent("\r")); err != nil {
		t.Fatal(err)
	}
	browserWait(t, ctx, "past the navigation", `document.activeElement === document.querySelector("main")`)
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
	setRestoreTime(t, ctx, at.In(auckland).Format("2006-01-02T15:04:05"))
	must("restore", chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#restore-person button"))))
	browserWait(t, ctx, "confirmation", `document.querySelector("#restore-confirm") !== null`)
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[new URL(location.href).searchParams.get("at"), document.querySelector("#restore-when time").dateTime, document.querySelector("#restore-when").innerText]`))
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

// TestConsoleImportInBrowser: Import, with the upload slowed to a home
// connection's pace: at the click its button is disabled and the progress
// says what is happening; it moves, by how much of the file has gone,
// without a reload; a second click sends nothing; the person is imported
// once, and a reload then shows the People page, not the POST's address.
func TestConsoleImportInBrowser(t *testing.T) {
	old := newTestServer(t)
	ann := old.signup(t, "ann")
	for i := range 20 {
		old.post(t, ann, []byte(strings.Repeat("moment ", i+1)))
	}
	res, err := old.Client().Do(exportRequest(t, old, "GET", ann.token))
	if err != nil {
		t.Fatal(err)
	}
	tarball, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("export: %d %v", res.StatusCode, err)
	}
	file := filepath.Join(t.TempDir(), "ann.tar")
	if err := os.WriteFile(file, tarball, 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, consoleErrors := startBrowser(t)
	ts := newTestServer(t)
	mustAdmin(t, ts.store, "root", "admin-password")
	must := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	browserSignIn(t, ctx, ts.URL)
	must("people", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`a[href="/console/people"]`))))
	browserWait(t, ctx, "people", `location.pathname === "/console/people"`)
	must("choose the export", chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`details:has(#import-person) > summary`)),
		chromedp.SetUploadFiles(chromedp.CSS("#import-file"), []string{file})))
	// The whole file in about 4 s.
	rate := float64(len(tarball)) / 4
	must("slow upload", chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{
			MatchedNetworkConditions: []*network.Conditions{{UploadThroughput: rate, DownloadThroughput: -1}},
		})
		return err
	})))
	// Every text the progress shows, as it changes.
	busy, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
  const b = document.querySelector("#import"), p = document.querySelector("#import-progress");
  window.progress = [];
  new MutationObserver(() => window.progress.push(p.innerText)).observe(p, {childList: true, characterData: true, subtree: true});
  b.click();
  return b.disabled + " " + (p.checkVisibility() ? p.innerText : "(no progress shown)");
})()`))
	must("import", err)
	if busy != "true Sending the export…" {
		t.Errorf("Import at the click: disabled and progress = %q", busy)
	}
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`window.progress.length > 0`, chromedp.WithPollingTimeout(10*time.Second)))
	must("progress moves", err)
	must("click again", chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`document.querySelector("#import").click()`)))
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector("#secret") !== null`, chromedp.WithPollingTimeout(20*time.Second)))
	must("imported", err)
	browserWait(t, ctx, "imported", `document.querySelector("h1").innerText === "Import a person" && document.querySelector("#secret") !== null`)
	progress, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.progress`))
	must("progress", err)
	partway := regexp.MustCompile(`^Sending the export: \d+ KiB of \d+ KiB \(([1-9]|[1-9]\d)%\)\.$`)
	if !slices.ContainsFunc(progress, partway.MatchString) || progress[len(progress)-1] != "The export is sent: the server checks it and copies their moments and photos…" {
		t.Errorf("the progress showed %q: want how far the upload is, then that the server is at work", progress)
	}
	must("fast again", chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{MatchedNetworkConditions: []*network.Conditions{}})
		return err
	})))
	if _, n, err := ts.store.ListPeople(context.Background(), "", 0, 10); err != nil || n != 1 {
		t.Errorf("after a second click, %d people imported (%v), want 1", n, err)
	}
	must("reload", chromedp.Do(ctx, chromedp.Reload()))
	browserWait(t, ctx, "after the reload", `document.contentType === "text/html" && location.pathname === "/console/people" && document.querySelector("h1").innerText === "People"`)

	// A file that is no export: refused on screen, with the focus on it.
	bad := filepath.Join(t.TempDir(), "photo.tar")
	must("not an export", os.WriteFile(bad, []byte("a photo, not an export"), 0o600))
	must("import it", chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`details:has(#import-person) > summary`)),
		chromedp.SetUploadFiles(chromedp.CSS("#import-file"), []string{bad}),
		chromedp.Click(chromedp.CSS("#import"))))
	browserWait(t, ctx, "refused", seen("#error", "not a usable nah export"))
	// Chromium logs the refusal's 400 as an error; any other fails.
	for _, e := range consoleErrors() {
		if !strings.Contains(e, "the server responded with a status of 400") {
			t.Errorf("browser console error: %s", e)
		}
	}
}

// TestConsoleRestoreOnceInBrowser: a restore of a person to a time, clicked
// twice: at the first click its button is disabled and the progress says
// what is happening, so the second sends nothing. The result is a page of
// its own: a reload shows it again and restores nothing, and the
// confirmation sent again (another tab, a resent form) is refused. A
// second restore while the first can be undone says so and keeps the file
// the first replaced: the undo brings back all four of ann's moments of
// before the first, not what the second replaced.
func TestConsoleRestoreOnceInBrowser(t *testing.T) {
	ctx, consoleErrors := startBrowser(t)
	rs := newReplicatedServer(t)
	mustAdmin(t, rs.store, "root", "admin-password")
	ann := rs.signup(t, "ann")
	_, at := rs.postAroundTime(t, ann, 3)
	rs.post(t, ann, []byte("late"))
	mustSync(t, rs.backups)
	all := momentIDs(t, rs.store, ann.id)
	must := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	browserSignIn(t, ctx, rs.URL)
	confirm := "/console/backups/restore?" + url.Values{"person": {ann.id}, "at": {at.UTC().Format(time.RFC3339)}}.Encode()
	must("confirmation", chromedp.Do(ctx, chromedp.Navigate(rs.URL+confirm)))
	browserWait(t, ctx, "confirmation", `document.querySelector("#restore-confirm") !== null`)
	says, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#restore-way-back").innerText + " | " + document.querySelector("#restore-reach").innerText`))
	must("confirmation", err)
	if want := "The file it replaces is kept for 7 days (NAH_DELETE_GRACE): until then, ann's page can undo this restore. | "; !strings.HasPrefix(says, want) || !strings.Contains(says, "reaches back to") {
		t.Errorf("the confirmation says %q, want it to start %q", says, want)
	}
	busy, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
  const b = document.querySelector("#restore-confirm");
  window.sentAgain = new URLSearchParams(new FormData(b.form)); // kept on window across the boosted swap
  b.click();
  const p = b.form.querySelector(".htmx-indicator");
  const shown = b.disabled + " " + (p !== null && p.checkVisibility() ? p.innerText : "(no progress shown)");
  b.click();
  return shown;
})()`))
	must("restore", err)
	if want := "true Fetching ann's file from the replica, checking it, putting it in place: this takes up to 5 minutes."; busy != want {
		t.Errorf("the restore at the click: %q, want %q", busy, want)
	}
	browserWait(t, ctx, "restored", `document.querySelector("#restore-result") !== null`)
	if n := len(momentIDs(t, rs.store, ann.id)); n != 3 {
		t.Fatalf("ann has %d moments after the restore, want 3", n)
	}
	again, err := chromedp.Run(ctx, chromedp.Evaluate[string](`fetch("/console/backups/restore", {method: "POST", body: window.sentAgain}).then(async (r) => r.status + " " + await r.text())`,
		chromedp.EvalAwaitPromise))
	must("the confirmation sent again", err)
	if !strings.HasPrefix(again, "409 ") || !strings.Contains(again, "This confirmation was already used once") {
		t.Errorf("the confirmation sent again: %.300s", again)
	}
	must("reload", chromedp.Do(ctx, chromedp.Reload()))
	browserWait(t, ctx, "after the reload", `document.contentType === "text/html" && location.pathname.startsWith("/console/backups/restore/") && document.querySelector("#restore-result") !== null && document.querySelector("#restore-confirm") === null`)
	late := rs.post(t, ann, []byte("after the first restore"))
	if got := momentIDs(t, rs.store, ann.id); len(got) != 4 || !slices.Contains(got, late) {
		t.Fatalf("ann after the reload and a post: %v, want her 3 and %s: the restore ran again", got, late)
	}

	must("second confirmation", chromedp.Do(ctx, chromedp.Navigate(rs.URL+confirm)))
	browserWait(t, ctx, "second confirmation", `document.querySelector("#restore-confirm") !== null && document.querySelector("#restore-way-back").innerText.includes("An earlier restore of ann")`)
	must("second restore", chromedp.Do(ctx, chromedp.Click(chromedp.ID("restore-confirm"))))
	browserWait(t, ctx, "restored again", `document.querySelector("#restore-result") !== null`)
	if n := len(momentIDs(t, rs.store, ann.id)); n != 3 {
		t.Fatalf("ann has %d moments after the second restore, want 3", n)
	}

	c := signedInAdminOn(t, rs.testServer)
	if p := postForm(t, c, rs.URL+"/console/people/"+ann.id+"/undo-restore", nil); p.status != 303 {
		t.Fatalf("undo: %d\n%s", p.status, p.body)
	}
	if got := momentIDs(t, rs.store, ann.id); !slices.Equal(got, all) {
		t.Errorf("after the undo ann has %v, want all of %v, as before the first restore", got, all)
	}
	for _, e := range consoleErrors() {
		if !strings.Contains(e, "the server responded with a status of 409") { // the refusal sent again
			t.Errorf("browser console error: %s", e)
		}
	}
}
