package app

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
	"github.com/nah-app/nah/ui"
)

// The admin console: server-rendered pages, every read page works without
// JavaScript; htmx (hx-boost, search as you type) only makes it smoother.
// Admins sign in with a cookie session; every state change passes
// http.CrossOriginProtection.

const (
	adminCookie     = "nah_admin"
	adminSessionTTL = 12 * time.Hour
	setupLinkTTL    = time.Hour
	resetLinkTTL    = 24 * time.Hour
	peoplePerPage   = 50
)

const adminKey ctxKey = 1

func (a *App) consoleRoutes(r chi.Router) {
	csrf := http.NewCrossOriginProtection()
	r.Group(func(r chi.Router) {
		r.Use(csrf.Handler)
		r.Get("/console/login", a.handleConsoleLoginForm)
		r.Post("/console/login", a.handleConsoleLogin)
		r.Get("/console/setup/{token}", a.handleSetupForm)
		r.Post("/console/setup/{token}", a.handleSetup)
		r.Get("/reset/{token}", a.handleResetForm)
		r.Post("/reset/{token}", a.handleReset)
		r.Group(func(r chi.Router) {
			r.Use(a.requireAdmin)
			r.Post("/console/logout", a.handleConsoleLogout)
			r.Get("/console", a.handleOverview)
			r.Get("/console/people", a.handlePeople)
			r.Post("/console/people", a.handlePersonCreate)
			r.Get("/console/people/{id}", a.handlePerson)
			r.Post("/console/people/{id}/disable", a.handlePersonDisable)
			r.Post("/console/people/{id}/enable", a.handlePersonEnable)
			r.Post("/console/people/{id}/reset", a.handlePersonReset)
			r.Post("/console/people/{id}/sessions/revoke", a.handleSessionsRevoke)
			r.Get("/console/joincodes", a.handleJoinCodes)
			r.Post("/console/joincodes", a.handleJoinCodeCreate)
			r.Post("/console/joincodes/{id}/revoke", a.handleJoinCodeRevoke)
			r.Get("/console/settings", a.handleSettings)
			r.Post("/console/settings", a.handleSettingsSave)
		})
	})
	r.Handle("/static/*", ui.StaticHandler())
	r.Get("/favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
}

// render writes a page (or fragment) with status.
func (a *App) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := c.Render(r.Context(), w); err != nil {
		a.log.Error("render", "route", routePattern(r), "err", err)
	}
}

// consoleError answers a console request with err as a page: p, titled
// "Something is wrong" unless it has a title, with the error's sentence.
func (a *App) consoleError(w http.ResponseWriter, r *http.Request, p ui.Page, err error) {
	a.respondError(w, r, err, func(e *nah.Error) templ.Component {
		if p.Title == "" {
			p.Title = "Something is wrong"
		}
		p.Error = e.Message
		return ui.MessagePage(p)
	})
}

// formError answers a form's submission with err: the form again, with the
// error's sentence above it.
func (a *App) formError(w http.ResponseWriter, r *http.Request, f ui.Form, err error) {
	a.respondError(w, r, err, func(e *nah.Error) templ.Component {
		f.Error = e.Message
		return ui.FormPage(f)
	})
}

func (a *App) requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(adminCookie)
		if err == nil {
			if ad, err := a.store.AdminForSession(r.Context(), c.Value); err == nil {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), adminKey, ad)))
				return
			}
		}
		http.Redirect(w, r, "/console/login", http.StatusSeeOther)
	})
}

func page(r *http.Request, title, nav string) ui.Page {
	ad, _ := r.Context().Value(adminKey).(store.Admin)
	return ui.Page{Title: title, Nav: nav, Admin: ad.Name}
}

// secure reports whether the client reached us over TLS, directly or
// through a trusted proxy that says so.
func (a *App) secure(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	return a.fromTrustedProxy(r) && strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func (a *App) setAdminCookie(w http.ResponseWriter, r *http.Request, token string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: adminCookie, Value: token, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: a.secure(r), SameSite: http.SameSiteLaxMode,
	})
}

