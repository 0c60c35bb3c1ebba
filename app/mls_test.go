package app

import (
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/nah-app/nah/internal/mlswire"
)

// TestMLSClaim: a connection claims one KeyPackage of each client, never one
// handed out before (two claims at once included), then the last-resort one
// again and again; a stranger cannot claim, and a KeyPackage that is not
// the client's is refused.
func TestMLSClaim(t *testing.T) {
	ts := newTestServer(t)
	ann, bob, eve := ts.signup(t, "ann"), ts.signup(t, "bob"), ts.signup(t, "eve")
	ts.connect(t, ann, bob)
	c := ts.addClient(t, ann)
	ts.uploadKPs(t, ann, c, 2)

	other := mlsClient{id: c.id, priv: newMLSKey()}
	wrongID := mlsClient{id: strings.Replace(c.id, c.id[len(c.id)-4:], "0000", 1), priv: c.priv}
	for _, tc := range []struct {
		kp   []byte
		code string
	}{
		{other.kpMessage(), "wrong_signature_key"},
		{wrongID.kpMessage(), "wrong_identity"},
		{mlswire.Message(5, mlswire.RawKeyPackage(c.priv, c.id)[:50]), "invalid_key_package"},
	} {
		r := ts.do(t, "POST", "/api/v1/me/clients/"+c.id+"/key_packages", ann.token, map[string]any{"key_packages": []string{b64(tc.kp)}})
		if r.status != 400 || r.errCode() != tc.code {
			t.Errorf("a bad KeyPackage: %d %s, want 400 %s", r.status, r.raw, tc.code)
		}
	}
	if r := ts.do(t, "POST", "/api/v1/people/"+ann.id+"/key_packages/claim", eve.token, nil); r.status != 404 {
		t.Errorf("a stranger claims: %d %s, want 404", r.status, r.raw)
	}

	seen := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			r := ts.do(t, "POST", "/api/v1/people/"+ann.id+"/key_packages/claim", bob.token, nil)
			kps, _ := r.json["key_packages"].([]any)
			if r.status != 200 || len(kps) != 1 {
				t.Errorf("claim: %d %s", r.status, r.raw)
				return
			}
			kp := kps[0].(map[string]any)
			mu.Lock()
			defer mu.Unlock()
			if kp["last_resort"] != false || seen[kp["key_package"].(string)] {
				t.Errorf("claim handed out %v, a KeyPackage claimed before or the last-resort one while others were left", kp["last_resort"])
			}
			seen[kp["key_package"].(string)] = true
		})
	}
	wg.Wait()
	var last string
	for i := range 2 {
		r := ts.do(t, "POST", "/api/v1/people/"+ann.id+"/key_packages/claim", bob.token, nil)
		kp := r.json["key_packages"].([]any)[0].(map[string]any)
		if kp["last_resort"] != true || (i == 1 && kp["key_package"] != last) {
			t.Errorf("claim %d once none is left: %s, want the last-resort one each time", i, r.raw)
		}
		last, _ = kp["key_package"].(string)
	}
	r := ts.do(t, "GET", "/api/v1/me/clients", ann.token, nil)
	if got := fmt.Sprint(r.json["clients"]); !strings.Contains(got, "key_packages:0") || !strings.Contains(got, "last_resort:true") {
		t.Errorf("own clients after the claims: %s", r.raw)
	}
}

// TestMLSBounds: clients a person, KeyPackages a client and their size are
// bounded with clear 4xx codes.
func TestMLSBounds(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	var c mlsClient
	for range 8 {
		c = ts.addClient(t, ann)
	}
	r := ts.do(t, "POST", "/api/v1/me/clients", ann.token, map[string]string{"signature_key": b64(mlsClient{priv: newMLSKey()}.pub())})
	if r.status != 409 || r.errCode() != "too_many_clients" {
		t.Errorf("a 9th client: %d %s", r.status, r.raw)
	}
	ts.uploadKPs(t, ann, c, 100)
	r = ts.do(t, "POST", "/api/v1/me/clients/"+c.id+"/key_packages", ann.token, map[string]any{"key_packages": []string{b64(c.kpMessage())}})
	if r.status != 409 || r.errCode() != "too_many_key_packages" {
		t.Errorf("a 101st KeyPackage: %d %s", r.status, r.raw)
	}
	big := make([]byte, 16<<10+1)
	r = ts.do(t, "POST", "/api/v1/me/clients/"+c.id+"/key_packages", ann.token, map[string]any{"key_packages": []string{base64.StdEncoding.EncodeToString(big)}})
	if r.status != 413 || r.errCode() != "key_package_too_large" {
		t.Errorf("a KeyPackage over 16 KiB: %d %s", r.status, r.raw)
	}
}
