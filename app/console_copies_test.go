package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/nah-app/nah/store"
	"github.com/nah-app/nah/ui"
)

// TestNightlyCopiesListAndDownload: the Backups page lists the nightly
// copies on the target newest first, with their size and whether each is
// complete or cut short; a complete one downloads (the full backup's
// headers) as a data directory a store opens, with the people's moments
// and photos as the sweep copied them; a copy changed on the target since
// breaks the download instead of giving a whole-looking archive; a cut
// short or unknown copy is a page, not a download.
func TestNightlyCopiesListAndDownload(t *testing.T) {
	rs := newReplicatedServer(t)
	ctx := context.Background()
	ann := rs.signup(t, "ann")
	rs.post(t, ann, []byte("one"))
	rs.post(t, ann, []byte("two"))
	photo := bytes.Repeat([]byte("a photo "), 1024)
	media := rs.testServer.mustUpload(t, ann, photo)
	first, err := rs.backups.Sweep.Run(ctx, time.Now().Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	rs.post(t, ann, []byte("three"))
	second, err := rs.backups.Sweep.Run(ctx, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// What a sweep stopped by a shutdown leaves: copies without a manifest.
	cut := time.Now().Add(-30 * time.Minute).UTC().Format("20060102T150405Z")
	cutFile := filepath.Join(rs.replicaDir, "sweeps", cut, "directory.db")
	if err := os.MkdirAll(filepath.Dir(cutFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cutFile, bytes.Repeat([]byte{1}, 3000), 0o600); err != nil {
		t.Fatal(err)
	}

	c := signedInAdmin(t, rs.testServer)
	p := get(t, c, rs.URL+"/console/backups")
	if p.status != 200 {
		t.Fatalf("backups: %d", p.status)
	}
	doc := parseConsole(t, p.body)
	rows := doc.find("data-testid", "copy")
	var got []string
	for _, r := range rows {
		stamp, _ := attr(r, "data-stamp")
		line := []string{stamp}
		for td := range r.ChildNodes() {
			line = append(line, text(td))
		}
		got = append(got, strings.Join(line, " | "))
	}
	when := func(t time.Time) string { return ui.When(t.UnixMilli()) }
	if len(rows) != 3 {
		t.Fatalf("listed %d copies, want 3: %q", len(rows), got)
	}
	cutStarted, _ := time.Parse("20060102T150405Z", cut)
	wantRows := []string{
		cut + " | " + when(cutStarted) + " | " + ui.Bytes(3000) + " | 1 | cut short: never used to restore | ",
		second.Stamp + " | " + when(second.Started) + " | " + ui.Bytes(second.Bytes) + " | " + strconv.Itoa(second.Files) + " | complete | Download",
		first.Stamp + " | " + when(first.Started) + " | " + ui.Bytes(first.Bytes) + " | " + strconv.Itoa(first.Files) + " | complete | Download",
	}
	if !slices.Equal(got, wantRows) {
		t.Fatalf("the copies listed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantRows, "\n"))
	}
	links := doc.find("data-testid", "copy-download")
	if len(links) != 2 {
		t.Fatalf("%d download links, want one for each complete copy", len(links))
	}
	href, _ := attr(links[1], "href")
	if href != "/console/backups/copies/"+first.Stamp {
		t.Fatalf("the first copy's link: %q", href)
	}

	// The older copy, downloaded, is ann as she was then: two moments and
	// her photo; the newer sweep's third moment is not in it.
	res, err := c.Get(rs.URL + href)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/gzip" || res.Header.Get("Cache-Control") != "no-store" ||
		res.Header.Get("Content-Disposition") != `attachment; filename="nah-copy-`+first.Stamp+`.tar.gz"` {
		t.Fatalf("download: %d %v", res.StatusCode, res.Header)
	}
	out := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	files := untarTo(t, res.Body, out)
	res.Body.Close()
	mediaRel := "people/" + ann.id + "/media/" + media.ID
	slices.Sort(files)
	if wantFiles := []string{"directory.db", "people/" + ann.id + "/media/" + media.ID, "people/" + ann.id + "/person.db"}; !slices.Equal(files, wantFiles) {
		t.Fatalf("the copy holds %v, want %v", files, wantFiles)
	}
	if b, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(mediaRel))); err != nil || !bytes.Equal(b, photo) {
		t.Fatalf("the photo in the copy: %d bytes, %v", len(b), err)
	}
	restored, err := store.Open(ctx, store.Config{Dir: out})
	if err != nil {
		t.Fatalf("the downloaded copy does not open: %v", err)
	}
	n, err := restored.MomentCount(ctx, ann.id)
	restored.Close()
	if err != nil || n != 2 {
		t.Fatalf("ann in the first copy: %d moments, %v; want 2", n, err)
	}
	if h := send(t, c, mustRequest(t, "HEAD", rs.URL+href)); h.status != 200 || h.header.Get("Content-Type") != "application/gzip" {
		t.Fatalf("HEAD: %d %v", h.status, h.header)
	}

	// Changed on the target since: the download breaks.
	onTarget := filepath.Join(rs.replicaDir, "sweeps", second.Stamp, "people", ann.id, "person.db")
	b, err := os.ReadFile(onTarget)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(onTarget, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// (The connection is cut: before the answer's first bytes left, or
	// in its body.)
	if res, err = c.Get(rs.URL + "/console/backups/copies/" + second.Stamp); err == nil {
		_, err = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err == nil {
			t.Fatalf("a copy changed on the target downloaded whole: %d", res.StatusCode)
		}
	}

	// A cut-short copy and an unknown one are pages that say so.
	for _, stamp := range []string{cut, "20200101T000000Z", "..%2f..%2fetc"} {
		p := get(t, c, rs.URL+"/console/backups/copies/"+stamp)
		msg := text(parseConsole(t, p.body).byID("error"))
		if p.status != http.StatusNotFound || !strings.HasPrefix(p.header.Get("Content-Type"), "text/html") || !strings.HasPrefix(msg, "There is no complete nightly copy") {
			t.Errorf("copy %s: %d %s %q", stamp, p.status, p.header.Get("Content-Type"), msg)
		}
	}
}

func mustRequest(t *testing.T, method, u string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestCopyNowInBrowser: with JavaScript on, "Make a copy now" disables
// its button and shows how far the copy has come, moving without a
// reload; a second ask while it runs says one is running and makes no
// second copy; the new copy then appears in the list, the button back.
// At a phone's width nothing scrolls sideways.
func TestCopyNowInBrowser(t *testing.T) {
	ctx, consoleErrors := startBrowser(t)
	rs := newReplicatedServer(t)
	mustAdmin(t, rs.store, "root", "admin-password")
	for _, h := range []string{"ann", "bea", "cai"} {
		rs.post(t, rs.signup(t, h), []byte("hello"))
	}
	rs.backups.Sweep.Pace = 700 * time.Millisecond // 4 databases: about 3 s
	bctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rs.backups.Run(bctx) }()
	t.Cleanup(func() { cancel(); <-done })

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
	browserWait(t, ctx, "no copy yet", `document.querySelector("#no-copies") !== null && !document.querySelector("#copy-now").disabled`)

	must("make a copy now", chromedp.Do(ctx, chromedp.Click(chromedp.ID("copy-now"))))
	browserWait(t, ctx, "copying", `(() => { const p = document.querySelector("#copy-progress");
  return p !== null && p.checkVisibility() && /^(A copy|Copying file)/.test(p.innerText) && document.querySelector("#copy-now").disabled })()`)
	first, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("copy-progress")))
	must("progress", err)
	browserWait(t, ctx, "the progress moves without a reload", fmt.Sprintf(`document.querySelector("#copy-progress") === null || document.querySelector("#copy-progress").innerText !== %q`, first))
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || !strings.Contains(loc, "/console/backups?m=copying") {
		t.Errorf("after Make a copy now the address is %q (%v)", loc, err)
	}
	w, err := chromedp.Run(ctx, chromedp.Evaluate[[]int64](`[document.documentElement.scrollWidth, window.innerWidth]`))
	must("widths", err)
	if w[0] != 390 || w[1] != 390 {
		t.Errorf("while copying, the page is %d px wide in a %d px window", w[0], w[1])
	}

	// A second ask, while the first runs: refused in words, no second copy.
	c := consoleClient(t)
	if p := postForm(t, c, rs.URL+"/console/login", url.Values{"name": {"root"}, "password": {"admin-password"}}); p.status != 303 {
		t.Fatalf("sign in: %d", p.status)
	}
	p := postForm(t, c, rs.URL+"/console/backups/copy", nil, "Origin", rs.URL)
	if _, running := rs.backups.Sweep.Progress(); !running {
		t.Fatal("the copy ended before the second ask: make it slower")
	}
	if p.status != 303 || p.header.Get("Location") != "/console/backups?m=copy-running#copies-title" {
		t.Fatalf("second ask: %d %s", p.status, p.header.Get("Location"))
	}
	if msg := text(parseConsole(t, get(t, c, rs.URL+"/console/backups?m=copy-running").body).find("role", "status")[0]); !strings.HasPrefix(msg, "A nightly copy is already being made") {
		t.Fatalf("second ask says %q", msg)
	}

	browserWait(t, ctx, "copy made", `document.querySelector("#copy-progress") === null && !document.querySelector("#copy-now").disabled &&
  document.querySelectorAll("[data-testid=copy]").length === 1 && document.querySelector("[data-testid=copy-state]").innerText === "complete"`)
	cs, err := rs.backups.Sweep.Copies(context.Background())
	if err != nil || len(cs) != 1 || !cs[0].Complete || cs[0].Files != 4 {
		t.Fatalf("copies on the target: %+v %v", cs, err)
	}
	w, err = chromedp.Run(ctx, chromedp.Evaluate[[]int64](`[document.documentElement.scrollWidth, window.innerWidth]`))
	must("widths", err)
	if w[0] != 390 || w[1] != 390 {
		t.Errorf("with the list of copies, the page is %d px wide in a %d px window", w[0], w[1])
	}
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}
