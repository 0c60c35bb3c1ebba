package app

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
	"github.com/nah-app/nah/ui"
)

// Sign-in, sign-out, and the one-time links: setup (creates an admin) and
// reset (sets a person's password).

const (
	adminSessionTTL = 12 * time.Hour
	setupLinkTTL    = time.Hour
)

func (a *App) startAdminSession(w http.ResponseWriter, r *http.Request, ad store.Admin) {
	token, err := a.store.Admins().CreateSession(r.Context(), ad.ID, adminSessionTTL)
	if err != nil {
		a.consoleError(w, r, ui.Page{}, err)
		return
	}
	a.setAdminCookie(w, r, token, int(adminSessionTTL.Seconds()))
	http.Redirect(w, r, "/console", http.StatusSeeOther)
}

func (a *App) handleConsoleLoginForm(w http.ResponseWriter, r *http.Request) {
	a.render(w, r, http.StatusOK, ui.FormPage(ui.Form{Page: ui.Page{Title: "Sign in"}, Action: "/console/login", Kind: "signin"}))
}

func (a *App) handleConsoleLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	name, password := r.PostFormValue("name"), r.PostFormValue("password")
	form := ui.Form{Page: ui.Page{Title: "Sign in"}, Action: "/console/login", Kind: "signin", Handle: name}
	// The console's keys are apart from the API's: an admin's name may
	// also be a person's handle. Admins' names are handles, so a name
	// that is not one is not a key: it counts against the address only,
	// and the raw text (up to the 4 KB body) is never kept.
	key := ""
	if nah.ValidHandle(name) {
		key = "admin " + name
	}
	at, err := a.takeSignin("admin "+a.clientAddr(r), key)
	if err != nil {
		a.formError(w, r, form, err) // 429, Retry-After from the limiter
		return
	}
	giveBack := at.giveBack
	bad := nah.Errorf(nah.Unauthorized, "invalid_credentials", "the name or password is wrong")
	if key == "" || len(password) > nah.PasswordMaxBytes {
		a.signinFailed(r, at, signinConsole, "") // no such admin can exist: nothing to hash
		a.formError(w, r, form, bad)
		return
	}
	ad, hash, err := a.store.Admins().FindByName(r.Context(), name)
	if err != nil && nah.ErrorCode(err) != nah.NotFound {
		giveBack() // nothing was checked
		a.consoleError(w, r, form.Page, err)
		return
	}
	ok, err := a.hasher.check(r.Context(), hash, password)
	if err != nil {
		giveBack() // nothing was checked
		a.consoleError(w, r, form.Page, err)
		return
	}
	if !ok {
		a.signinFailed(r, at, signinConsole, ad.Name)
		a.formError(w, r, form, bad)
		return
	}
	giveBack()
	a.startAdminSession(w, r, ad)
}

func (a *App) handleConsoleLogout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(adminCookie); err == nil {
		if err := a.store.Admins().DeleteSession(r.Context(), c.Value); err != nil {
			a.consoleError(w, r, page(r, "", ""), err)
			return
		}
	}
	a.setAdminCookie(w, r, "", -1)
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}

// checkLink checks a one-time link of kind under the limit of bogus ones
// and returns its person (none for an admin link).
func (a *App) checkLink(r *http.Request, kind, token string) (person string, err error) {
	err = a.checkSecret(r, func() error {
		person, err = a.store.CheckLink(r.Context(), kind, token)
		return err
	})
	return person, err
}

func (a *App) handleSetupForm(w http.ResponseWriter, r *http.Request) {
	token := chi.URLParam(r, "token")
	if _, err := a.checkLink(r, store.LinkAdmin, token); err != nil {
		a.consoleError(w, r, ui.Page{Title: "Create an admin"}, err)
		return
	}
	a.render(w, r, http.StatusOK, ui.FormPage(ui.Form{Page: ui.Page{Title: "Create an admin"}, Action: "/console/setup/" + token, Kind: "setup"}))
}

