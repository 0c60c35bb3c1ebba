package app

import (
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/mls"
	"github.com/nah-app/nah/store"
)

// MLS clients, their KeyPackages and the key log (docs/api.md, "End-to-end
// encryption"; store/mls*.go keeps them).

// mlsKeyPackagesBody bounds an upload of KeyPackages: 100 of 16 KiB in
// base64, and the last-resort one, with room for the JSON.
const mlsKeyPackagesBody = (store.MLSMaxKeyPackages+1)*(store.MLSKeyPackageMaxBytes*4/3+8) + 1024

type clientJSON struct {
	ID           string `json:"id"`
	SignatureKey []byte `json:"signature_key"`
	Name         string `json:"name"`
	CreatedAt    string `json:"created_at"`
	KeyPackages  *int   `json:"key_packages,omitempty"`
	LastResort   *bool  `json:"last_resort,omitempty"`
}

func toClientJSON(c store.MLSClient, own bool) clientJSON {
	j := clientJSON{ID: c.ID, SignatureKey: c.SignatureKey, Name: c.Name, CreatedAt: nah.FormatTime(c.CreatedAt)}
	if own {
		j.KeyPackages, j.LastResort = &c.KeyPackages, &c.LastResort
	}
	return j
}

type keyLogHeadJSON struct {
	Size      int64  `json:"size"`
	Hash      string `json:"hash"`
	Signature []byte `json:"signature,omitempty"`
}

// handleClientCreate registers an MLS client of the caller.
func (a *App) handleClientCreate(w http.ResponseWriter, r *http.Request) {
	var in struct {
		SignatureKey []byte `json:"signature_key"`
		Name         string `json:"name"`
	}
	if err := decodeJSON(w, r, smallBody, &in); err != nil {
		a.writeError(w, r, err)
		return
	}
	// Suite 1's Ed25519 keys are 32 bytes, P-256's uncompressed points 65,
	// P-521's 133.
	if len(in.SignatureKey) < 32 || len(in.SignatureKey) > 256 {
		a.writeError(w, r, nah.Errorf(nah.Invalid, "invalid_signature_key", "signature_key is the client's MLS signature public key: 32 to 256 bytes in base64"))
		return
	}
	if len(in.Name) > 100 || !utf8.ValidString(in.Name) {
		a.writeError(w, r, nah.Errorf(nah.Invalid, "invalid_name", "a client's name is at most 100 bytes of UTF-8"))
		return
	}
	c, err := a.store.AddClient(r.Context(), sessionOf(r).person.ID, in.Name, in.SignatureKey)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toClientJSON(c, true))
}

// handleClients lists the caller's clients.
func (a *App) handleClients(w http.ResponseWriter, r *http.Request) {
	cs, _, err := a.store.Clients(r.Context(), sessionOf(r).person.ID)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := make([]clientJSON, len(cs))
	for i, c := range cs {
		out[i] = toClientJSON(c, true)
	}
	writeJSON(w, http.StatusOK, map[string]any{"clients": out})
}

// handleClientDelete removes one of the caller's clients.
func (a *App) handleClientDelete(w http.ResponseWriter, r *http.Request) {
	if err := a.store.RemoveClient(r.Context(), sessionOf(r).person.ID, pathParam(r, "id")); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleKeyPackagesAdd stores KeyPackages of one of the caller's clients,
// each checked: a KeyPackage of a suite nah verifies, signed by the
// client's registered key, with the client's id as its identity.
func (a *App) handleKeyPackagesAdd(w http.ResponseWriter, r *http.Request) {
	me, id := sessionOf(r).person.ID, pathParam(r, "id")
	held := heldFor(r, mlsKeyPackagesBody)
	if err := a.takeBulkOrOverloaded(held); err != nil {
		a.writeError(w, r, err)
		return
	}
	defer a.mem.give(int64(held))
	var in struct {
		KeyPackages [][]byte `json:"key_packages"`
		LastResort  []byte   `json:"last_resort"`
	}
	if err := decodeJSON(w, r, mlsKeyPackagesBody, &in); err != nil {
		a.writeError(w, r, err)
		return
	}
	if len(in.KeyPackages) > store.MLSMaxKeyPackages {
		a.writeError(w, r, nah.Errorf(nah.Conflict, "too_many_key_packages", "a client has at most %d unclaimed KeyPackages", store.MLSMaxKeyPackages))
		return
	}
	var kps []store.KeyPackageUpload
	var last *store.KeyPackageUpload
	for i, b := range in.KeyPackages {
		kp, err := checkKeyPackage(b, id)
		if err != nil {
			a.writeError(w, r, nah.Errorf(err.Code, err.Reason, "key_packages[%d]: %s", i, err.Message))
			return
		}
		kps = append(kps, kp)
	}
	if in.LastResort != nil {
		kp, err := checkKeyPackage(in.LastResort, id)
		if err != nil {
			a.writeError(w, r, nah.Errorf(err.Code, err.Reason, "last_resort: %s", err.Message))
			return
		}
		last = &kp
	}
	left, hasLast, err := a.store.AddKeyPackages(r.Context(), me, id, kps, last)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"key_packages": left, "last_resort": hasLast})
}

