package app

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/a-h/templ"
	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
	"github.com/nah-app/nah/ui"
)

// The console's routes and what every page shares (rendering, errors, the
// admin check, the session cookie); each page has its console_*.go. Read
// pages work without JavaScript; every state change passes CrossOriginProtection.

const adminCookie = "nah_admin"

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
			r.Post("/console/checklist", a.handleChecklist)
			r.Get("/console/people", a.handlePeople)
			r.Post("/console/people", a.handlePersonCreate)
			r.Post("/console/people/import", a.handlePersonImport)
			r.Get("/console/people/{id}", a.handlePerson)
			r.Get("/console/people/{id}/export", a.handlePersonExport)
			r.Post("/console/people/{id}/disable", a.handlePersonDisable)
			r.Post("/console/people/{id}/enable", a.handlePersonEnable)
			r.Post("/console/people/{id}/reset", a.handlePersonReset)
			r.Post("/console/people/{id}/sessions/revoke", a.handleSessionsRevoke)
			r.Post("/console/people/{id}/delete", a.handlePersonDelete)
			r.Get("/console/deleted", a.handleDeleted)
			r.Post("/console/deleted/{id}/restore", a.handlePersonRestore)
			r.Get("/console/joincodes", a.handleJoinCodes)
			r.Post("/console/joincodes", a.handleJoinCodeCreate)
			r.Post("/console/joincodes/{id}/revoke", a.handleJoinCodeRevoke)
			r.Get("/console/digests", a.handleDigests)
			r.Get("/console/settings", a.handleSettings)
			r.Post("/console/settings", a.handleSettingsSave)
			// Backups (console_backups.go).
			r.Get("/console/backups", a.handleBackups)
			r.Post("/console/backups/sync", a.handleBackupSync)
			r.Post("/console/backups/drill", a.handleDrillNow) // console_drill.go
			r.Get("/console/backups/download", a.handleBackupDownload)
			r.Post("/console/backups/copy", a.handleCopyNow)               // console_copies.go
			r.Get("/console/backups/copies/{stamp}", a.handleCopyDownload) // console_copies.go
			r.Get("/console/backups/restore", a.handleRestoreConfirm)
			r.Post("/console/backups/restore", a.handleRestore)
			r.Get("/console/backups/restore/{ticket}", a.handleRestoreResult)
			r.Get("/console/people/{id}/undo-restore", a.handleUndoRestoreConfirm)
			r.Get("/console/people/{id}/restore-progress", a.handleRestoreProgress)
			r.Post("/console/people/{id}/undo-restore", a.handleUndoRestore)
		})
	})
	r.Get("/", a.handleRoot)
	r.Handle("/static/*", ui.StaticHandler())
	r.Get("/favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
}

// handleRoot sends a browser at the server's root (the address people are
// given) to the console; anything else gets the API's 404, as before.
func (a *App) handleRoot(w http.ResponseWriter, r *http.Request) {
	if strings.Contains(r.Header.Get("Accept"), "text/html") {
		http.Redirect(w, r, "/console", http.StatusSeeOther)
		return
	}
	a.writeError(w, r, nah.Errorf(nah.NotFound, "", "no such route"))
}

// render writes a page (or fragment) with status.
func (a *App) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodPost && r.Header.Get("HX-Request") == "true" {
		// htmx would put the POST's own URL in the address bar, which a
		// reload then GETs: "this route does not take GET". The page the
		// form was on is the address of what this answer shows.
		w.Header().Set("HX-Replace-Url", formPageURL(r))
	}
	w.WriteHeader(status)
	if err := c.Render(ui.WithVersion(r.Context(), a.cfg.Version), w); err != nil {
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
		p.Error = refusalText(e)
		return ui.MessagePage(p)
	})
}

// refusalText is an error's sentence as the console shows it: a rate
// limit says when to try again, in words.
func refusalText(e *nah.Error) string {
	if e.Code == nah.RateLimited && e.RetryAfter > 0 {
		return "Too many attempts: try again " + ui.InAbout(e.RetryAfter) + "."
	}
	return e.Message
}

// formError answers a form's submission with err: the form again, with the
// error's sentence above it.
func (a *App) formError(w http.ResponseWriter, r *http.Request, f ui.Form, err error) {
	a.respondError(w, r, err, func(e *nah.Error) templ.Component {
		f.Error = refusalText(e)
		return ui.FormPage(f)
	})
}

// formPageURL is the console page an htmx request came from (htmx's
// HX-Current-URL), path and query only; the overview when it is not one.
func formPageURL(r *http.Request) string {
	u, err := url.Parse(r.Header.Get("HX-Current-URL"))
	if err != nil || !consolePath(u.Path) {
		return "/console"
	}
	if u.RawQuery != "" {
		return u.Path + "?" + u.RawQuery
	}
	return u.Path
}

// consolePath reports whether path is the console's, whose errors
// (unknown addresses and wrong methods included) are answered with a
// page in HTML, not the API's JSON.
func consolePath(path string) bool {
	return path == "/console" || strings.HasPrefix(path, "/console/") || strings.HasPrefix(path, "/reset/")
}

// refuse answers err before any handler has run (a header too large, the
// budget spent): the console's page for the console, JSON for the API,
// both by the one error path.
func (a *App) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if consolePath(r.URL.Path) {
		a.consoleError(w, r, ui.Page{}, err)
		return
	}
	a.writeError(w, r, err)
}

// consoleNoRoute answers a console address that does not exist, or not
// for this method, with a page and a way back.
func (a *App) consoleNoRoute(w http.ResponseWriter, r *http.Request, err error) {
	title := "No such page"
	if nah.ErrorCode(err) == nah.MethodNotAllowed {
		title = "Not a page to open"
		err = nah.Errorf(nah.MethodNotAllowed, "", "This address is an action (%s is not what it takes); go back and use its button.", r.Method)
	}
	a.consoleError(w, r, ui.Page{Title: title}, err)
}

func (a *App) requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(adminCookie)
		if err == nil {
			if ad, err := a.store.Admins().ForSession(r.Context(), c.Value); err == nil {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), adminKey, ad)))
				return
			}
		}
		// http.Redirect writes its link body for GET only, so a HEAD
		// would lack the GET's Content-Length: it is given the GET's
		// answer, whose body net/http then drops.
		if r.Method == http.MethodHead {
			r = r.WithContext(r.Context())
			r.Method = http.MethodGet
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

// flashes are the fixed messages a redirect may ask for with ?m=.
var flashes = map[string]string{
	"created":      "The person is created. They can sign in with the password you gave.",
	"disabled":     "Disabled: they are signed out of every phone and cannot sign in until you enable them.",
	"enabled":      "Enabled.",
	"revoked":      "Signed out of that phone.",
	"code-revoked": "The join code is revoked: nobody can make an account with it now.",
	"saved":        "Saved.",
	"deleted":      "Deleted: they are signed out of every phone and their connections are gone; the deletion can be undone here until the purge.",
	"copying":      "A nightly copy is being made now: this page shows how far it has come.",
	"sync-running": "A sync is already running: one at a time. This page shows how far it has come.",
	"copy-running": "A nightly copy is already being made: one at a time. This page shows how far it has come.",
	"restored":     "Restored with their moments. They stay signed out of every phone and their connections are gone; they sign in with their password.",
	"undone":       "The restore is undone: their file is back as it was just before it (before the first, when restores followed one another).",
}
