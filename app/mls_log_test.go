package app

import (
	"database/sql"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nah-app/nah/internal/mlswire"
	"github.com/nah-app/nah/store"
)

// logRows counts the commits ann's file keeps, read beside the server.
func (f *mlsFamily) logRows(t *testing.T) (n int) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(f.ts.dir, "people", f.ann.id, "person.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRow(`SELECT count(*) FROM mls_commits`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// commitAt commits, as ann's client at leaf 0, an empty commit at epoch
// with the new epoch's GroupInfo.
func (f *mlsFamily) commitAt(t *testing.T, epoch uint64) {
	t.Helper()
	r := f.ts.do(t, "POST", f.commits, f.ann.token, map[string]string{
		"commit":     b64(mlswire.Commit([]byte(f.gid), epoch, 0, nil)),
		"group_info": b64(mlswire.GroupInfo([]byte(f.gid), epoch+1, 0)),
	})
	if r.status != 201 {
		t.Fatalf("commit at epoch %d: %d %s", epoch, r.status, r.raw)
	}
}

// fetch is GET commits after an epoch by a (client c when not zero).
func (f *mlsFamily) fetch(t *testing.T, a account, c mlsClient, after int) response {
	t.Helper()
	path := f.commits + "?after=" + strconv.Itoa(after)
	if c.id != "" {
		path += "&client=" + c.id
	}
	return f.ts.do(t, "GET", path, a.token, nil)
}

// TestMLSLogPruned: the commit log is kept while a member client has not
// passed it, pruned once every member has, and pruned past the age bound
// even when a member is behind, who then gets 410 log_pruned with the
// GroupInfo's path and joins again with an external commit.
func TestMLSLogPruned(t *testing.T) {
	f := newMLSFamily(t)
	ts, ann, bob := f.ts, f.ann, f.bob
	f.addBob(t) // epoch 1: bob joins at 1, ann has passed 0
	for e := range uint64(4) {
		f.commitAt(t, e+1)
	}
	before := f.logRows(t)

	// Ann's client has passed epoch 5, bob's only 1: bob holds 2 to 5.
	if r := f.fetch(t, ann, f.annC, 5); r.status != 200 {
		t.Fatalf("ann fetches after 5: %d %s", r.status, r.raw)
	}
	behind := f.logRows(t)
	if r := f.fetch(t, bob, f.bobC, 1); r.status != 200 || len(r.json["commits"].([]any)) != 4 {
		t.Errorf("bob, behind at epoch 1, fetches: %d %s, want the 4 commits he has not passed", r.status, r.raw)
	}
	if r := f.fetch(t, ann, mlsClient{}, 0); r.status != 410 || r.errCode() != "log_pruned" || r.json["epoch"] != 5.0 ||
		r.json["group_info"] != "/api/v1/people/"+ann.id+"/group/info" {
		t.Errorf("a fetch after epoch 0, which every member has passed: %d %s, want 410 log_pruned with the GroupInfo's path", r.status, r.raw)
	}
	if r := f.fetch(t, bob, f.annC, 1); r.status != 400 || r.errCode() != "not_your_client" {
		t.Errorf("bob fetches as ann's client: %d %s, want 400 not_your_client", r.status, r.raw)
	}

	// Bob's client passes 5 too: nothing is left that a member needs.
	f.fetch(t, bob, f.bobC, 5)
	passed := f.logRows(t)
	if passed != 0 {
		t.Errorf("%d commits kept once every member passed the group's epoch, want 0", passed)
	}
	if r := f.fetch(t, bob, f.bobC, 5); r.status != 200 || len(r.json["commits"].([]any)) != 0 {
		t.Errorf("a fetch at the group's epoch after the log is pruned: %d %s", r.status, r.raw)
	}

	// Ann commits 3 times; bob's client stays at 5 while 91 days go by
	// (each session used within 90 days), then ann's next commit prunes
	// the 3 by age: bob is told to join again, and does.
	for e := range uint64(3) {
		f.commitAt(t, 5+e)
	}
	ts.clock.Advance(50 * 24 * time.Hour)
	ts.do(t, "GET", "/api/v1/me", ann.token, nil)
	ts.do(t, "GET", "/api/v1/me", bob.token, nil)
	ts.clock.Advance(store.MLSCommitMaxAge - 49*24*time.Hour)
	f.commitAt(t, 8)
	aged := f.logRows(t)
	if aged != 1 {
		t.Errorf("%d commits kept after 91 days with bob behind, want 1 (the newest)", aged)
	}
	r := f.fetch(t, bob, f.bobC, 5)
	if r.status != 410 || r.errCode() != "log_pruned" || r.json["epoch"] != 9.0 {
		t.Fatalf("bob, behind past the age bound, fetches: %d %s, want 410 log_pruned at epoch 9", r.status, r.raw)
	}
	if r := ts.do(t, "GET", r.json["group_info"].(string), bob.token, nil); r.status != 200 {
		t.Errorf("the GroupInfo the 410 names: %d %s", r.status, r.raw)
	}
	rejoin := func(a account, c mlsClient, removes ...[]byte) response {
		return ts.do(t, "POST", f.commits, a.token, map[string]string{
			"commit":     b64(mlswire.ExternalCommit([]byte(f.gid), 9, mlswire.UpdatePath(c.priv, c.id, 2), removes...)),
			"group_info": b64(mlswire.GroupInfo([]byte(f.gid), 10, 0)),
		})
	}
	for _, tc := range []struct {
		who     account
		as      mlsClient
		removes [][]byte
		code    string
	}{
		{bob, f.annC, [][]byte{mlswire.Remove(1)}, "not_your_client"},
		{bob, f.bobC, [][]byte{mlswire.Remove(0)}, "not_your_leaf"},
		{bob, f.bobC, nil, "already_member"},
	} {
		if r := rejoin(tc.who, tc.as, tc.removes...); r.status/100 != 4 || r.errCode() != tc.code {
			t.Errorf("an external commit by %s as %s removing %d leaves: %d %s, want %s", tc.who.handle, tc.as.id, len(tc.removes), r.status, r.raw, tc.code)
		}
	}
	if r := rejoin(bob, f.bobC, mlswire.Remove(1)); r.status != 201 || r.json["epoch"] != 10.0 {
		t.Fatalf("bob joins again from the GroupInfo, removing his old leaf: %d %s", r.status, r.raw)
	}
	r = ts.do(t, "GET", "/api/v1/people/"+ann.id+"/group", ann.token, nil)
	if ms, _ := r.json["members"].([]any); len(ms) != 2 || ms[1].(map[string]any)["client"] != f.bobC.id {
		t.Errorf("the group after bob's external commit: %s", r.raw)
	}
	if r := f.fetch(t, bob, f.bobC, 9); r.status != 200 || len(r.json["commits"].([]any)) != 1 {
		t.Errorf("bob, joined again, fetches after 9: %d %s, want his own commit", r.status, r.raw)
	}
	t.Logf("commits kept: %d after 5 epochs, %d with bob behind, %d once both passed, %d after 91 days with bob behind", before, behind, passed, aged)
}

// TestMLSLogCap: past MLSCommitsKept commits the oldest go even while a
// member (ann's own client, which never fetches) has not passed them.
func TestMLSLogCap(t *testing.T) {
	f := newMLSFamily(t)
	for e := range uint64(store.MLSCommitsKept + 5) {
		f.commitAt(t, e)
	}
	if n := f.logRows(t); n != store.MLSCommitsKept {
		t.Errorf("%d commits kept after %d, want %d", n, store.MLSCommitsKept+5, store.MLSCommitsKept)
	}
	if r := f.fetch(t, f.ann, f.annC, 4); r.status != 410 || r.errCode() != "log_pruned" {
		t.Errorf("a fetch after epoch 4, past the cap: %d %s, want 410", r.status, r.raw)
	}
	if r := f.fetch(t, f.ann, f.annC, 5); r.status != 200 || len(r.json["commits"].([]any)) != 100 {
		t.Errorf("a fetch after epoch 5, the oldest kept: %d %s", r.status, r.raw)
	}
}

// TestMLSGroupInfoOfTheNewestCommit: the GroupInfo served is the one of
// the group's newest commit; a commit without one leaves none, never an
// older epoch's, from which an external join would be refused.
func TestMLSGroupInfoOfTheNewestCommit(t *testing.T) {
	f := newMLSFamily(t)
	info := "/api/v1/people/" + f.ann.id + "/group/info"
	f.commitAt(t, 0)
	if r := f.ts.do(t, "GET", info, f.bob.token, nil); r.status != 200 || r.json["group_info"] == "" || r.json["epoch"] != 1.0 {
		t.Fatalf("the GroupInfo after a commit that brought one: %d %s", r.status, r.raw)
	}
	if r := f.ts.do(t, "POST", f.commits, f.ann.token, map[string]string{"commit": b64(mlswire.Commit([]byte(f.gid), 1, 0, nil))}); r.status != 201 {
		t.Fatalf("a commit without a GroupInfo: %d %s", r.status, r.raw)
	}
	if r := f.ts.do(t, "GET", info, f.bob.token, nil); r.status != 404 || r.errCode() != "no_group_info" {
		t.Errorf("the GroupInfo after a commit without one: %d %s, want 404 no_group_info, not epoch 1's", r.status, r.raw)
	}
}
