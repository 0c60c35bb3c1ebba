package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// screens saves the page as it is now, on a desktop and on a 390 px
// phone, into $UI_ARTIFACT_DIR as desktop-name.png and phone-name.png
// (nothing without it), and leaves the browser at the desktop's size.
func screens(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("UI_ARTIFACT_DIR")
	if dir == "" {
		return
	}
	for _, size := range consoleSizes {
		var png []byte
		err := chromedp.Do(ctx, emulate(size))
		if err == nil {
			png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
		}
		if err == nil {
			err = os.MkdirAll(dir, 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, size.name+"-"+name+".png"), png, 0o644)
		}
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
	}
	if err := chromedp.Do(ctx, emulate(consoleSizes[0])); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
}

// TestDrillResultInBrowser: "Run a drill now" on the Backups page, and the
// drill's result appears in its section when it ends, with no reload. The
// drill restores and compares 41 files (40 people and the directory), a
// few seconds, so that the page is shown while it runs.
func TestDrillResultInBrowser(t *testing.T) {
	rs := newReplicatedServer(t)
	runDrill(t, rs)
	for i := range 40 {
		a := rs.signup(t, fmt.Sprintf("person%02d", i))
		rs.post(t, a, []byte("hello from "+a.handle))
	}
	mustSync(t, rs.backups)
	mustAdmin(t, rs.store, "root", "admin-password")

	ctx, consoleErrors := startBrowser(t)
	browserSignIn(t, ctx, rs.URL)
	if err := chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console/backups")); err != nil {
		t.Fatal(err)
	}
	browserWait(t, ctx, "backups", `document.querySelector("#drill-status") !== null && document.querySelector("#drill-status").innerText === "No restore drill yet."`)
	// A mark that a reload would wipe.
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`), chromedp.Click(chromedp.CSS("#drill-now"))); err != nil {
		t.Fatal(err)
	}
	browserWait(t, ctx, "running", `document.querySelector("#drill-now").disabled && document.querySelector("#drill-status").innerText !== "No restore drill yet."`)
	screens(t, ctx, "drill-running")
	browserWait(t, ctx, "result", `/^Last drill \d+ seconds? ago: 40 of 40 people restored and equal/.test(document.querySelector("#drill-status").innerText) && !document.querySelector("#drill-now").disabled && window.notReloaded === true`)
	screens(t, ctx, "drill-result")
	for _, e := range consoleErrors() {
		if !strings.Contains(e, "favicon") {
			t.Errorf("browser console error: %s", e)
		}
	}
}