func (a *App) startAdminSession(w http.ResponseWriter, r *http.Request, ad store.Admin) {
	token, err := a.store.CreateAdminSession(r.Context(), ad.ID, adminSessionTTL)
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
	addr := "admin " + a.clientAddr(r)
	for _, err := range []error{a.signinByAddr.check(addr), a.signinByHandle.check("admin " + name)} {
		if err != nil {
			a.formError(w, r, form, err) // 429, Retry-After from the limiter
			return
		}
	}
	ad, hash, err := a.store.FindAdminByName(r.Context(), name)
	if err != nil && nah.ErrorCode(err) != nah.NotFound {
		a.consoleError(w, r, form.Page, err)
		return
	}
	ok, err := a.hasher.check(r.Context(), hash, password)
	if err != nil {
		a.consoleError(w, r, form.Page, err)
		return
	}
	if !ok {
		a.signinByAddr.hit(addr)
		a.signinByHandle.hit("admin " + name)
		a.formError(w, r, form, nah.Errorf(nah.Unauthorized, "invalid_credentials", "the name or password is wrong"))
		return
	}
	a.startAdminSession(w, r, ad)
}

func (a *App) handleConsoleLogout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(adminCookie); err == nil {
		if err := a.store.DeleteAdminSession(r.Context(), c.Value); err != nil {
			a.consoleError(w, r, page(r, "", ""), err)
			return
		}
	}
	a.setAdminCookie(w, r, "", -1)
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}

func (a *App) handleSetupForm(w http.ResponseWriter, r *http.Request) {
	token := chi.URLParam(r, "token")
	if _, err := a.store.CheckLink(r.Context(), store.LinkAdmin, token); err != nil {
		a.consoleError(w, r, ui.Page{Title: "Create an admin"}, err)
		return
	}
	a.render(w, r, http.StatusOK, ui.FormPage(ui.Form{Page: ui.Page{Title: "Create an admin"}, Action: "/console/setup/" + token, Kind: "setup"}))
}

func (a *App) handleSetup(w http.ResponseWriter, r *http.Request) {
	token := chi.URLParam(r, "token")
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	name, password := r.PostFormValue("name"), r.PostFormValue("password")
	form := ui.Form{Page: ui.Page{Title: "Create an admin"}, Action: "/console/setup/" + token, Kind: "setup", Handle: name}
	if err := nah.CheckSignup(name, password); err != nil {
		a.formError(w, r, form, err)
		return
	}
	hash, err := a.hasher.hash(r.Context(), password)
	if err != nil {
		a.consoleError(w, r, form.Page, err)
		return
	}
	ad, err := a.store.CreateAdminWithLink(r.Context(), token, name, hash)
	if err != nil {
		a.consoleError(w, r, form.Page, err)
		return
	}
	a.startAdminSession(w, r, ad)
}

