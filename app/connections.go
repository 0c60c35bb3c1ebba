package app

import (
	"net/http"

	"github.com/nah-app/nah"
)

type connectionJSON struct {
	ID          string  `json:"id"`
	Handle      string  `json:"handle"`
	ConnectedAt string  `json:"connected_at"`
	NewestAt    *string `json:"newest_at"`
}

func toConnectionJSON(c nah.Connection) connectionJSON {
	return connectionJSON{ID: c.ID, Handle: c.Handle, ConnectedAt: nah.FormatTime(c.ConnectedAt), NewestAt: optTime(c.NewestAt)}
}

// handleInviteCreate makes a single-use invite code, valid for seven days.
func (a *App) handleInviteCreate(w http.ResponseWriter, r *http.Request) {
	inv, err := a.store.CreateInvite(r.Context(), sessionOf(r).person.ID)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"code": inv.Code, "expires_at": nah.FormatTime(inv.ExpiresAt)})
}

// handleConnectionCreate redeems an invite: both people are connected.
func (a *App) handleConnectionCreate(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Code jsonString `json:"code"`
	}
	if err := decodeJSON(w, r, smallBody, &in); err != nil {
		a.writeError(w, r, err)
		return
	}
	if in.Code == "" {
		a.writeError(w, r, nah.Errorf(nah.Invalid, "missing_code", "an invite code is required"))
		return
	}
	c, err := a.store.RedeemInvite(r.Context(), sessionOf(r).person.ID, string(in.Code))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toConnectionJSON(c))
}

// handleConnections lists the signed-in person's connections.
func (a *App) handleConnections(w http.ResponseWriter, r *http.Request) {
	cs, err := a.store.Connections(r.Context(), sessionOf(r).person.ID)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := make([]connectionJSON, len(cs))
	for i, c := range cs {
		out[i] = toConnectionJSON(c)
	}
	writeJSON(w, http.StatusOK, map[string]any{"connections": out})
}

// handleConnectionDelete disconnects both sides.
func (a *App) handleConnectionDelete(w http.ResponseWriter, r *http.Request) {
	if err := a.store.Disconnect(r.Context(), sessionOf(r).person.ID, pathParam(r, "id")); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
