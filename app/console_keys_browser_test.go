package app

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestConsoleKeysInBrowser: a client registered through the API shows on
// its person's console page with its key fingerprint and the key log's
// entry; its removal shows as the log's newest entry, with the new size.
func TestConsoleKeysInBrowser(t *testing.T) {
	ctx, consoleErrors := startBrowser(t)
	ts := newTestServer(t)
	mustAdmin(t, ts.store, "root", "admin-password")
	ann := ts.signup(t, "ann")
	c := ts.addClient(t, ann)
	sum := sha256.Sum256(c.pub())
	fp := hex.EncodeToString(sum[:])[:16]
	browserSignIn(t, ctx, ts.URL)
	keys := func(step string) string {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/console/people/"+ann.id)); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		browserWait(t, ctx, step, `document.querySelector("#keys-title") !== null`)
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
  const rows = [...document.querySelectorAll("#key-clients tbody tr, #key-log tbody tr")].filter((r) => r.checkVisibility());
  return [document.querySelector("#key-log-head").innerText, ...rows.map((r) => r.innerText)].join("\n").replace(/[ \t]+/g, " ");
})()`))
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return got
	}

	got := keys("ann's page with her client")
	for _, want := range []string{"Key log: 1 entry", "ann's phone", fp, "client_added " + c.id} {
		if !strings.Contains(got, want) {
			t.Errorf("ann's page with her client shows\n%s\nwant %q in it", got, want)
		}
	}
	if r := ts.do(t, "DELETE", "/api/v1/me/clients/"+c.id, ann.token, nil); r.status != 204 {
		t.Fatalf("remove the client: %d %s", r.status, r.raw)
	}
	got = keys("ann's page after the removal")
	lines := strings.Split(got, "\n")
	if !strings.HasPrefix(lines[0], "Key log: 2 entries") || len(lines) != 3 || !strings.HasPrefix(lines[1], "2 client_removed "+c.id) || strings.Contains(got, fp) {
		t.Errorf("ann's page after the removal shows\n%s\nwant 2 entries, client_removed newest, no client listed", got)
	}
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}