func (a *App) handleResetForm(w http.ResponseWriter, r *http.Request) {
	token := chi.URLParam(r, "token")
	id, err := a.store.CheckLink(r.Context(), store.LinkReset, token)
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

func (a *App) handleReset(w http.ResponseWriter, r *http.Request) {
	token := chi.URLParam(r, "token")
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	password := r.PostFormValue("password")
	p := ui.Page{Title: "Reset a password"}
	if err := nah.CheckPassword(password); err != nil {
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

func (a *App) handleOverview(w http.ResponseWriter, r *http.Request) {
	t, err := a.store.Totals(r.Context())
	if err != nil {
		a.consoleError(w, r, page(r, "Overview", "overview"), err)
		return
	}
	rss, peak := procMemory()
	o := ui.Overview{
		Page: page(r, "Overview", "overview"), People: t.People, Moments: t.Moments, StorageBytes: t.StorageBytes,
		OpenFiles: a.store.OpenFiles(), MaxOpenFiles: a.cfg.MaxOpenFiles, RSSBytes: rss, PeakRSSBytes: peak,
		HeadBytes: a.store.HeadBytes(), Uptime: a.now().Sub(a.metrics.start),
	}
	o.Points = a.metrics.series()
	a.render(w, r, http.StatusOK, ui.OverviewPage(o))
}

func toRow(p nah.Person) ui.PersonRow {
	return ui.PersonRow{ID: p.ID, Handle: p.Handle, CreatedAt: p.CreatedAt, NewestAt: p.NewestAt, Disabled: p.Disabled}
}

func (a *App) handlePeople(w http.ResponseWriter, r *http.Request) {
	q := strings.ToLower(strings.TrimSpace(r.URL.Query().Get("q")))
	if len(q) > nah.HandleMaxLen {
		q = q[:nah.HandleMaxLen]
	}
	pageNum, _ := strconv.Atoi(r.URL.Query().Get("page"))
	pageNum = max(pageNum, 1)
	ps, total, err := a.store.ListPeople(r.Context(), q, (pageNum-1)*peoplePerPage, peoplePerPage)
	if err != nil {
		a.consoleError(w, r, page(r, "People", "people"), err)
		return
	}
	v := ui.People{Page: page(r, "People", "people"), Query: q, Total: total, PageNum: pageNum, PageCount: (total + peoplePerPage - 1) / peoplePerPage}
	for _, p := range ps {
		v.Rows = append(v.Rows, toRow(p))
	}
	// htmx's search-as-you-type asks for the list alone; boosted navigation
	// and browsers without JavaScript get the page.
	if r.Header.Get("HX-Request") == "true" && r.Header.Get("HX-Boosted") != "true" {
		a.render(w, r, http.StatusOK, ui.PeopleList(v))
		return
	}
	a.render(w, r, http.StatusOK, ui.PeoplePage(v))
}

func (a *App) handlePersonCreate(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	handle, password := strings.TrimSpace(r.PostFormValue("handle")), r.PostFormValue("password")
	p := page(r, "People", "people")
	if err := nah.CheckSignup(handle, password); err != nil {
		a.consoleError(w, r, p, err)
		return
	}
	hash, err := a.hasher.hash(r.Context(), password)
	if err != nil {
		a.consoleError(w, r, p, err)
		return
	}
	person, err := a.store.CreatePerson(r.Context(), store.NewPerson{Handle: handle, PasswordHash: hash})
	if err != nil {
		a.consoleError(w, r, p, err)
		return
	}
	http.Redirect(w, r, "/console/people/"+person.ID+"?m=created", http.StatusSeeOther)
}

// flashes are the fixed messages a redirect may ask for with ?m=.
var flashes = map[string]string{
	"created":  "The person is created. They can sign in with the password you gave.",
	"disabled": "Disabled: their tokens no longer work.",
	"enabled":  "Enabled.",
	"revoked":  "Revoked.",
	"saved":    "Saved.",
}

func (a *App) personPage(w http.ResponseWriter, r *http.Request, status int, secret string) {
	id := chi.URLParam(r, "id")
	pg := page(r, "Person", "people")
	p, err := a.store.FindPersonByID(r.Context(), id)
	if err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	v := ui.Person{Page: pg, PersonRow: toRow(p)}
	v.Title = p.Handle
	v.Flash = flashes[r.URL.Query().Get("m")]
	v.Secret = secret
	ss, err1 := a.store.Sessions(r.Context(), id)
	cs, err2 := a.store.Connections(r.Context(), id)
	var err3, err4 error
	v.Moments, err3 = a.store.MomentCount(r.Context(), id)
	v.StorageBytes, err4 = a.store.StorageUsed(id)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	for _, s := range ss {
		v.Sessions = append(v.Sessions, ui.SessionRow{ID: s.ID, CreatedAt: s.CreatedAt})
	}
	for _, c := range cs {
		v.Connections = append(v.Connections, ui.PersonRow{ID: c.ID, Handle: c.Handle, NewestAt: c.NewestAt})
	}
	a.render(w, r, status, ui.PersonPage(v))
}

func (a *App) handlePerson(w http.ResponseWriter, r *http.Request) {
	a.personPage(w, r, http.StatusOK, "")
}

func (a *App) setDisabled(w http.ResponseWriter, r *http.Request, disabled bool, m string) {
	id := chi.URLParam(r, "id")
	if err := a.store.SetDisabled(r.Context(), id, disabled); err != nil {
		a.consoleError(w, r, page(r, "Person", "people"), err)
		return
	}
	http.Redirect(w, r, "/console/people/"+id+"?m="+m, http.StatusSeeOther)
}

func (a *App) handlePersonDisable(w http.ResponseWriter, r *http.Request) {
	a.setDisabled(w, r, true, "disabled")
}

func (a *App) handlePersonEnable(w http.ResponseWriter, r *http.Request) {
	a.setDisabled(w, r, false, "enabled")
}

// handlePersonReset makes a one-time link and shows it once: the operator
// hands it to the person, who sets a new password there.
func (a *App) handlePersonReset(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if _, err := a.store.FindPersonByID(r.Context(), id); err != nil {
		a.consoleError(w, r, page(r, "Person", "people"), err)
		return
	}
	token, err := a.store.CreateLink(r.Context(), store.LinkReset, id, resetLinkTTL)
	if err != nil {
		a.consoleError(w, r, page(r, "Person", "people"), err)
		return
	}
	scheme := "http"
	if a.secure(r) {
		scheme = "https"
	}
	a.personPage(w, r, http.StatusCreated, scheme+"://"+r.Host+"/reset/"+token)
}

func (a *App) handleSessionsRevoke(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	if err := a.store.RevokeSessions(r.Context(), id, r.PostFormValue("session")); err != nil {
		a.consoleError(w, r, page(r, "Person", "people"), err)
		return
	}
	http.Redirect(w, r, "/console/people/"+id+"?m=revoked", http.StatusSeeOther)
}

func (a *App) joinCodesPage(w http.ResponseWriter, r *http.Request, status int, secret string) {
	pg := page(r, "Join codes", "joincodes")
	cs, err := a.store.JoinCodes(r.Context(), 200)
	if err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	v := ui.JoinCodes{Page: pg}
	v.Flash = flashes[r.URL.Query().Get("m")]
	if secret != "" {
		v.Flash = "The new join code is shown once. Give it to the person who will sign up:"
		v.Secret = secret
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
	a.joinCodesPage(w, r, http.StatusOK, "")
}

func (a *App) handleJoinCodeCreate(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	ttl, err := time.ParseDuration(r.PostFormValue("ttl"))
	if err != nil || ttl <= 0 || ttl > 90*24*time.Hour {
		a.consoleError(w, r, page(r, "Join codes", "joincodes"), nah.Errorf(nah.Invalid, "", "a join code is valid for up to 90 days"))
		return
	}
	code, _, err := a.store.CreateJoinCode(r.Context(), ttl)
	if err != nil {
		a.consoleError(w, r, page(r, "Join codes", "joincodes"), err)
		return
	}
	a.joinCodesPage(w, r, http.StatusCreated, code)
}

func (a *App) handleJoinCodeRevoke(w http.ResponseWriter, r *http.Request) {
	if err := a.store.RevokeJoinCode(r.Context(), chi.URLParam(r, "id")); err != nil {
		a.consoleError(w, r, page(r, "Join codes", "joincodes"), err)
		return
	}
	http.Redirect(w, r, "/console/joincodes?m=revoked", http.StatusSeeOther)
}

// settingOpenSignup is the persisted override of NAH_OPEN_SIGNUP.
const settingOpenSignup = "open_signup"

// openSignup is the effective open sign-up and where it came from.
func (a *App) openSignup(ctx context.Context) (bool, string, error) {
	v, err := a.store.Setting(ctx, settingOpenSignup, "")
	if err != nil || v == "" {
		return a.cfg.OpenSignup, a.cfg.source("NAH_OPEN_SIGNUP"), err
	}
	return v == "true", "the console (saved in the directory database)", nil
}

func (a *App) handleSettings(w http.ResponseWriter, r *http.Request) {
	pg := page(r, "Settings", "settings")
	open, src, err := a.openSignup(r.Context())
	if err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	v := ui.Settings{Page: pg, OpenSignup: open, OpenSignupSource: src}
	v.Flash = flashes[r.URL.Query().Get("m")]
	for _, s := range a.cfg.Effective() {
		v.Config = append(v.Config, ui.Setting{Name: s.Name, Value: s.Value, Source: s.Source})
	}
	a.render(w, r, http.StatusOK, ui.SettingsPage(v))
}

func (a *App) handleSettingsSave(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	v := "false"
	if r.PostFormValue("open_signup") == "true" {
		v = "true"
	}
	if err := a.store.SetSetting(r.Context(), settingOpenSignup, v); err != nil {
		a.consoleError(w, r, page(r, "Settings", "settings"), err)
		return
	}
	http.Redirect(w, r, "/console/settings?m=saved", http.StatusSeeOther)
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
