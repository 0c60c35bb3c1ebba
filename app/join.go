package app

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah/ui"
)

// A join link, <public URL>/join/<code>, is what the console's QR code
// and copy button hand over with a join code: a phone app takes the
// server's address as everything before "/join/", and the code after it.
// A camera app opens the link in a browser, which gets a page saying what
// to do with it.

// joinCodeLen and joinCodeChars are a join code's shape (store/secrets.go:
// 16 characters of lowercase base32 without i, l, o, u); the page shows
// nothing else, and never says whether a code works.
const (
	joinCodeLen   = 16
	joinCodeChars = "0123456789abcdefghjkmnpqrstvwxyz"
)

// JoinLink is the link of a join code on the server at base.
func JoinLink(base, code string) string {
	return strings.TrimSuffix(base, "/") + "/join/" + code
}

// handleJoinPage answers a join link opened in a browser: the code and the
// server's address, and to open the nah app. A path that holds no code's
// shape is 404.
func (a *App) handleJoinPage(w http.ResponseWriter, r *http.Request) {
	code := chi.URLParam(r, "code")
	if len(code) != joinCodeLen || strings.Trim(code, joinCodeChars) != "" {
		w.Header().Set("Cache-Control", "no-store")
		a.render(w, r, http.StatusNotFound, ui.MessagePage(ui.Page{Title: "Join", Error: "This is not a join link: ask for a new one."}))
		return
	}
	a.render(w, r, http.StatusOK, ui.JoinPage(ui.Join{Page: ui.Page{Title: "Join the family on nah"}, Code: code, Server: a.cfg.PublicURL}))
}
