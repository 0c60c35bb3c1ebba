package app

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah/digest"
)

// TestConsoleDigests: the Digests and push page shows the relay, the last
// run and the relay's errors, and a person's page their digest settings
// and device count; no page shows a device token.
func TestConsoleDigests(t *testing.T) {
	ts := newTestServer(t)
	c := signedInAdmin(t, ts)
	if p := get(t, c, ts.URL+"/console/digests"); p.status != 200 || !strings.Contains(p.body, "No digest loop runs") {
		t.Fatalf("without a loop: %d", p.status)
	}
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer relay.Close()
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	ts.connect(t, ann, bob)
	ts.post(t, bob, []byte("hi"))
	const token = "secret-device-token-0123456789"
	ts.do(t, "PUT", "/api/v1/me/devices/"+token, ann.token, map[string]string{"platform": "ios"})
	ts.clock.Advance(-time.Hour) // the settings precede the slot
	ts.do(t, "PUT", "/api/v1/me/digest", ann.token, map[string]any{"time": "12:00", "timezone": "UTC", "enabled": true})
	ts.clock.Advance(time.Hour)
	l, err := digest.New(digest.Config{RelayURL: relay.URL, Now: ts.clock.Now, Spread: -1, Backoff: time.Millisecond}, ts.store, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts.app.cfg.Digests = l
	if r := l.Run(ts.clock.Now()); r.Due != 1 || r.Failed != 1 {
		t.Fatalf("run: %+v", r)
	}
	p := get(t, c, ts.URL+"/console/digests")
	for _, want := range []string{strings.TrimPrefix(relay.URL, "http://"), `<td id="sent">0</td>`, "relay answered 503 Service Unavailable", "<svg"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the digests page lacks %q", want)
		}
	}
	pp := get(t, c, ts.URL+"/console/people/"+ann.id)
	for _, want := range []string{"12:00 UTC, on", `<td id="devices">1</td>`} {
		if !strings.Contains(pp.body, want) {
			t.Errorf("the person page lacks %q", want)
		}
	}
	m := httptest.NewRecorder()
	ts.app.MetricsHandler().ServeHTTP(m, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"nah_digests_due_total 1", "nah_digests_failed_total 1", `nah_push_relay_request_duration_seconds_bucket{le="+Inf"} 3`} {
		if !strings.Contains(m.Body.String(), want) {
			t.Errorf("the metrics lack %q", want)
		}
	}
	for _, body := range []string{p.body, pp.body, m.Body.String()} {
		if strings.Contains(body, token) {
			t.Error("a page shows the device token")
		}
	}
	if p := get(t, c, ts.URL+"/console/people/"+bob.id); !strings.Contains(p.body, "none chosen") {
		t.Error("bob's page does not say he chose no digest")
	}
}
