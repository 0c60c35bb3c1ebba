package app

import (
	"fmt"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/nah-app/nah"
)

// routes lists every route of the API on one screen (the console's are in
// consoleRoutes). openapi.json describes the API's, and a test keeps the two
// equal.
func (a *App) routes() http.Handler {
	r := chi.NewRouter()
	// limitHeaders is the first to look at a request; recoverer and measure
	// only wrap it, so that its 431 is counted like any answer. GetHead
	// routes HEAD to the GET route of the path (no route is HEAD's own):
	// the handler runs once, and net/http sends its status and headers,
	// Content-Length included, and drops the body.
	r.Use(a.recoverer, a.metrics.measure, a.limitHeaders, a.tusRequests, middleware.GetHead, a.admit)
	r.NotFound(func(w http.ResponseWriter, req *http.Request) {
		if consolePath(req.URL.Path) {
			a.consoleNoRoute(w, req, nah.Errorf(nah.NotFound, "", "There is no page at this address."))
			return
		}
		a.writeError(w, req, nah.Errorf(nah.NotFound, "", "no such route"))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		var allow []string
		for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"} {
			ok := r.Match(chi.NewRouteContext(), m, req.URL.Path)
			if m == "HEAD" {
				ok = ok || r.Match(chi.NewRouteContext(), "GET", req.URL.Path) // GetHead's rule
			}
			if ok {
				allow = append(allow, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		if consolePath(req.URL.Path) {
			a.consoleNoRoute(w, req, nah.Errorf(nah.MethodNotAllowed, "", "this route does not take %s", req.Method))
			return
		}
		a.writeError(w, req, nah.Errorf(nah.MethodNotAllowed, "", "this route does not take %s", req.Method))
	})

	r.Get("/healthz", a.handleHealth)
	r.Get("/join/{code}", a.handleJoinPage) // join.go
	a.consoleRoutes(r)

	r.Route("/api/v1", func(r chi.Router) {
		r.Post("/accounts", a.handleAccountCreate)
		r.Post("/sessions", a.handleSessionCreate)
		r.Options("/uploads", a.handleUploadOptions)
		r.Options("/uploads/{upload_id}", a.handleUploadOptions)

		r.Group(func(r chi.Router) {
			r.Use(a.requirePerson)
			r.Delete("/sessions/current", a.handleSessionDelete)
			r.Get("/me", a.handleMe)
			r.Delete("/me", a.handleMeDelete)
			r.Get("/me/export", a.handleExport)
			r.Post("/moments", a.handleMomentCreate)
			r.Delete("/moments/{id}", a.handleMomentDelete)
			r.Get("/feed", a.handleFeed)
			r.Get("/people/{id}/moments", a.handlePersonMoments)
			r.Post("/invites", a.handleInviteCreate)
			r.Post("/connections", a.handleConnectionCreate)
			r.Get("/connections", a.handleConnections)
			r.Delete("/connections/{id}", a.handleConnectionDelete)

			r.Post("/media", a.handleMediaCreate)
			r.Get("/people/{id}/media/{media_id}", a.handleMediaGet)
			r.Delete("/media/{media_id}", a.handleMediaDelete)
			r.Get("/uploads", a.handleUploadList)
			r.Post("/uploads", a.handleUploadCreate)
			r.Head("/uploads/{upload_id}", a.handleUploadHead)
			r.Patch("/uploads/{upload_id}", a.handleUploadPatch)
			r.Delete("/uploads/{upload_id}", a.handleUploadDelete)
			r.Put("/me/digest", a.handleDigestPut)
			r.Put("/me/devices", a.handleDevicePut)
			r.Delete("/me/devices", a.handleDeviceDelete)
			// The token in the path, as before (deprecated: proxies log
			// paths, and a token is a secret).
			r.Put("/me/devices/{token}", a.handleDevicePut)
			r.Delete("/me/devices/{token}", a.handleDeviceDelete)

			// MLS: clients, KeyPackages, the key log and each person's
			// group (docs/api.md, "End-to-end encryption").
			r.Post("/me/clients", a.handleClientCreate)
			r.Get("/me/clients", a.handleClients)
			r.Delete("/me/clients/{id}", a.handleClientDelete)
			r.Post("/me/clients/{id}/key_packages", a.handleKeyPackagesAdd)
			r.Get("/me/clients/{id}/inbox", a.handleInbox)
			r.Delete("/me/clients/{id}/inbox/{n}", a.handleInboxDelete)
			r.Get("/people/{id}/clients", a.handlePersonClients)
			r.Post("/people/{id}/key_packages/claim", a.handleClaim)
			r.Get("/people/{id}/key_log", a.handleKeyLog)
			r.Get("/key_log/key", a.handleKeyLogKey)
			r.Post("/people/{id}/group", a.handleGroupCreate)
			r.Get("/people/{id}/group", a.handleGroup)
			r.Post("/people/{id}/group/commits", a.handleCommit)
			r.Get("/people/{id}/group/commits", a.handleCommits)
			r.Get("/people/{id}/group/info", a.handleGroupInfo)
		})
	})
	a.metrics.setRoutes(r)
	return r
}

// pathParam is the path parameter name, percent-decoded: chi matches the
// escaped path when there is one, so an FCM token's ':' sent as %3A (as
// encodeURIComponent writes it) would reach a check still encoded. A
// parameter that does not decode is returned as it is, for its own check
// to refuse.
func pathParam(r *http.Request, name string) string {
	v := chi.URLParam(r, name)
	if d, err := url.PathUnescape(v); err == nil {
		return d
	}
	return v
}

// recoverer turns a panic into an internal error: logged with its stack,
// answered as a 500 with the SPEC's error body.
func (a *App) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				a.writeError(w, r, fmt.Errorf("panic: %v\n%s", v, debug.Stack()))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
