package app

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
)

// TestSyncNowInBrowser: while the target was away, twelve people posted
// (the watched set holds three, so most files were let go of behind);
// back, "Sync now" is a job: its button disabled, "n of m files sent"
// moving without a reload, a second ask answered in words and no second
// sync; after it the replica holds every acknowledged moment, of the
// files not watched too.
func TestSyncNowInBrowser(t *testing.T) {
	ctx, consoleErrors := startBrowser(t)
	rs := newReplicatedServer(t, func(c *serverConfig) { c.MaxWatched = 3 })
	mustAdmin(t, rs.store, "root", "admin-password")
	var people []account
	acked := map[string][]string{}
	for i := range 12 {
		a := rs.signup(t, fmt.Sprintf("p%02d", i))
		people = append(people, a)
		acked[a.id] = append(acked[a.id], rs.post(t, a, []byte("before")))
	}
	mustSync(t, rs.backups)

	rs.takeTargetAway(t)
	for _, a := range people {
		acked[a.id] = append(acked[a.id], rs.post(t, a, []byte("while the target is away")))
	}
	if err := os.Remove(rs.replicaDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(rs.replicaDir, 0o700); err != nil {
		t.Fatal(err)
	}
	notWatched := 0
	for _, f := range rs.backups.Repl.Status() {
		if !f.Watched && f.Behind() {
			notWatched++
		}
	}
	if notWatched < 6 {
		t.Fatalf("only %d files behind and not watched: the test needs the watched set smaller", notWatched)
	}
	rs.backups.SyncPace = 250 * time.Millisecond // ~14 files: about 3.5 s

	must := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	must("sign in", chromedp.Do(ctx, emulate(consoleSizes[1]),
		chromedp.Navigate(rs.URL+"/console/login"),
		chromedp.SendKeys(chromedp.CSS("#name"), "root"),
		chromedp.SendKeys(chromedp.CSS("#password"), "admin-password"),
		chromedp.Click(chromedp.CSS("button[type=submit]"))))
	browserWait(t, ctx, "overview", `location.pathname === "/console"`)
	must("backups", chromedp.Do(ctx, chromedp.Navigate(rs.URL+"/console/backups")))
	browserWait(t, ctx, "backups", `document.querySelector("#sync-now") !== null && !document.querySelector("#sync-now").disabled`)

	must("sync now", chromedp.Do(ctx, chromedp.Click(chromedp.ID("sync-now"))))
	browserWait(t, ctx, "syncing", `(() => { const p = document.querySelector("#sync-progress");
  return p !== null && p.checkVisibility() && / of \d+ files sent/.test(p.innerText) && document.querySelector("#sync-now").disabled })()`)
	first, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("sync-progress")))
	must("progress", err)
	browserWait(t, ctx, "the progress moves without a reload", fmt.Sprintf(`document.querySelector("#sync-progress") === null || document.querySelector("#sync-progress").innerText !== %q`, first))
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || !strings.Contains(loc, "/console/backups?m=syncing") {
		t.Errorf("after Sync now the address is %q (%v)", loc, err)
	}

	// A second ask, while the first runs: refused in words, no second sync.
	started, _ := rs.backups.SyncState()
	c := consoleClient(t)
	if p := postForm(t, c, rs.URL+"/console/login", url.Values{"name": {"root"}, "password": {"admin-password"}}); p.status != 303 {
		t.Fatalf("sign in: %d", p.status)
	}
	p := postForm(t, c, rs.URL+"/console/backups/sync", nil, "Origin", rs.URL)
	now, _ := rs.backups.SyncState()
	if !now.Running || !now.Started.Equal(started.Started) {
		t.Errorf("the sync ended before the second ask, or a second one started: %+v then %+v", started, now)
	} else if p.status != 303 || p.header.Get("Location") != "/console/backups?m=sync-running#health-title" {
		t.Errorf("second ask: %d %s", p.status, p.header.Get("Location"))
	} else if msg := text(parseConsole(t, get(t, c, rs.URL+"/console/backups?m=sync-running").body).find("role", "status")[0]); !strings.HasPrefix(msg, "A sync is already running") {
		t.Errorf("second ask says %q", msg)
	}

	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector("#sync-done") !== null && document.querySelector("#sync-done").checkVisibility() && !document.querySelector("#sync-now").disabled`, chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		st, _ := rs.backups.SyncState()
		html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#sync").outerHTML`))
		t.Fatalf("synced: %v; the sync: %+v; the page: %s", err, st, html)
	}
	done, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("sync-done")))
	must("synced", err)
	if !strings.HasPrefix(done, "Synced in ") || !strings.HasSuffix(done, "every file is on the target.") {
		t.Errorf("after the sync the page says %q", done)
	}
	if st, _ := rs.backups.SyncState(); st.Err != "" || st.Done != st.Total || st.Total < notWatched {
		t.Errorf("sync state: %+v (%d files were behind and not watched)", st, notWatched)
	}

	// The replica holds every acknowledged moment of every person.
	for _, a := range people {
		p := filepath.Join(t.TempDir(), "person.db")
		src, err := backup.RestoreFile(context.Background(), rs.backups.Repl.Target(), nah.PersonRel(a.id), p, time.Time{})
		if err != nil {
			t.Errorf("%s: restore from the replica: %v", a.handle, err)
			continue
		}
		got, err := store.ExportedMoments(context.Background(), p)
		must("read "+a.handle, err)
		for _, id := range acked[a.id] {
			if !slices.Contains(got, id) {
				t.Errorf("%s: the replica (from %s) lacks acknowledged moment %s; it holds %v", a.handle, src, id, got)
			}
		}
	}
	w, err := chromedp.Run(ctx, chromedp.Evaluate[[]int64](`[document.documentElement.scrollWidth, window.innerWidth]`))
	must("widths", err)
	if w[0] != 390 || w[1] != 390 {
		t.Errorf("after the sync, the page is %d px wide in a %d px window", w[0], w[1])
	}
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}
