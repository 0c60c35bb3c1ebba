package app

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/nah-app/nah/internal/mlswire"
)

// mlsFamily is ann with a group whose leaf 0 is her client, and bob,
// connected to her, with a client and KeyPackages.
type mlsFamily struct {
	ts         *testServer
	ann, bob   account
	annC, bobC mlsClient
	gid        string
	commits    string
}

func newMLSFamily(t *testing.T) *mlsFamily {
	ts := newTestServer(t)
	f := &mlsFamily{ts: ts, ann: ts.signup(t, "ann"), bob: ts.signup(t, "bob")}
	ts.connect(t, f.ann, f.bob)
	f.annC, f.bobC = ts.addClient(t, f.ann), ts.addClient(t, f.bob)
	ts.uploadKPs(t, f.bob, f.bobC, 3)
	f.gid = "nah:" + f.ann.id
	f.commits = "/api/v1/people/" + f.ann.id + "/group/commits"
	r := ts.do(t, "POST", "/api/v1/people/"+f.ann.id+"/group", f.ann.token, map[string]string{"client": f.annC.id, "group_id": b64([]byte(f.gid))})
	if r.status != 201 {
		t.Fatalf("register the group: %d %s", r.status, r.raw)
	}
	return f
}

// addBob commits, as ann's client at epoch 0, the Add of bob's client with
// its claimed KeyPackage, a Welcome and the GroupInfo.
func (f *mlsFamily) addBob(t *testing.T) {
	t.Helper()
	r := f.ts.do(t, "POST", "/api/v1/people/"+f.bob.id+"/key_packages/claim", f.ann.token, nil)
	kp, _ := base64.StdEncoding.DecodeString(r.json["key_packages"].([]any)[0].(map[string]any)["key_package"].(string))
	r = f.ts.do(t, "POST", f.commits, f.ann.token, map[string]string{
		"commit":     b64(mlswire.Commit([]byte(f.gid), 0, 0, nil, mlswire.Add(kp))),
		"welcome":    b64(mlswire.Welcome(84, mlswire.Ref(kp))),
		"group_info": b64(mlswire.GroupInfo([]byte(f.gid), 1, 0)),
	})
	if r.status != 201 || r.json["epoch"] != 1.0 {
		t.Fatalf("commit the Add: %d %s", r.status, r.raw)
	}
}

// TestMLSGroup: a commit that adds a connection's client moves the group to
// the next epoch and puts the Welcome in that client's inbox; the log pages
// with an ETag; moments must be PrivateMessages of the group at its epoch,
// and the feed says their epoch; a disconnect holds the next moment until a
// commit removes the other's client; no stranger may commit, fetch the log
// or read an inbox.
func TestMLSGroup(t *testing.T) {
	f := newMLSFamily(t)
	ts, ann, bob := f.ts, f.ann, f.bob
	eve := ts.signup(t, "eve")
	eveC := ts.addClient(t, eve)
	if r := ts.do(t, "POST", f.commits, ann.token, map[string]string{"commit": b64(mlswire.Commit([]byte(f.gid), 0, 0, nil, mlswire.Add(eveC.kpMessage())))}); r.status != 403 || r.errCode() != "not_a_connection" {
		t.Errorf("an Add of a stranger's client: %d %s", r.status, r.raw)
	}
	f.addBob(t)

	for _, req := range []struct{ method, path string }{
		{"POST", f.commits}, {"GET", f.commits}, {"GET", "/api/v1/people/" + ann.id + "/group"},
		{"GET", "/api/v1/people/" + ann.id + "/group/info"}, {"GET", "/api/v1/me/clients/" + f.bobC.id + "/inbox"},
	} {
		var body any
		if req.method == "POST" {
			body = map[string]string{"commit": b64(mlswire.Commit([]byte(f.gid), 1, 0, nil))}
		}
		if r := ts.do(t, req.method, req.path, eve.token, body); r.status != 404 {
			t.Errorf("a stranger's %s %s: %d %s, want 404", req.method, req.path, r.status, r.raw)
		}
	}
	r := ts.do(t, "GET", "/api/v1/me/clients/"+f.bobC.id+"/inbox", bob.token, nil)
	ws, _ := r.json["welcomes"].([]any)
	if len(ws) != 1 || ws[0].(map[string]any)["group"] != ann.id || ws[0].(map[string]any)["epoch"] != 1.0 {
		t.Errorf("bob's inbox: %s", r.raw)
	}
	r = ts.do(t, "GET", "/api/v1/people/"+ann.id+"/group", bob.token, nil)
	if ms, _ := r.json["members"].([]any); len(ms) != 2 || ms[1].(map[string]any)["client"] != f.bobC.id || ms[1].(map[string]any)["leaf"] != 1.0 {
		t.Errorf("the group after the Add: %s", r.raw)
	}

	r = ts.do(t, "GET", f.commits+"?after=0", bob.token, nil)
	if cs, _ := r.json["commits"].([]any); len(cs) != 1 || cs[0].(map[string]any)["epoch"] != 1.0 {
		t.Errorf("the log after epoch 0: %s", r.raw)
	}
	req, _ := http.NewRequest("GET", ts.URL+f.commits+"?after=0", nil)
	req.Header.Set("Authorization", "Bearer "+bob.token)
	req.Header.Set("If-None-Match", r.header.Get("ETag"))
	if res, _ := sendChecked(t, ts.Client(), req, nil); res.StatusCode != 304 {
		t.Errorf("the same page with its ETag: %d, want 304", res.StatusCode)
	}

	if r := ts.do(t, "POST", "/api/v1/moments", ann.token, map[string]string{"body": b64([]byte("opaque"))}); r.status != 400 || r.errCode() != "not_private_message" {
		t.Errorf("an opaque moment of a person with a group: %d %s", r.status, r.raw)
	}
	r = ts.do(t, "POST", "/api/v1/moments", ann.token, map[string]string{"body": b64(mlswire.PrivateMessage([]byte(f.gid), 0))})
	if r.status != 409 || r.errCode() != "stale_epoch" || r.json["epoch"] != 1.0 {
		t.Errorf("a moment at an old epoch: %d %s", r.status, r.raw)
	}
	ts.post(t, ann, mlswire.PrivateMessage([]byte(f.gid), 1))
	r = ts.do(t, "GET", "/api/v1/feed", bob.token, nil)
	if ms, _ := r.json["moments"].([]any); len(ms) != 1 || ms[0].(map[string]any)["epoch"] != 1.0 {
		t.Errorf("bob's feed: %s", r.raw)
	}

	if r := ts.do(t, "DELETE", "/api/v1/connections/"+bob.id, ann.token, nil); r.status != 204 {
		t.Fatalf("disconnect: %d %s", r.status, r.raw)
	}
	r = ts.do(t, "POST", "/api/v1/moments", ann.token, map[string]string{"body": b64(mlswire.PrivateMessage([]byte(f.gid), 1))})
	if r.status != 409 || r.errCode() != "removal_pending" {
		t.Errorf("a moment before the Remove: %d %s", r.status, r.raw)
	}
	if r := ts.do(t, "POST", f.commits, ann.token, map[string]string{"commit": b64(mlswire.Commit([]byte(f.gid), 1, 0, nil, mlswire.Remove(1)))}); r.status != 201 {
		t.Fatalf("commit the Remove: %d %s", r.status, r.raw)
	}
	ts.post(t, ann, mlswire.PrivateMessage([]byte(f.gid), 2))
}

