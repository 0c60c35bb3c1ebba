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

// TestConsoleRefusalTimesInBrowser: a refusal that names a time (a
// restore to a time in the future, one before the person joined) gives it in the
// browser's zone, here Auckland's, never as UTC text; without JavaScript
// the UTC text stays, inside a <time datetime> holding the instant.
func TestConsoleRefusalTimesInBrowser(t *testing.T) {
	ctx, consoleErrors := startBrowser(t)
	rs := newReplicatedServer(t)
	mustAdmin(t, rs.store, "root", "admin-password")
	ann := rs.signup(t, "ann")
	rs.post(t, ann, []byte("hello"))
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
	// shown is t as console.js writes it in Auckland: to the second, with
	// the zone's offset.
	shown := func(t time.Time) string {
		l := t.In(auckland)
		_, off := l.Zone()
		return fmt.Sprintf("%s GMT+%d", l.Format("2006-01-02 15:04:05"), off/3600) // +13, or +12 in the southern winter
	}

	// A time in the future, typed in the restore form in Auckland's time.
	future := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	must("ann's page", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console/people/"+ann.id)))
	browserWait(t, ctx, "ann's page", `document.querySelector("#restore-at") !== null`)
	_, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#restore-at").value = "`+future.In(auckland).Format("2006-01-02T15:04:05")+`"`))
	must("choose the time", err)
	must("restore", chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#restore-person button"))))
	browserWait(t, ctx, "in the future", seen("#error", "is in the future"))
	says, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("error")))
	must("refusal", err)
	if want := shown(future) + " is in the future: choose a past time"; says != want || strings.Contains(says, "UTC") {
		t.Errorf("the refusal says %q, want %q (Auckland)", says, want)
	}

	// A time before ann joined: refused before the confirmation.
	before := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	p, err := rs.store.FindPersonByID(context.Background(), ann.id)
	must("ann", err)
	joined := time.UnixMilli(p.CreatedAt)
	confirm := "/console/backups/restore?" + url.Values{"person": {ann.id}, "at": {before.Format(time.RFC3339)}}.Encode()
	must("confirmation", chromedp.Do(ctx, chromedp.Navigate(rs.URL+confirm)))
	browserWait(t, ctx, "before ann joined", seen("#error", "is before ann joined")+` && document.querySelector("#restore-confirm") === null`)
	says, err = chromedp.Run(ctx, chromedp.Text(chromedp.ID("error")))
	must("refusal", err)
	if want := shown(before) + " is before ann joined (" + shown(joined) + "): there is no file of theirs to restore; choose a time since then"; says != want {
		t.Errorf("the refusal says %q, want %q (Auckland)", says, want)
	}

	// Without JavaScript: the UTC text, in a <time> with the instant.
	c := consoleClient(t)
	if p := postForm(t, c, rs.URL+"/console/login", url.Values{"name": {"root"}, "password": {"admin-password"}}); p.status != 303 {
		t.Fatalf("sign in: %d", p.status)
	}
	page := get(t, c, rs.URL+confirm)
	if want := `<time datetime="2001-01-01T00:00:00Z" data-exact>2001-01-01 00:00:00 UTC</time> is before ann joined`; page.status != 400 || !strings.Contains(page.body, want) {
		t.Errorf("without JavaScript: %d, want %q in\n%s", page.status, want, page.body)
	}
	for _, e := range consoleErrors() {
		if !strings.Contains(e, "Failed to load resource: the server responded with a status of") { // the refusals' own
			t.Errorf("browser console error: %s", e)
		}
	}
}
