package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestDigestKill9MidMinute: 30 people's digests fall due in the same
// minute; the server is killed with SIGKILL in the middle of the minute's
// spread, after some pushes, and started again. Every person gets exactly
// one digest that day: each device token reaches the relay under one
// digest id only (a push in flight at the kill may reach it twice under
// that same id, which the relay drops), and no device token is in the log.
//
// Parallel: it mostly waits for the due minute (55 s wall, 5 s of CPU,
// measured alone), which the CPU-bound TestReplicaIntegrityAtScale fills.
func TestDigestKill9MidMinute(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	ids := map[string]map[string]int{} // token -> digest id -> requests
	requests := 0
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct {
			DigestID string `json:"digest_id"`
			Token    string `json:"token"`
		}
		json.NewDecoder(r.Body).Decode(&p)
		mu.Lock()
		if ids[p.Token] == nil {
			ids[p.Token] = map[string]int{}
		}
		ids[p.Token][p.DigestID]++
		requests++
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer relay.Close()
	people := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ids)
	}
	env := "NAH_PUSH_RELAY_URL=" + relay.URL
	dir := t.TempDir()
	p := start(t, dir, env)
	_, pat := p.signup(t, "pat")
	p.call("POST", "/api/v1/moments", pat, map[string]string{"body": base64.StdEncoding.EncodeToString([]byte("news"))})
	const n = 30
	tokens := make([]string, n)
	due := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	if time.Until(due) < 20*time.Second {
		due = due.Add(time.Minute)
	}
	for i := range n {
		_, tok := p.signup(t, fmt.Sprintf("kin%02d", i))
		_, inv, _ := p.call("POST", "/api/v1/invites", pat, nil)
		p.call("POST", "/api/v1/connections", tok, map[string]string{"code": inv["code"].(string)})
		tokens[i] = fmt.Sprintf("device-token-%02d-%s", i, strings.Repeat("x", 40))
		if st, _, _ := p.call("PUT", "/api/v1/me/devices/"+tokens[i], tok, map[string]string{"platform": "android"}); st != 204 {
			t.Fatalf("device: %d", st)
		}
		if st, out, _ := p.call("PUT", "/api/v1/me/digest", tok, map[string]any{"time": due.Format("15:04"), "timezone": "UTC", "enabled": true}); st != 200 {
			t.Fatalf("digest: %d %v", st, out)
		}
	}
	if time.Until(due) < 2*time.Second {
		t.Fatalf("the setup took too long: the digest minute %v has come", due)
	}
	// Sends spread over 10 s: kill once a third have gone.
	for deadline := time.Now().Add(time.Until(due) + 20*time.Second); people() < n/3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d pushes by %v\n%s", people(), due, p.log())
		}
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	before := people()
	if before == n {
		t.Fatalf("every push went before the kill; the test proved little")
	}

	p2 := start(t, dir, env)
	for deadline := time.Now().Add(30 * time.Second); people() < n && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
	}
	time.Sleep(time.Second) // anything more would show now
	mu.Lock()
	defer mu.Unlock()
	for _, tok := range tokens {
		if len(ids[tok]) != 1 {
			t.Errorf("%s…: %d digest ids (%v), want 1", tok[:16], len(ids[tok]), ids[tok])
		}
	}
	t.Logf("%d of %d pushed before the kill, %d requests in all", before, n, requests)
	for _, l := range []string{p.log(), p2.log()} {
		for _, tok := range tokens {
			if strings.Contains(l, tok) {
				t.Fatalf("the log holds a device token")
			}
		}
	}
	p2.cmd.Process.Signal(syscall.SIGTERM)
	<-p2.done
}
