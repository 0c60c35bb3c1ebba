package app

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/nah-app/nah/digest"
)

// checklistOf is the overview's first-run checklist: each item's id and
// whether it is done, and the how of those not done; nil when the
// overview shows none.
func checklistOf(t *testing.T, c *http.Client, base string) (done map[string]bool, how map[string]string) {
	t.Helper()
	p := get(t, c, base+"/console")
	if p.status != 200 {
		t.Fatalf("overview: %d", p.status)
	}
	doc := parseConsole(t, p.body)
	items := doc.find("data-testid", "check")
	if len(items) == 0 {
		return nil, nil
	}
	done, how = map[string]bool{}, map[string]string{}
	for _, li := range items {
		id, _ := attr(li, "data-check")
		d, _ := attr(li, "data-done")
		done[id] = d == "true"
		for n := range li.Descendants() {
			if v, _ := attr(n, "data-testid"); v == "how" {
				how[id] = text(n)
			}
		}
	}
	return done, how
}

// TestFirstRunChecklist: a new server's overview lists what it still
// needs (HTTPS, a way to join, backups off the data's disk, the push
// relay), each not done with how to do it in the environment file; each
// turns done as it is done: a join code made, open sign-up, an https
// public address, a relay.
func TestFirstRunChecklist(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.OpenSignup = false })
	c := signedInAdmin(t, ts)
	done, how := checklistOf(t, c, ts.URL)
	want := map[string]bool{"https": false, "joining": false, "backups": false, "push": false}
	if len(done) != 4 || !maps.Equal(done, want) {
		t.Fatalf("a new server's checklist: %v, want %v", done, want)
	}
	for id, says := range map[string]string{"https": "Set NAH_PUBLIC_URL=https://", "backups": "Set NAH_REPLICA_URL", "push": "Set NAH_PUSH_RELAY_URL", "joining": "Create a join code"} {
		if !strings.HasPrefix(how[id], says) {
			t.Errorf("%s says how: %q, want it to start %q", id, how[id], says)
		}
	}
	if !strings.HasSuffix(how["https"], "in the environment file (/etc/nah/nah.env unless you chose another), then restart the server.") {
		t.Errorf("https does not say where and then restart: %q", how["https"])
	}
	if p := postForm(t, c, ts.URL+"/console/joincodes", url.Values{"ttl": {"24h"}}, "Origin", ts.URL); p.status >= 400 {
		t.Fatalf("join code: %d", p.status)
	}
	if done, _ = checklistOf(t, c, ts.URL); !done["joining"] || done["https"] {
		t.Fatalf("after a join code: %v", done)
	}

	// Open sign-up, an https address and a relay; the backups on the data's
	// own disk are still to do.
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer relay.Close()
	rs := newReplicatedServer(t, func(c *serverConfig) { c.OpenSignup, c.PublicURL = true, "https://nah.example" })
	l, err := digest.New(digest.Config{RelayURL: relay.URL}, rs.store, nil)
	if err != nil {
		t.Fatal(err)
	}
	rs.app.cfg.Digests = l // no request has been served yet
	c = signedInAdmin(t, rs.testServer)
	done, how = checklistOf(t, c, rs.URL)
	if want := map[string]bool{"https": true, "joining": true, "backups": false, "push": true}; !maps.Equal(done, want) {
		t.Fatalf("checklist: %v, want %v", done, want)
	}
	if len(how) != 1 || !strings.HasPrefix(how["backups"], "Set NAH_REPLICA_URL to a folder on another disk") {
		t.Fatalf("how: %v", how)
	}
}
