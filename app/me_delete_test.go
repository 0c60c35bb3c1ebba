package app

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah/internal/testutil"
)

// TestDeleteMe: the answers of DELETE /api/v1/me, and what is gone at once.
func TestDeleteMe(t *testing.T) {
	ts := newTestServer(t)
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	ts.connect(t, ann, bob)
	ts.post(t, ann, []byte("hello"))
	// A second phone, whose token is in the token cache.
	r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"})
	phone := r.str("token")
	if r := ts.do(t, "GET", "/api/v1/me", phone, nil); r.status != 200 {
		t.Fatalf("second phone: %d", r.status)
	}
	inv := ts.do(t, "POST", "/api/v1/invites", ann.token, nil).str("code")

	for _, c := range []struct {
		name   string
		token  string
		body   any
		status int
		code   string
	}{
		{"no token", "", map[string]string{"password": "password-ann"}, 401, "missing_token"},
		{"no password", ann.token, map[string]string{}, 400, "password_required"},
		{"empty password", ann.token, map[string]string{"password": ""}, 400, "password_required"},
		{"null password", ann.token, `{"password":null}`, 400, "invalid_json"},
		{"not JSON", ann.token, `password`, 400, "invalid_json"},
		{"wrong password", ann.token, map[string]string{"password": "password-bob"}, 403, "wrong_password"},
		{"someone else's password", bob.token, map[string]string{"password": "password-ann"}, 403, "wrong_password"},
		{"too long", ann.token, map[string]string{"password": strings.Repeat("x", 300)}, 403, "wrong_password"},
	} {
		r := ts.do(t, "DELETE", "/api/v1/me", c.token, c.body)
		if r.status != c.status || r.errCode() != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, r.status, r.raw, c.status, c.code)
		}
	}
	if r := ts.do(t, "GET", "/api/v1/me", ann.token, nil); r.status != 200 {
		t.Fatalf("a refused delete deleted: %d", r.status)
	}

	if r := ts.do(t, "DELETE", "/api/v1/me", ann.token, map[string]string{"password": "password-ann"}); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	for _, tok := range []string{ann.token, phone} {
		if r := ts.do(t, "GET", "/api/v1/me", tok, nil); r.status != 401 {
			t.Errorf("a session survived the delete: %d", r.status)
		}
	}
	if r := ts.do(t, "DELETE", "/api/v1/me", ann.token, map[string]string{"password": "password-ann"}); r.status != 401 {
		t.Errorf("delete again: %d", r.status)
	}
	if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"}); r.status != 401 {
		t.Errorf("sign-in after delete: %d", r.status)
	}
	if r := ts.do(t, "POST", "/api/v1/accounts", "", map[string]string{"handle": "ann", "password": "password-new"}); r.status != 409 || r.errCode() != "handle_taken" {
		t.Errorf("sign-up with a deleted handle: %d %s", r.status, r.raw)
	}
	if r := ts.do(t, "POST", "/api/v1/connections", bob.token, map[string]string{"code": inv}); r.status != 404 {
		t.Errorf("redeem a deleted person's invite: %d %s", r.status, r.raw)
	}
	if cs := ts.do(t, "GET", "/api/v1/connections", bob.token, nil); len(cs.json["connections"].([]any)) != 0 {
		t.Errorf("bob still connected: %s", cs.raw)
	}
	if items := ts.readAll(t, bob.token, "/api/v1/feed", 10); len(items) != 0 {
		t.Errorf("bob's feed still shows ann: %v", items)
	}
	if _, err := os.Stat(filepath.Join(ts.dir, "people", ann.id)); !os.IsNotExist(err) {
		t.Errorf("people/<id> after delete: %v", err)
	}
}

// TestDeleteMeCountsAsSignIn: wrong passwords count against the handle's
// sign-in limit, and past it even the right one is 429.
func TestDeleteMeCountsAsSignIn(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	for i := range signinFailuresPerHandle {
		if r := ts.do(t, "DELETE", "/api/v1/me", ann.token, map[string]string{"password": "wrong-password"}); r.status != 403 {
			t.Fatalf("attempt %d: %d", i, r.status)
		}
	}
	if r := ts.do(t, "DELETE", "/api/v1/me", ann.token, map[string]string{"password": "password-ann"}); r.status != 429 {
		t.Fatalf("past the limit: %d", r.status)
	}
	if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"}); r.status != 429 {
		t.Fatalf("sign-in past the limit: %d", r.status)
	}
	ts.clock.Advance(signinWindow)
	if r := ts.do(t, "DELETE", "/api/v1/me", ann.token, map[string]string{"password": "password-ann"}); r.status != 204 {
		t.Fatalf("after the window: %d", r.status)
	}
}

