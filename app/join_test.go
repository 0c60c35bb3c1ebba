package app

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"rsc.io/qr"
)

// qrModules reads the dark modules back from a QR code that ui.QRSVG drew
// (one "M x y h1v1h-1z" square each, inside a quiet zone of 4), and its
// size in modules.
func qrModules(t *testing.T, svg string) (size int, dark map[[2]int]bool) {
	t.Helper()
	vb := regexp.MustCompile(`viewBox="0 0 (\d+) (\d+)"`).FindStringSubmatch(svg)
	if vb == nil {
		t.Fatalf("no QR code's viewBox in %.200q", svg)
	}
	n, _ := strconv.Atoi(vb[1])
	dark = map[[2]int]bool{}
	for _, m := range regexp.MustCompile(`M(\d+) (\d+)h1v1h-1z`).FindAllStringSubmatch(svg, -1) {
		x, _ := strconv.Atoi(m[1])
		y, _ := strconv.Atoi(m[2])
		dark[[2]int{x - 4, y - 4}] = true
	}
	return n - 8, dark
}

// qrHolds reports whether the QR code drawn in svg is text's: the same
// modules as text encoded (error correction M, as ui.QRSVG encodes). An
// encoding picks its version, mask and error correction from the text
// alone, so the modules of a different text differ.
func qrHolds(t *testing.T, svg, text string) bool {
	t.Helper()
	want, err := qr.Encode(text, qr.M)
	if err != nil {
		t.Fatal(err)
	}
	size, dark := qrModules(t, svg)
	if size != want.Size {
		return false
	}
	n := 0
	for y := range size {
		for x := range size {
			if want.Black(x, y) != dark[[2]int{x, y}] {
				return false
			}
			if dark[[2]int{x, y}] {
				n++
			}
		}
	}
	return n == len(dark)
}

// TestJoinLinkInBrowser: a join code made in the console is handed over
// as its link, <server>/join/<code>: the QR code holds that link (read
// back from the drawn SVG), the copy button copies it, the server's
// loopback address is warned of, and the link opened in a browser shows
// the code and the server's address. A path with no code's shape is 404.
func TestJoinLinkInBrowser(t *testing.T) {
	ts := newTestServer(t)
	mustAdmin(t, ts.store, "root", "admin-password")
	ctx, consoleErrors := startBrowser(t)
	browserSignIn(t, ctx, ts.URL)
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/console/joincodes"), chromedp.Click(chromedp.CSS(`form[action="/console/joincodes"] button`))); err != nil {
		t.Fatal(err)
	}
	browserWait(t, ctx, "join code", `document.querySelector("#secret") !== null`)
	var got struct {
		Code, Link, QR, Copies, Warning string
	}
	v, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`({
  code: document.querySelector("#secret").innerText,
  link: document.querySelector("#secret-link").innerText,
  qr: document.querySelector("#qr").outerHTML,
  copies: document.querySelector("button.copy").dataset.copy,
  warning: document.querySelector("#secret-warning") ? document.querySelector("#secret-warning").innerText : "",
})`))
	if err != nil {
		t.Fatal(err)
	}
	got.Code, got.Link, got.QR, got.Copies, got.Warning = v["code"], v["link"], v["qr"], v["copies"], v["warning"]
	want := ts.URL + "/join/" + got.Code
	if len(got.Code) != joinCodeLen || got.Link != want || got.Copies != "secret-link" {
		t.Errorf("code %q, link %q, copy button copies #%s: want the link %s", got.Code, got.Link, got.Copies, want)
	}
	if !qrHolds(t, got.QR, want) {
		t.Errorf("the QR code does not hold %s (holds the code alone: %v)", want, qrHolds(t, got.QR, got.Code))
	}
	if !strings.HasPrefix(got.Warning, "This link starts with "+ts.URL+", an address only this machine reaches") {
		t.Errorf("no warning that the link's loopback address reaches no phone: %q", got.Warning)
	}
	screens(t, ctx, "join-code")

	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#secret-link"))); err != nil {
		t.Fatal(err)
	}
	browserWait(t, ctx, "join page", `location.href === `+strconv.Quote(want)+` && document.querySelector("#join-code") !== null`)
	page, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[document.querySelector("#join-code").innerText, document.querySelector("#join-server").innerText, document.querySelector("main").innerText]`))
	if err != nil {
		t.Fatal(err)
	}
	if page[0] != got.Code || page[1] != ts.URL || !strings.Contains(page[2], "Open the nah app") {
		t.Errorf("the join page shows code %q, server %q:\n%s", page[0], page[1], page[2])
	}
	screens(t, ctx, "join-page")
	for _, e := range consoleErrors() {
		t.Errorf("browser console error: %s", e)
	}

	for _, bad := range []string{"short", strings.Repeat("i", joinCodeLen), strings.Repeat("a", joinCodeLen+1), "%3Cscript%3Eaaaaaaaaaa"} {
		if p := get(t, consoleClient(t), ts.URL+"/join/"+bad); p.status != 404 || strings.Contains(p.body, "<script>") {
			t.Errorf("/join/%s: %d", bad, p.status)
		}
	}
}

// TestJoinLinkPrivateAddress: a join link built from a private listen
// address (no NAH_PUBLIC_URL) carries the warning that phones away from
// that network cannot open it; a configured private address does not.
func TestJoinLinkPrivateAddress(t *testing.T) {
	for _, guessed := range []bool{true, false} {
		ts := newTestServer(t, func(c *serverConfig) { c.PublicURL, c.PublicURLFromListen = "http://192.168.1.20:8090", guessed })
		c := signedInAdmin(t, ts)
		p := postForm(t, c, ts.URL+"/console/joincodes", url.Values{"ttl": {"24h"}})
		warned := strings.Contains(p.body, `id="secret-warning"`) && strings.Contains(p.body, "only phones on this network reach")
		if p.status != 201 || !strings.Contains(p.body, "http://192.168.1.20:8090/join/") || warned != guessed {
			t.Errorf("listen address guessed %v: %d, warned %v\n%s", guessed, p.status, warned, p.body)
		}
	}
}
