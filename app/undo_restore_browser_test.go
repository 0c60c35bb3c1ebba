package app

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestUndoRestoreInBrowser: with JavaScript on, ann is restored to a time
// from her page (her page then shows the moments of then), the restore is
// undone through its confirmation step (her page shows the moments of
// before), and a reload of the page the undo landed on is her page again.
func TestUndoRestoreInBrowser(t *testing.T) {
	ctx, consoleErrors := startBrowser(t)
	rs := newReplicatedServer(t)
	mustAdmin(t, rs.store, "root", "admin-password")
	ann := rs.signup(t, "ann")
	early, at := rs.postAroundTime(t, ann, 3)
	for range 2 {
		rs.post(t, ann, []byte("late"))
	}
	mustSync(t, rs.backups)
	before := momentIDs(t, rs.store, ann.id)
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
	page := "/console/people/" + ann.id
	moments := func(n int) string {
		return `location.pathname === "` + page + `" && document.querySelector("#moments") !== null && document.querySelector("#moments").innerText.trim() === "` + strconv.Itoa(n) + `"`
	}
	must("sign in", chromedp.Do(ctx,
		chromedp.Navigate(rs.URL+"/console/login"),
		chromedp.SendKeys(chromedp.CSS("#name"), "root"),
		chromedp.SendKeys(chromedp.CSS("#password"), "admin-password"),
		chromedp.Click(chromedp.CSS("button[type=submit]"))))
	waitFor("overview", `location.pathname === "/console"`)

	must("ann's page", chromedp.Do(ctx, chromedp.Navigate(rs.URL+page)))
	waitFor("ann's page", moments(len(before))+` && document.querySelector("#undo-restore") === null`)
	setRestoreTime(t, ctx, at.UTC().Format("2006-01-02T15:04:05"))
	must("restore", chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#restore-person button"))))
	waitFor("confirmation", `document.querySelector("#restore-confirm") !== null`)
	must("confirm", chromedp.Do(ctx, chromedp.Click(chromedp.ID("restore-confirm"))))
	waitFor("restored", `document.querySelector("#restore-undo") !== null`)
	must("back to ann's page", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#restore-undo a`))))
	waitFor("ann's page shows the moments of then", moments(len(early))+` && document.querySelector("#undo-restore") !== null`)
	if got := momentIDs(t, rs.store, ann.id); !slices.Equal(got, early) {
		t.Fatalf("ann after the restore: %v, want %v", got, early)
	}

	must("undo", chromedp.Do(ctx, chromedp.Click(chromedp.ID("undo-restore"))))
	waitFor("undo's confirmation", `document.querySelector("#undo-confirm") !== null`)
	problems, err := chromedp.Run(ctx, chromedp.Evaluate[string](a11y))
	must("accessibility", err)
	if problems != "" {
		t.Errorf("undo's confirmation: %s", problems)
	}
	if dir := os.Getenv("UI_ARTIFACT_DIR"); dir != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		must("screenshot", err)
		os.MkdirAll(dir, 0o755)
		must("screenshot", os.WriteFile(filepath.Join(dir, "undo-restore.png"), png, 0o644))
	}
	must("confirm the undo", chromedp.Do(ctx, chromedp.Click(chromedp.ID("undo-confirm"))))
	waitFor("ann's page shows the moments of before", moments(len(before))+` && document.body.innerText.includes("The restore is undone") && document.querySelector("#undo-restore") === null`)
	if got := momentIDs(t, rs.store, ann.id); !slices.Equal(got, before) {
		t.Errorf("ann after the undo: %v, want %v", got, before)
	}
	must("reload", chromedp.Do(ctx, chromedp.Reload()))
	waitFor("reload lands on ann's page", moments(len(before))+` && document.querySelector("h1") !== null`)
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}
