package app

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// TestInvitesAreBounded: a person has at most store.MaxOpenInvites open
// invites (409 invite_limit past them, the limit said in the message);
// expired ones are purged when the next is made, and a used one frees its
// place. The directory holds no more than the bound for them however many
// they ask for.
func TestInvitesAreBounded(t *testing.T) {
	ts := newTestServer(t)
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	var first string
	for i := range store.MaxOpenInvites {
		r := ts.do(t, "POST", "/api/v1/invites", ann.token, nil)
		if r.status != 201 {
			t.Fatalf("invite %d: %d %s", i, r.status, r.raw)
		}
		if i == 0 {
			first = r.str("code")
		}
	}
	for range 50 {
		if r := ts.do(t, "POST", "/api/v1/invites", ann.token, nil); r.status != 409 || r.errCode() != "invite_limit" {
			t.Fatalf("an invite past %d open ones: %d %s, want 409 invite_limit", store.MaxOpenInvites, r.status, r.raw)
		}
	}
	if r := ts.do(t, "POST", "/api/v1/connections", bob.token, map[string]string{"code": first}); r.status != 201 {
		t.Fatalf("bob redeems: %d %s", r.status, r.raw)
	}
	if r := ts.do(t, "POST", "/api/v1/invites", ann.token, nil); r.status != 201 {
		t.Fatalf("an invite once one was used: %d %s", r.status, r.raw)
	}
	ts.clock.Advance(nah.InviteTTL + time.Second)
	for i := range store.MaxOpenInvites {
		if r := ts.do(t, "POST", "/api/v1/invites", ann.token, nil); r.status != 201 {
			t.Fatalf("invite %d once the others expired: %d %s", i, r.status, r.raw)
		}
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(ts.dir, "directory.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows int
	if err := db.QueryRow(`SELECT count(*) FROM invites WHERE person_id = ?`, ann.id).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	t.Logf("ann asked for %d invites; the directory holds %d rows of hers", 2*store.MaxOpenInvites+51, rows)
	if rows > store.MaxOpenInvites+1 {
		t.Errorf("the directory holds %d invites of ann's, want at most %d open and the used one", rows, store.MaxOpenInvites)
	}
}
