package app

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// TestRestoreToTimeAnswersRetryAndReconcilesMedia: while ann's file is
// restored to a time, her own posts are told to come back (503 with
// Retry-After), never that she does not exist (404); afterwards her media
// rows and files agree with the restored file, and her usage counts what is
// on disk: a media deleted after the time is gone with its row, one
// uploaded after it is gone with its file, and deleting the first again
// cannot take her usage below zero.
func TestRestoreToTimeAnswersRetryAndReconcilesMedia(t *testing.T) {
	rs := newReplicatedServer(t)
	ann, bob := rs.signup(t, "ann"), rs.signup(t, "bob")
	rs.connect(t, ann, bob)
	kept := rs.mustUpload(t, ann, bytes.Repeat([]byte("k"), 3000))
	deleted := rs.mustUpload(t, ann, bytes.Repeat([]byte("d"), 5000))
	_, at := rs.postAroundTime(t, ann, 2)
	if r := rs.do(t, "DELETE", "/api/v1/media/"+deleted.ID, ann.token, nil); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	later := rs.mustUpload(t, ann, bytes.Repeat([]byte("l"), 7000))
	mustSync(t, rs.backups)

	// Ann keeps posting through the restore.
	type answer struct {
		status           int
		code, retryAfter string
	}
	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
	)
	done := make(chan struct{})
	wg.Go(func() {
		c := rs.Client()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			j, _ := json.Marshal(map[string]string{"body": base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "during %d", i))})
			req, _ := http.NewRequest("POST", rs.URL+"/api/v1/moments", bytes.NewReader(j))
			req.Header.Set("Authorization", "Bearer "+ann.token)
			res, err := c.Do(req)
			if err != nil {
				t.Errorf("post during the restore: %v", err)
				return
			}
			var e struct {
				Error struct{ Code string } `json:"error"`
			}
			json.NewDecoder(res.Body).Decode(&e)
			res.Body.Close()
			mu.Lock()
			answers = append(answers, answer{res.StatusCode, e.Error.Code, res.Header.Get("Retry-After")})
			mu.Unlock()
			// Bob, connected to her, reads his feed meanwhile: it leaves
			// her out for the moment, and fails for nobody but her.
			req, _ = http.NewRequest("GET", rs.URL+"/api/v1/feed", nil)
			req.Header.Set("Authorization", "Bearer "+bob.token)
			feed, err := c.Do(req)
			if err != nil {
				t.Errorf("bob's feed during the restore: %v", err)
				return
			}
			feed.Body.Close()
			if feed.StatusCode != 200 {
				t.Errorf("bob's feed during the restore: %d", feed.StatusCode)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	c := signedInAdmin(t, rs.testServer)
	res := postRestore(t, c, rs.URL, ann.id, at.Format(time.RFC3339))
	time.Sleep(50 * time.Millisecond)
	close(done)
	wg.Wait()
	if res.status != 200 || !strings.Contains(res.body, "moments now") {
		t.Fatalf("restore: %d\n%s", res.status, res.body)
	}
	refused := 0
	for _, a := range answers {
		switch {
		case a.status == 201:
		case a.status == 503 && a.code == "storage_unavailable" && a.retryAfter != "":
			refused++
		default:
			t.Errorf("ann's post during the restore: %d %s (Retry-After %q), want 201 or 503 storage_unavailable with Retry-After", a.status, a.code, a.retryAfter)
		}
	}
	t.Logf("%d posts during the restore, %d told to come back", len(answers), refused)
	if refused == 0 {
		t.Errorf("none of %d posts met the swap: the test did not try what it is for", len(answers))
	}

	storage := func() (media, used int64) {
		t.Helper()
		me := rs.do(t, "GET", "/api/v1/me", ann.token, nil)
		if me.status != 200 {
			t.Fatalf("me: %d %s", me.status, me.raw)
		}
		st := me.json["storage"].(map[string]any)
		return int64(st["media"].(float64)), int64(me.json["storage_used"].(float64))
	}
	kept3000 := nah.MediaCharge(3000) // what /me says: the quota's charge
	if media, _ := storage(); media != kept3000 {
		t.Errorf("media usage after the restore: %d, want %d (the one media of 3000 bytes that has both its row and its file)", media, kept3000)
	}
	for _, m := range []struct {
		id   string
		want int
	}{{kept.ID, 200}, {deleted.ID, 404}, {later.ID, 404}} {
		if res, _ := rs.download(t, ann.token, ann.id, m.id, nil); res.StatusCode != m.want {
			t.Errorf("media %s after the restore: %d, want %d", m.id, res.StatusCode, m.want)
		}
	}
	if r := rs.do(t, "DELETE", "/api/v1/media/"+deleted.ID, ann.token, nil); r.status != 404 {
		t.Errorf("delete the media deleted before the restore again: %d %s, want 404", r.status, r.raw)
	}
	if media, used := storage(); media != kept3000 || used < media {
		t.Errorf("usage after deleting again: media %d, used %d; want media %d", media, used, kept3000)
	}
	if got := rs.leftovers(t, ann); len(got) != 0 {
		t.Errorf("ann's media folder holds %v", got)
	}
}
