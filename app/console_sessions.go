package app

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
	"github.com/nah-app/nah/ui"
)

// sessionList is person p's sessions ss as their page lists them.
func sessionList(p nah.Person, ss []store.Session) ui.Sessions {
	v := ui.Sessions{PersonID: p.ID, Handle: p.Handle, Max: store.MaxSessions, IdleDays: int(store.SessionIdle.Hours() / 24)}
	for _, s := range ss {
		v.Rows = append(v.Rows, ui.SessionRow{ID: s.ID, Device: s.Device, CreatedAt: s.CreatedAt, UsedAt: s.UsedAt, ExpiresAt: s.ExpiresAt})
	}
	return v
}

// handleSessionsRevoke signs one of a person's phones out (the form's
// session), or all of them.
func (a *App) handleSessionsRevoke(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	if err := a.store.RevokeSessions(r.Context(), id, r.PostFormValue("session")); err != nil {
		a.consoleError(w, r, page(r, "Person", "people"), err)
		return
	}
	http.Redirect(w, r, "/console/people/"+id+"?m=revoked", http.StatusSeeOther)
}
