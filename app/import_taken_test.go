package app

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/nah-app/nah/store"
)

// exportOf is ann's export from a server of its own, with n moments.
func exportOf(t *testing.T, n int) []byte {
	t.Helper()
	old := newTestServer(t)
	ann := old.signup(t, "ann")
	for i := range n {
		old.post(t, ann, []byte(strings.Repeat("moment ", i+1)))
	}
	res, err := old.Client().Do(exportRequest(t, old, "GET", ann.token))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	tarball, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("export: %d %v", res.StatusCode, err)
	}
	return tarball
}

// heldFiles are the exports the server keeps for the import form.
func heldFiles(t *testing.T, ts *testServer) []string {
	t.Helper()
	held, _ := filepath.Glob(filepath.Join(ts.dir, "import-held", "*"))
	return held
}

// TestImportTakenHandleInBrowser: an import whose handle is taken here is
// no dead end: the form comes back with the export kept on the server
// (no file to choose again), a free handle filled in, and words that name
// no command-line option; a new handle typed there imports the person
// with every moment, with no second upload, and the kept file is gone.
func TestImportTakenHandleInBrowser(t *testing.T) {
	tarball := exportOf(t, 12)
	file := filepath.Join(t.TempDir(), "ann.tar")
	if err := os.WriteFile(file, tarball, 0o600); err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t)
	ts.signup(t, "ann")
	mustAdmin(t, ts.store, "root", "admin-password")
	ctx, consoleErrors := startBrowser(t)
	browserSignIn(t, ctx, ts.URL)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(ts.URL+"/console/people"),
		chromedp.Click(chromedp.CSS(`details:has(#import-person) > summary`)),
		chromedp.SetUploadFiles(chromedp.CSS("#import-file"), []string{file}),
		chromedp.Click(chromedp.CSS("#import"))); err != nil {
		t.Fatal(err)
	}
	browserWait(t, ctx, "handle taken", seen("#import-error", `the handle "ann" is taken on this server`))
	form, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[
  document.querySelector("#import-handle").value,
  document.querySelector("#import-kept") && document.querySelector("#import-kept").checkVisibility() ? document.querySelector("#import-kept").innerText : "",
  document.querySelector("#import-file") === null ? "" : "a file to choose",
  document.querySelector("#import-person").innerText,
]`))
	if err != nil {
		t.Fatal(err)
	}
	if form[0] != "ann2" || !strings.Contains(form[1], "kept") || form[2] != "" {
		t.Errorf("the form again: handle %q, kept %q, %q", form[0], form[1], form[2])
	}
	if regexp.MustCompile(`-handle|option|command`).MatchString(form[3]) {
		t.Errorf("the form names a command-line option:\n%s", form[3])
	}
	if held := heldFiles(t, ts); len(held) != 1 {
		t.Errorf("held: %v, want the export", held)
	}
	screens(t, ctx, "import-taken")

	if err := chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#import-handle").value = ""`),
		chromedp.SendKeys(chromedp.CSS("#import-handle"), "ann.moved"),
		chromedp.Click(chromedp.CSS("#import"))); err != nil {
		t.Fatal(err)
	}
	browserWait(t, ctx, "imported", `document.querySelector("#secret") !== null && document.querySelector("main").innerText.includes("Imported ann.moved with 12 moments")`)
	p, _, err := ts.store.FindPersonByHandle(context.Background(), "ann.moved")
	if err != nil {
		t.Fatal(err)
	}
	if ms, err := ts.store.Moments(context.Background(), p.ID, nil, 100, nil); err != nil || len(ms) != 12 {
		t.Errorf("ann.moved has %d moments (%v), want 12", len(ms), err)
	}
	if held := heldFiles(t, ts); len(held) != 0 {
		t.Errorf("still held after the import: %v", held)
	}
	for _, e := range consoleErrors() {
		if !strings.Contains(e, "the server responded with a status of 409") {
			t.Errorf("browser console error: %s", e)
		}
	}
}

// TestImportHeldBounds: the exports kept for the form are bounded: at most
// store.MaxHeldImports (a fifth taken import drops the oldest), each an
// hour (an older ticket is refused, asking for the file again, and its
// file is gone), and each ticket works once (a handle taken again gives a
// new one, and the old one is refused; so is a ticket whose import is
// done); a new handle that is no handle keeps the ticket.
func TestImportHeldBounds(t *testing.T) {
	tarball := exportOf(t, 3)
	ts := newTestServer(t)
	ts.signup(t, "ann")
	c := signedInAdmin(t, ts)
	ticketRE := regexp.MustCompile(`name="ticket" value="([0-9a-f]+)"`)
	var tickets []string
	for range store.MaxHeldImports + 1 {
		p := postImport(t, c, ts, "", tarball)
		m := ticketRE.FindStringSubmatch(p.body)
		if p.status != 409 || m == nil {
			t.Fatalf("taken: %d\n%s", p.status, p.body)
		}
		tickets = append(tickets, m[1])
		ts.clock.Advance(1)
	}
	if held := heldFiles(t, ts); len(held) != store.MaxHeldImports {
		t.Errorf("%d held after %d taken imports, want %d", len(held), len(tickets), store.MaxHeldImports)
	}
	if p := postTicket(t, c, ts, tickets[0], "ann.first"); p.status != 404 || !strings.Contains(p.body, "choose the export file again") || !strings.Contains(p.body, `id="import-file"`) {
		t.Errorf("the oldest ticket, dropped: %d\n%s", p.status, p.body)
	}
	if p := postTicket(t, c, ts, tickets[1], "no"); p.status != 400 || !strings.Contains(p.body, `value="`+tickets[1]+`"`) {
		t.Errorf("a handle too short: %d, want the same ticket kept\n%s", p.status, p.body)
	}
	p := postTicket(t, c, ts, tickets[1], "ann")
	next := ticketRE.FindStringSubmatch(p.body)
	if p.status != 409 || next == nil || next[1] == tickets[1] {
		t.Fatalf("a handle taken again: %d, ticket %v, want a new one\n%s", p.status, next, p.body)
	}
	if p := postTicket(t, c, ts, tickets[1], "ann.second"); p.status != 404 {
		t.Errorf("the used ticket again: %d, want it refused", p.status)
	}
	if p := postTicket(t, c, ts, next[1], "ann.second"); p.status != 201 {
		t.Errorf("import under ann.second: %d\n%s", p.status, p.body)
	}
	if p := postTicket(t, c, ts, next[1], "ann.again"); p.status != 404 {
		t.Errorf("the ticket of a done import again: %d, want it refused", p.status)
	}
	ts.clock.Advance(store.HeldImportTTL)
	if p := postTicket(t, c, ts, tickets[2], "ann.late"); p.status != 404 {
		t.Errorf("a ticket an hour old: %d", p.status)
	}
	if held := heldFiles(t, ts); len(held) != 0 {
		t.Errorf("held after an hour: %v", held)
	}
}

// postTicket sends the import form that asks only for a new handle.
func postTicket(t *testing.T, c *http.Client, ts *testServer, ticket, handle string) htmlPage {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("ticket", ticket)
	mw.WriteField("handle", handle)
	mw.Close()
	req, _ := http.NewRequest("POST", ts.URL+"/console/people/import", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return send(t, c, req)
}
