package ui

import (
	"strconv"
	"strings"

	"rsc.io/qr"
)

// QRSVG is text as a QR code (error correction M), an inline SVG that the
// server draws: no script, no image request, nothing from elsewhere. A
// phone's camera reads a join code or a reset link from the screen. It is
// empty when text does not fit a QR code (ours are under 200 bytes).
func QRSVG(text string) string {
	c, err := qr.Encode(text, qr.M)
	if err != nil {
		return ""
	}
	// A quiet zone of 4 modules on each side, as the standard asks.
	const quiet = 4
	var b strings.Builder
	n := strconv.Itoa(c.Size + 2*quiet)
	b.WriteString(`<svg class="qr" id="qr" viewBox="0 0 ` + n + ` ` + n + `" role="img" aria-label="QR code of the value above" shape-rendering="crispEdges">`)
	b.WriteString(`<rect width="` + n + `" height="` + n + `" fill="#fff"></rect><path fill="#000" d="`)
	for y := range c.Size {
		for x := range c.Size {
			if c.Black(x, y) {
				b.WriteString("M" + strconv.Itoa(x+quiet) + " " + strconv.Itoa(y+quiet) + "h1v1h-1z")
			}
		}
	}
	b.WriteString(`"></path></svg>`)
	return b.String()
}