// TestMLSEpochRace: commits for one epoch sent at once over HTTP: exactly
// one is accepted, every other is 409 epoch_conflict with the new epoch.
func TestMLSEpochRace(t *testing.T) {
	f := newMLSFamily(t)
	const racers = 8
	for epoch := range uint64(3) {
		var wg sync.WaitGroup
		codes := make([]string, racers)
		for i := range racers {
			wg.Go(func() {
				r := f.ts.do(t, "POST", f.commits, f.ann.token, map[string]string{"commit": b64(mlswire.Commit([]byte(f.gid), epoch, 0, nil))})
				codes[i] = strconv.Itoa(r.status) + r.errCode()
				if r.status == 409 && r.json["epoch"] != float64(epoch+1) {
					t.Errorf("a conflict's epoch: %s, want %d", r.raw, epoch+1)
				}
			})
		}
		wg.Wait()
		won := 0
		for _, c := range codes {
			switch c {
			case "201":
				won++
			case "409epoch_conflict":
			default:
				t.Errorf("a racing commit: %s", c)
			}
		}
		if won != 1 {
			t.Fatalf("epoch %d: %d commits accepted of %d sent at once (%v), want 1", epoch, won, racers, codes)
		}
	}
}

// TestMLSStrangersPending: a member leaf of someone who is no longer a
// connection (disconnected, or whose account was deleted) is a pending
// removal with no mark written: GET group lists it and the owner's next
// moment is 409 removal_pending until a commit removes it.
func TestMLSStrangersPending(t *testing.T) {
	for _, leave := range []string{"disconnect", "delete account"} {
		t.Run(leave, func(t *testing.T) {
			f := newMLSFamily(t)
			ts, ann, bob := f.ts, f.ann, f.bob
			f.addBob(t)
			var r response
			if leave == "disconnect" {
				r = ts.do(t, "DELETE", "/api/v1/connections/"+bob.id, ann.token, nil)
			} else {
				r = ts.do(t, "DELETE", "/api/v1/me", bob.token, map[string]string{"password": "password-bob"})
			}
			if r.status != 204 {
				t.Fatalf("%s: %d %s", leave, r.status, r.raw)
			}
			r = ts.do(t, "GET", "/api/v1/people/"+ann.id+"/group", ann.token, nil)
			if p, _ := r.json["pending_removals"].([]any); len(p) != 1 || p[0] != f.bobC.id {
				t.Errorf("ann's group after bob's %s: %s, want bob's client pending", leave, r.raw)
			}
			r = ts.do(t, "POST", "/api/v1/moments", ann.token, map[string]string{"body": b64(mlswire.PrivateMessage([]byte(f.gid), 1))})
			if r.status != 409 || r.errCode() != "removal_pending" {
				t.Errorf("ann's moment after bob's %s, before the Remove: %d %s, want 409 removal_pending", leave, r.status, r.raw)
			}
			if r := ts.do(t, "POST", f.commits, ann.token, map[string]string{"commit": b64(mlswire.Commit([]byte(f.gid), 1, 0, nil, mlswire.Remove(1)))}); r.status != 201 {
				t.Fatalf("commit the Remove: %d %s", r.status, r.raw)
			}
			ts.post(t, ann, mlswire.PrivateMessage([]byte(f.gid), 2))
		})
	}
}