// checkKeyPackage reads and verifies one uploaded KeyPackage of client.
func checkKeyPackage(b []byte, client string) (store.KeyPackageUpload, *nah.Error) {
	if len(b) > store.MLSKeyPackageMaxBytes {
		return store.KeyPackageUpload{}, nah.Errorf(nah.TooLarge, "key_package_too_large", "a KeyPackage is at most %d bytes", store.MLSKeyPackageMaxBytes)
	}
	kp, err := mls.ParseKeyPackage(b)
	if err != nil {
		return store.KeyPackageUpload{}, nah.Errorf(nah.Invalid, "invalid_key_package", "not an MLS KeyPackage: %v", err)
	}
	if err := kp.Verify(); errors.Is(err, mls.ErrUnsupportedSuite) {
		return store.KeyPackageUpload{}, nah.Errorf(nah.Invalid, "unsupported_cipher_suite", "cipher suite %d is not one nah verifies (1, 2, 3, 5 and 7 are)", kp.CipherSuite)
	} else if err != nil {
		return store.KeyPackageUpload{}, nah.Errorf(nah.Invalid, "invalid_key_package", "%v", err)
	}
	if kp.Leaf.CredentialType != mls.CredentialBasic || string(kp.Leaf.Identity) != client {
		return store.KeyPackageUpload{}, nah.Errorf(nah.Invalid, "wrong_identity", "a KeyPackage's credential is a basic one whose identity is the client id %s", client)
	}
	return store.KeyPackageUpload{Body: b, SignatureKey: kp.Leaf.SignatureKey}, nil
}

// mayKnow refuses, as a missing person, a caller who may not see person id's clients and claim their
// KeyPackages: only themselves or a connection may (mayRead).
func (a *App) mayKnow(r *http.Request, id string) error {
	ok, err := a.mayRead(r, sessionOf(r).person.ID, id)
	if err == nil && !ok {
		err = nah.ErrNoPerson()
	}
	return err
}

// handlePersonClients lists a person's clients with their key log head.
func (a *App) handlePersonClients(w http.ResponseWriter, r *http.Request) {
	id := pathParam(r, "id")
	if err := a.mayKnow(r, id); err != nil {
		a.writeError(w, r, err)
		return
	}
	cs, head, err := a.store.Clients(r.Context(), id)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := make([]clientJSON, len(cs))
	for i, c := range cs {
		out[i] = toClientJSON(c, false)
	}
	writeJSON(w, http.StatusOK, map[string]any{"clients": out,
		"key_log": keyLogHeadJSON{Size: head.Size, Hash: hex.EncodeToString(head.Hash)}})
}

// handleClaim hands out one KeyPackage of each of a person's clients.
func (a *App) handleClaim(w http.ResponseWriter, r *http.Request) {
	id := pathParam(r, "id")
	if err := a.mayKnow(r, id); err != nil {
		a.writeError(w, r, err)
		return
	}
	kps, err := a.store.ClaimKeyPackages(r.Context(), id)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	type claimed struct {
		Client     string `json:"client"`
		KeyPackage []byte `json:"key_package"`
		LastResort bool   `json:"last_resort"`
	}
	out := make([]claimed, len(kps))
	for i, kp := range kps {
		out[i] = claimed{kp.Client, kp.Body, kp.LastResort}
	}
	writeJSON(w, http.StatusOK, map[string]any{"key_packages": out})
}

// handleKeyLog returns a person's key log after a position, with its
// signed head.
func (a *App) handleKeyLog(w http.ResponseWriter, r *http.Request) {
	id := pathParam(r, "id")
	if err := a.mayKnow(r, id); err != nil {
		a.writeError(w, r, err)
		return
	}
	var after int64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			a.writeError(w, r, nah.Errorf(nah.Invalid, "invalid_after", "after is a key log position: a whole number from 0"))
			return
		}
		after = n
	}
	es, head, err := a.store.KeyLog(r.Context(), id, after)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	type entry struct {
		Pos          int64  `json:"pos"`
		Kind         string `json:"kind"`
		Client       string `json:"client"`
		SignatureKey []byte `json:"signature_key"`
		At           string `json:"at"`
		Hash         string `json:"hash"`
	}
	out := make([]entry, len(es))
	for i, e := range es {
		out[i] = entry{e.Pos, e.Kind, e.Client, e.SignatureKey, nah.FormatTime(e.At), hex.EncodeToString(e.Hash)}
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": out,
		"head": keyLogHeadJSON{Size: head.Size, Hash: hex.EncodeToString(head.Hash), Signature: head.Signature}})
}

// handleKeyLogKey returns the key that signs every key log head.
func (a *App) handleKeyLogKey(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"public_key": []byte(a.store.KeyLogPublicKey())})
}