// handleSetup creates an admin with a setup link. The link is checked
// before the form is read and the password hashed, so bogus links cost a
// look-up, not a hash; the link is used in CreateAdminWithLink's
// transaction.
func (a *App) handleSetup(w http.ResponseWriter, r *http.Request) {
	token := chi.URLParam(r, "token")
	if _, err := a.checkLink(r, store.LinkAdmin, token); err != nil {
		a.consoleError(w, r, ui.Page{Title: "Create an admin"}, err)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	name, password := r.PostFormValue("name"), r.PostFormValue("password")
	form := ui.Form{Page: ui.Page{Title: "Create an admin"}, Action: "/console/setup/" + token, Kind: "setup", Handle: name}
	if err := nah.CheckSignup(name, password); err != nil {
		a.formError(w, r, form, err)
		return
	}
	if err := samePassword(password, r.PostFormValue("password2")); err != nil {
		a.formError(w, r, form, err)
		return
	}
	hash, err := a.hasher.hash(r.Context(), password)
	if err != nil {
		a.consoleError(w, r, form.Page, err)
		return
	}
	ad, err := a.store.Admins().CreateWithLink(r.Context(), token, name, hash)
	if err != nil {
		a.consoleError(w, r, form.Page, err)
		return
	}
	a.startAdminSession(w, r, ad)
}

func (a *App) handleResetForm(w http.ResponseWriter, r *http.Request) {
	token := chi.URLParam(r, "token")
	id, err := a.checkLink(r, store.LinkReset, token)
	var p nah.Person
	if err == nil {
		p, err = a.store.FindPersonByID(r.Context(), id)
	}
	if err != nil {
		a.consoleError(w, r, ui.Page{Title: "Reset a password"}, err)
		return
	}
	a.render(w, r, http.StatusOK, ui.FormPage(ui.Form{Page: ui.Page{Title: "Reset a password"}, Action: "/reset/" + token, Kind: "reset", Handle: p.Handle}))
}

// handleReset sets a person's password with a reset link. As in
// handleSetup, the link is checked before the password is read and hashed,
// and used in ResetPassword's transaction.
func (a *App) handleReset(w http.ResponseWriter, r *http.Request) {
	token := chi.URLParam(r, "token")
	p := ui.Page{Title: "Reset a password"}
	if _, err := a.checkLink(r, store.LinkReset, token); err != nil {
		a.consoleError(w, r, p, err)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	password := r.PostFormValue("password")
	err := nah.CheckPassword(password)
	if err == nil {
		err = samePassword(password, r.PostFormValue("password2"))
	}
	if err != nil {
		a.formError(w, r, ui.Form{Page: p, Action: "/reset/" + token, Kind: "reset"}, err)
		return
	}
	hash, err := a.hasher.hash(r.Context(), password)
	if err == nil {
		_, err = a.store.ResetPassword(r.Context(), token, hash)
	}
	if err != nil {
		a.consoleError(w, r, p, err)
		return
	}
	p.Flash = "The password is set. Sign in on your phone with it."
	a.render(w, r, http.StatusOK, ui.MessagePage(p))
}

// ResetLink is the address of the one-time link token that sets a
// person's password, on the server reached at base.
func ResetLink(base, token string) string {
	return strings.TrimSuffix(base, "/") + "/reset/" + token
}

// SetupLink makes a one-time link (valid an hour) that creates an admin;
// base is the server's address as the operator reaches it.
func SetupLink(ctx context.Context, s *store.Store, base string) (string, error) {
	token, err := s.CreateLink(ctx, store.LinkAdmin, "", setupLinkTTL)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(base, "/") + "/console/setup/" + token, nil
}

// samePassword refuses a new password typed differently the second time.
func samePassword(password, again string) error {
	if password != again {
		return nah.Errorf(nah.Invalid, "", "The two passwords differ: type the same one in both boxes.")
	}
	return nil
}
