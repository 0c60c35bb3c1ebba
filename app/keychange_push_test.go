package app

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah/digest"
)

// TestKeyChangePush: a client added or removed reaches each of the
// person's push devices through the relay as a key_change push with the
// key log's size after it and nothing secret; a person with no device
// gets nothing; a relay that hangs delays no API request, and a full
// queue drops and counts.
func TestKeyChangePush(t *testing.T) {
	ts := newTestServer(t)
	var (
		mu      sync.Mutex
		got     []map[string]any
		hang    = make(chan struct{}) // closed: answer at once
		hanging = false
	)
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p map[string]any
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, p)
		h := hanging
		mu.Unlock()
		if h {
			select {
			case <-hang:
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer relay.Close()
	l, err := digest.New(digest.Config{RelayURL: relay.URL, Now: ts.clock.Now}, ts.store, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts.app.cfg.Digests = l
	ts.store.OnKeyChange(l.KeyChanged)
	l.Start()
	defer l.Stop()
	defer close(hang)
	// wait returns what the relay got once it has n pushes.
	wait := func(n int) []map[string]any {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			g := slices.Clone(got)
			mu.Unlock()
			if len(g) >= n {
				return g
			}
		}
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the relay got %d pushes, want %d: %v", len(got), n, got)
		return nil
	}

	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	tokens := []string{"ann-phone-token-0123456789", "ann-tablet-token-0123456789"}
	for _, tok := range tokens {
		if r := ts.do(t, "PUT", "/api/v1/me/devices", ann.token, map[string]string{"token": tok, "platform": "ios"}); r.status/100 != 2 {
			t.Fatalf("register a device: %d %s", r.status, r.raw)
		}
	}
	// Bob (no device) first: one sender in order, so his push, had there
	// been one, reaches the relay before ann's.
	ts.addClient(t, bob)
	c := ts.addClient(t, ann)
	check := func(step string, pushes []map[string]any, size float64) {
		t.Helper()
		var seen []string
		for _, p := range pushes {
			keys := slices.Sorted(maps.Keys(p))
			if !slices.Equal(keys, []string{"key_log_size", "kind", "platform", "token"}) || p["kind"] != "key_change" ||
				p["key_log_size"] != size || p["platform"] != "ios" {
				t.Errorf("%s: the relay got %v, want a key_change of %s with key_log_size %v", step, p, ann.id, size)
			}
			seen = append(seen, p["token"].(string))
		}
		if slices.Sort(seen); !slices.Equal(seen, tokens) {
			t.Errorf("%s: pushes to %v, want one to each of %v", step, seen, tokens)
		}
	}
	check("added", wait(2), 1)
	if r := ts.do(t, "DELETE", "/api/v1/me/clients/"+c.id, ann.token, nil); r.status != 204 {
		t.Fatalf("remove the client: %d %s", r.status, r.raw)
	}
	check("removed", wait(4)[2:], 2)

	// The relay hangs: the API answers at once all the same, and the
	// changes past the queue are dropped and counted, never waited for.
	mu.Lock()
	hanging = true
	mu.Unlock()
	start := time.Now()
	ts.addClient(t, ann)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("adding a client took %v with the relay hanging", d)
	}
	wait(5) // the sender is in the hanging request
	start = time.Now()
	for range 1000 {
		l.KeyChanged(ann.id, 3)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("1,000 key changes took %v to queue with the relay hanging", d)
	}
	m := httptest.NewRecorder()
	ts.app.MetricsHandler().ServeHTTP(m, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"nah_key_change_pushes_sent_total 4\n", "nah_key_change_pushes_dropped_total 744\n"} {
		if !strings.Contains(m.Body.String(), want) {
			t.Errorf("the metrics lack %q", want)
		}
	}
}
