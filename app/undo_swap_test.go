package app

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestUndoRestoreAnswersRetry: while the undo of ann's restore swaps her
// file back, her own posts are told to come back (503 with Retry-After),
// never that she does not exist or a server error.
func TestUndoRestoreAnswersRetry(t *testing.T) {
	rs := newReplicatedServer(t)
	ann := rs.signup(t, "ann")
	_, at := rs.postAroundTime(t, ann, 2)
	rs.post(t, ann, []byte("late"))
	mustSync(t, rs.backups)
	c := signedInAdmin(t, rs.testServer)
	if done := postRestore(t, c, rs.URL, ann.id, at.Format(time.RFC3339)); done.status != 200 {
		t.Fatalf("restore: %d\n%s", done.status, done.body)
	}
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
		hc := rs.Client()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			j, _ := json.Marshal(map[string]string{"body": base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "during %d", i))})
			req, _ := http.NewRequest("POST", rs.URL+"/api/v1/moments", bytes.NewReader(j))
			req.Header.Set("Authorization", "Bearer "+ann.token)
			res, err := hc.Do(req)
			if err != nil {
				t.Errorf("post during the undo: %v", err)
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
			time.Sleep(time.Millisecond)
		}
	})
	time.Sleep(20 * time.Millisecond)
	undo := postForm(t, c, rs.URL+"/console/people/"+ann.id+"/undo-restore", nil)
	time.Sleep(20 * time.Millisecond)
	close(done)
	wg.Wait()
	if undo.status != 303 {
		t.Fatalf("undo: %d\n%s", undo.status, undo.body)
	}
	refused := 0
	for _, a := range answers {
		switch {
		case a.status == 201:
		case a.status == 503 && a.code == "storage_unavailable" && a.retryAfter != "":
			refused++
		default:
			t.Errorf("ann's post during the undo: %d %s (Retry-After %q), want 201 or 503 storage_unavailable with Retry-After", a.status, a.code, a.retryAfter)
		}
	}
	t.Logf("%d posts during the undo, %d told to come back", len(answers), refused)
	if refused == 0 {
		t.Errorf("none of %d posts met the swap: the test did not try what it is for", len(answers))
	}
}