// TestDeleteMeUnderConcurrency: while ann deletes herself, 8 goroutines
// post as her from two phones, read her connections' feeds and redeem her
// invites. Nothing is a 500, no folder comes back under people/, and once
// the delete has answered her connections' feeds no longer show her.
func TestDeleteMeUnderConcurrency(t *testing.T) {
	ts := newTestServer(t)
	ann, bob, cat := ts.signup(t, "ann"), ts.signup(t, "bob"), ts.signup(t, "cat")
	ts.connect(t, ann, bob)
	ts.connect(t, ann, cat)
	ts.post(t, ann, []byte("before"))
	phone := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"}).str("token")
	var invites []string
	for range 8 {
		invites = append(invites, ts.do(t, "POST", "/api/v1/invites", ann.token, nil).str("code"))
	}
	others := make([]account, 8)
	for i := range others {
		others[i] = ts.signup(t, "kid"+string(rune('a'+i)))
	}
	body := map[string]string{"body": base64.StdEncoding.EncodeToString([]byte("during"))}

	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range 8 {
		wg.Go(func() {
			<-start
			for i := range 15 {
				var r response
				switch g % 4 {
				case 0, 1: // posting from either phone
					tok := ann.token
					if g == 1 {
						tok = phone
					}
					r = ts.do(t, "POST", "/api/v1/moments", tok, body)
					if r.status != 201 && r.status != 401 && r.status != 404 {
						t.Errorf("post: %d %s", r.status, r.raw)
					}
				case 2: // reading the feeds of her connections
					r = ts.do(t, "GET", "/api/v1/feed", []string{bob.token, cat.token}[i%2], nil)
					if r.status != 200 {
						t.Errorf("feed: %d %s", r.status, r.raw)
					}
				case 3: // redeeming her invites, and making new ones
					if i == 0 {
						r = ts.do(t, "POST", "/api/v1/connections", others[g].token, map[string]string{"code": invites[g]})
						if r.status != 201 && r.status != 404 {
							t.Errorf("redeem: %d %s", r.status, r.raw)
						}
					} else {
						r = ts.do(t, "POST", "/api/v1/invites", phone, nil)
						if r.status != 201 && r.status != 401 {
							t.Errorf("invite: %d %s", r.status, r.raw)
						}
					}
				}
			}
		})
	}
	close(start)
	time.Sleep(10 * time.Millisecond)
	if r := ts.do(t, "DELETE", "/api/v1/me", ann.token, map[string]string{"password": "password-ann"}); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	for _, a := range append([]account{bob, cat}, others...) {
		for _, it := range ts.readAll(t, a.token, "/api/v1/feed", 50) {
			if it.Author == ann.id {
				t.Fatalf("%s's feed shows ann after the delete", a.handle)
			}
		}
	}
	wg.Wait()
	if _, err := os.Stat(filepath.Join(ts.dir, "people", ann.id)); !os.IsNotExist(err) {
		t.Fatalf("people/<id> after delete: %v", err)
	}
	for _, a := range append([]account{bob, cat}, others...) {
		if c, err := ts.store.Connected(context.Background(), a.id, ann.id); err != nil || c {
			t.Errorf("%s still connected to ann (%v)", a.handle, err)
		}
	}
}

// TestDeletePurgeLeavesNoTrace: within the grace the handle is taken and the
// folder waits under deleted/; after it (the store's clock moved past the
// grace, then the sweep's PurgeDeleted) the handle is free, and no file
// name and no file's bytes under the data directory hold the person's id.
func TestDeletePurgeLeavesNoTrace(t *testing.T) {
	ts := newTestServer(t)
	ann, bob, cat := ts.signup(t, "ann"), ts.signup(t, "bob"), ts.signup(t, "cat")
	ts.connect(t, ann, bob) // ann's invite, used by bob
	ts.connect(t, cat, ann) // cat's invite, used by ann
	for range 3 {
		ts.post(t, ann, []byte("a moment"))
	}
	if r := ts.do(t, "DELETE", "/api/v1/me", ann.token, map[string]string{"password": "password-ann"}); r.status != 204 {
		t.Fatalf("delete: %d", r.status)
	}
	if _, err := os.Stat(filepath.Join(ts.dir, "deleted", ann.id, "person.db")); err != nil {
		t.Fatalf("the folder is not waiting under deleted/: %v", err)
	}
	ts.clock.Advance(7*24*time.Hour - time.Second)
	if n, err := ts.store.PurgeDeleted(t.Context()); n != 0 || err != nil {
		t.Fatalf("purged within the grace: %d %v", n, err)
	}
	if r := ts.do(t, "POST", "/api/v1/accounts", "", map[string]string{"handle": "ann", "password": "password-new"}); r.status != 409 {
		t.Fatalf("sign-up within the grace: %d", r.status)
	}
	ts.clock.Advance(time.Second)
	if n, err := ts.store.PurgeDeleted(t.Context()); n != 1 || err != nil {
		t.Fatalf("purge: %d %v", n, err)
	}
	if r := ts.do(t, "POST", "/api/v1/accounts", "", map[string]string{"handle": "ann", "password": "password-new"}); r.status != 201 {
		t.Fatalf("sign-up after the purge: %d %s", r.status, r.raw)
	}
	ts.Close()
	if err := ts.store.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.NoTrace(t, ts.dir, ann.id)
}

// TestDeleteGraceZeroPurgesAtOnce: NAH_DELETE_GRACE=0 leaves nothing to undo.
func TestDeleteGraceZeroPurgesAtOnce(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.DeleteGrace = -1 })
	ann := ts.signup(t, "ann")
	ts.post(t, ann, []byte("a moment"))
	if r := ts.do(t, "DELETE", "/api/v1/me", ann.token, map[string]string{"password": "password-ann"}); r.status != 204 {
		t.Fatalf("delete: %d", r.status)
	}
	if r := ts.do(t, "POST", "/api/v1/accounts", "", map[string]string{"handle": "ann", "password": "password-new"}); r.status != 201 {
		t.Fatalf("sign-up after the purge: %d %s", r.status, r.raw)
	}
	ts.Close()
	if err := ts.store.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.NoTrace(t, ts.dir, ann.id)
}
