package app

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"testing"

	"github.com/nah-app/nah/internal/mlswire"
)

// The MLS messages the tests send are written by internal/mlswire, which
// the bench uses too; it is checked against package mls on its own.

// mlsClient is a phone's MLS client in a test: its signature key and the
// id nah gave it.
type mlsClient struct {
	id   string
	priv ed25519.PrivateKey
}

func newMLSKey() ed25519.PrivateKey {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	return priv
}

func (c mlsClient) pub() []byte { return c.priv.Public().(ed25519.PublicKey) }

// kpMessage is c's KeyPackage in its MLSMessage, as uploaded.
func (c mlsClient) kpMessage() []byte { return mlswire.KeyPackage(c.priv, c.id) }

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// addClient registers a new MLS client of a through the API.
func (ts *testServer) addClient(t *testing.T, a account) mlsClient {
	t.Helper()
	c := mlsClient{priv: newMLSKey()}
	r := ts.do(t, "POST", "/api/v1/me/clients", a.token, map[string]string{"signature_key": b64(c.pub()), "name": a.handle + "'s phone"})
	if r.status != 201 {
		t.Fatalf("add client: %d %s", r.status, r.raw)
	}
	c.id = r.str("id")
	return c
}

// uploadKPs uploads n KeyPackages of c and a last-resort one.
func (ts *testServer) uploadKPs(t *testing.T, a account, c mlsClient, n int) {
	t.Helper()
	var kps []string
	for range n {
		kps = append(kps, b64(c.kpMessage()))
	}
	r := ts.do(t, "POST", "/api/v1/me/clients/"+c.id+"/key_packages", a.token, map[string]any{"key_packages": kps, "last_resort": b64(c.kpMessage())})
	if r.status != 200 {
		t.Fatalf("upload key packages: %d %s", r.status, r.raw)
	}
}
