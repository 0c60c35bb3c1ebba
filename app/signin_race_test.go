package app

import (
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nah-app/nah/store"
)

// TestSignInDuringResetKeepsNoSession: sign-ins with the old password that
// are hashing while a reset link sets a new one make no session that
// outlives the reset. Four clients sign in again and again with bcrypt at
// cost 10 (~50 ms here, the window) while the link is used; afterwards
// every token any of them was given is refused.
func TestSignInDuringResetKeepsNoSession(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) {
		c.PasswordCost = 10
		c.SignupPerHour = 0
	})
	dan := ts.signup(t, "dan")
	link, err := ts.store.CreateLink(t.Context(), store.LinkReset, dan.id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		tokens []string
		stop   atomic.Bool
		wg     sync.WaitGroup
	)
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "dan", "password": "password-dan"})
				if r.status == 201 {
					mu.Lock()
					tokens = append(tokens, r.str("token"))
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	if p := postForm(t, consoleClient(t), ts.URL+"/reset/"+link, url.Values{"password": {"a-new-password"}, "password2": {"a-new-password"}}); p.status != 200 {
		t.Fatalf("reset: %d %s", p.status, p.body)
	}
	stop.Store(true)
	wg.Wait()
	alive := 0
	for _, tok := range tokens {
		if r := ts.do(t, "GET", "/api/v1/me", tok, nil); r.status != 401 {
			alive++
		}
	}
	t.Logf("%d sessions made with the old password; %d still work after the reset", len(tokens), alive)
	if len(tokens) == 0 {
		t.Fatal("no sign-in worked before the reset")
	}
	if alive != 0 {
		t.Errorf("%d of %d sessions made with the old password work after the reset", alive, len(tokens))
	}
	if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "dan", "password": "a-new-password"}); r.status != 201 {
		t.Errorf("sign-in with the new password: %d", r.status)
	}
}
