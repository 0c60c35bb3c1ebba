package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestRestoreProgressInBrowser: with JavaScript on, a restore of ann to a
// time and its undo say how far they are while they run ("Step 1 of 3:
// fetching ann's file from the replica and checking it"), their button
// disabled meanwhile, and the progress route answers nothing once done.
// Her file is ~58 MB (1,200 moments of 48 KiB), so the fetch lasts long
// enough to be seen.
func TestRestoreProgressInBrowser(t *testing.T) {
	ctx, consoleErrors := startBrowser(t)
	rs := newReplicatedServer(t)
	mustAdmin(t, rs.store, "root", "admin-password")
	ann := rs.signup(t, "ann")
	body := []byte(strings.Repeat("x", 48<<10))
	for range 1200 {
		if _, err := rs.store.CreateMoment(context.Background(), ann.id, body); err != nil {
			t.Fatal(err)
		}
	}
	mustSync(t, rs.backups)
	at := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(at.Add(300 * time.Millisecond)))
	rs.post(t, ann, []byte("late"))
	mustSync(t, rs.backups)

	must := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	// Every text the status shows, and whether the button was disabled
	// while it did, kept by the page as it changes.
	const watch = `(() => {
		window.seen = [];
		const out = document.querySelector("[data-progress-out]");
		const button = out.closest("form").querySelector("button");
		new MutationObserver(() => window.seen.push((button.disabled ? "disabled: " : "enabled: ") + out.textContent)).observe(out, {childList: true, characterData: true, subtree: true});
		return true;
	})()`
	seen := func() []string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.seen || []`))
		must("read what the page showed", err)
		return s
	}
	must("sign in", chromedp.Do(ctx,
		chromedp.Navigate(rs.URL+"/console/login"),
		chromedp.SendKeys(chromedp.CSS("#name"), "root"),
		chromedp.SendKeys(chromedp.CSS("#password"), "admin-password"),
		chromedp.Click(chromedp.CSS("button[type=submit]"))))
	browserWait(t, ctx, "overview", `location.pathname === "/console"`)

	must("the restore's confirmation", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console/backups/restore?person="+ann.id+"&at="+at.UTC().Format(time.RFC3339))))
	browserWait(t, ctx, "confirmation", `document.querySelector("#restore-confirm") !== null`)
	_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](watch))
	must("watch the status", err)
	must("confirm", chromedp.Do(ctx, chromedp.Click(chromedp.ID("restore-confirm"))))
	browserWait(t, ctx, "restored", `document.querySelector("#restore-undo") !== null`)
	restore := seen()
	t.Logf("the restore showed: %q", restore)
	if !showed(restore, "disabled: Step 1 of 3: fetching ann's file from the replica and checking it") {
		t.Errorf("the restore never showed its first step with its button disabled: %q", restore)
	}
	if n := moments(t, rs, ann); n != 1200 {
		t.Errorf("ann after the restore: %d moments, want 1200", n)
	}

	must("the undo's confirmation", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console/people/"+ann.id+"/undo-restore")))
	browserWait(t, ctx, "undo's confirmation", `document.querySelector("#undo-confirm") !== null`)
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](watch))
	must("watch the status", err)
	must("confirm the undo", chromedp.Do(ctx, chromedp.Click(chromedp.ID("undo-confirm"))))
	browserWait(t, ctx, "undone", `document.body.innerText.includes("The restore is undone")`)
	undo := seen()
	t.Logf("the undo showed: %q", undo)
	if !showed(undo, "disabled: Step 1 of 2: ") && !showed(undo, "disabled: Step 2 of 2: ") {
		t.Errorf("the undo never showed a step with its button disabled: %q", undo)
	}
	if n := moments(t, rs, ann); n != 1201 {
		t.Errorf("ann after the undo: %d moments, want 1201", n)
	}

	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](`(() => { const x = new XMLHttpRequest(); x.open("GET", "/console/people/`+ann.id+`/restore-progress", false); x.send(); return x.status; })()`))
	must("progress once done", err)
	if status != 204 {
		t.Errorf("progress with nothing running: %d, want 204", status)
	}
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}

func showed(seen []string, prefix string) bool {
	for _, s := range seen {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

func moments(t *testing.T, rs *replicatedServer, a account) int {
	t.Helper()
	n, err := rs.store.MomentCount(context.Background(), a.id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
