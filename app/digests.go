package app

import (
	"encoding/json"
	"net/http"
	"reflect"

	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah"
)

// Digest settings and push devices of the signed-in person. The digest
// loop itself is the digest package's; these handlers only store choices.

// digestJSON is a person's digest settings on the wire.
type digestJSON struct {
	Time     string `json:"time"`
	Timezone string `json:"timezone"`
	Enabled  bool   `json:"enabled"`
}

func toDigestJSON(d nah.Digest) digestJSON {
	return digestJSON{Time: d.Time(), Timezone: d.Timezone, Enabled: d.Enabled}
}

// handleDigestPut saves the signed-in person's digest time, zone and
// switch: all three are required, and a bad one is 400 naming it.
func (a *App) handleDigestPut(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Time     jsonString `json:"time"`
		Timezone jsonString `json:"timezone"`
		Enabled  jsonBool   `json:"enabled"`
	}
	if err := decodeJSON(w, r, smallBody, &in); err != nil {
		a.writeError(w, r, err)
		return
	}
	var d nah.Digest
	var err error
	switch {
	case in.Time == "":
		err = nah.Errorf(nah.Invalid, "invalid_time", "time is required: a local time of day as HH:MM, such as 08:30")
	case in.Timezone == "":
		err = nah.Errorf(nah.Invalid, "invalid_timezone", "timezone is required: an IANA time zone name, such as Europe/Lisbon")
	case !in.Enabled.set:
		err = nah.Errorf(nah.Invalid, "invalid_enabled", "enabled is required: true or false")
	}
	if err == nil {
		d.Minute, err = nah.ParseDigestTime(string(in.Time))
	}
	if err == nil {
		_, err = nah.LoadZone(string(in.Timezone))
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	d.Timezone, d.Enabled = string(in.Timezone), in.Enabled.v
	if err := a.store.SetDigest(r.Context(), sessionOf(r).person.ID, d); err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toDigestJSON(d))
}

// handleDevicePut registers a push token for the signed-in person: from
// the body (PUT /me/devices), or from the path (deprecated). The same call
// twice is one device; an 11th drops the oldest. The token is checked
// (length, alphabet) before anything else and never logged.
func (a *App) handleDevicePut(w http.ResponseWriter, r *http.Request) {
	fromPath := chi.URLParam(r, "token") != ""
	var in struct {
		Token    jsonString `json:"token"`
		Platform jsonString `json:"platform"`
	}
	if err := decodeJSON(w, r, smallBody, &in); err != nil {
		a.writeError(w, r, err)
		return
	}
	token := string(in.Token)
	if fromPath {
		token = pathParam(r, "token")
	}
	if err := nah.CheckDeviceToken(token); err != nil {
		a.writeError(w, r, err)
		return
	}
	if err := a.store.Devices().Put(r.Context(), sessionOf(r).person.ID, token, string(in.Platform)); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleDeviceDelete removes a push token of the signed-in person, named
// in the body (DELETE /me/devices) or in the path (deprecated).
func (a *App) handleDeviceDelete(w http.ResponseWriter, r *http.Request) {
	token := pathParam(r, "token")
	if chi.URLParam(r, "token") == "" {
		var in struct {
			Token jsonString `json:"token"`
		}
		if err := decodeJSON(w, r, smallBody, &in); err != nil {
			a.writeError(w, r, err)
			return
		}
		token = string(in.Token)
	}
	if err := nah.CheckDeviceToken(token); err != nil {
		a.writeError(w, r, err)
		return
	}
	if err := a.store.Devices().Delete(r.Context(), sessionOf(r).person.ID, token); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// jsonBool is a required boolean of a request body: set tells an absent
// field from false, and null is refused like jsonString's.
type jsonBool struct{ set, v bool }

// UnmarshalJSON refuses null (see jsonString).
func (b *jsonBool) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return &json.UnmarshalTypeError{Value: "null", Type: reflect.TypeFor[bool]()}
	}
	b.set = true
	return json.Unmarshal(data, &b.v)
}
