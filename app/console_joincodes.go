package app

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/ui"
)

// Join codes: single-use sign-up codes for servers without open sign-up.
// A new code is shown once; the list shows only its hint.

func (a *App) joinCodesPage(w http.ResponseWriter, r *http.Request, status int, secret string, expires int64) {
	pg := page(r, "Join codes", "joincodes")
	cs, err := a.store.JoinCodes().List(r.Context(), 200)
	var open bool
	if err == nil {
		open, _, err = a.openSignup(r.Context())
	}
	if err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	v := ui.JoinCodes{Page: pg, OpenSignup: open}
	v.Flash = flashes[r.URL.Query().Get("m")]
	if secret != "" {
		v.Flash = "The new join code is shown once. Give it to the person who will sign up:"
		v.Secret = secret
		v.SecretLink = JoinLink(a.cfg.PublicURL, secret)
		v.SecretNote = "For the person who will sign up: in the app they choose Sign up and scan the QR code (it holds the link, with this server's address), or type this code. It works once, until " + ui.When(expires) + "."
		v.SecretWarning = a.linkWarning()
	}
	now := a.now().UnixMilli()
	for _, c := range cs {
		state := "unused"
		switch {
		case c.RevokedAt != 0:
			state = "revoked"
		case c.UsedAt != 0:
			state = "used"
		case c.ExpiresAt <= now:
			state = "expired"
		}
		v.Codes = append(v.Codes, ui.JoinCodeRow{ID: c.ID, Hint: c.Hint, CreatedAt: c.CreatedAt, ExpiresAt: c.ExpiresAt, UsedAt: c.UsedAt, RevokedAt: c.RevokedAt, UsedBy: c.UsedBy, State: state})
	}
	a.render(w, r, status, ui.JoinCodesPage(v))
}

func (a *App) handleJoinCodes(w http.ResponseWriter, r *http.Request) {
	a.joinCodesPage(w, r, http.StatusOK, "", 0)
}

func (a *App) handleJoinCodeCreate(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	ttl, err := time.ParseDuration(r.PostFormValue("ttl"))
	if err != nil || ttl <= 0 || ttl > 90*24*time.Hour {
		a.consoleError(w, r, page(r, "Join codes", "joincodes"), nah.Errorf(nah.Invalid, "", "a join code is valid for up to 90 days"))
		return
	}
	code, jc, err := a.store.JoinCodes().Create(r.Context(), ttl)
	if err != nil {
		a.consoleError(w, r, page(r, "Join codes", "joincodes"), err)
		return
	}
	a.joinCodesPage(w, r, http.StatusCreated, code, jc.ExpiresAt)
}

func (a *App) handleJoinCodeRevoke(w http.ResponseWriter, r *http.Request) {
	if err := a.store.JoinCodes().Revoke(r.Context(), chi.URLParam(r, "id")); err != nil {
		a.consoleError(w, r, page(r, "Join codes", "joincodes"), err)
		return
	}
	http.Redirect(w, r, "/console/joincodes?m=code-revoked", http.StatusSeeOther)
}
