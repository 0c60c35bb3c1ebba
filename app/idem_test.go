package app

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah/store"
)

// postKeyed posts a moment with an Idempotency-Key, checked against
// openapi.json.
func (ts *testServer) postKeyed(t *testing.T, a account, key string, body []byte) (*http.Response, []byte) {
	t.Helper()
	sent, _ := json.Marshal(map[string]string{"body": base64.StdEncoding.EncodeToString(body)})
	req, _ := http.NewRequest("POST", ts.URL+"/api/v1/moments", bytes.NewReader(sent))
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Idempotency-Key", key)
	return sendChecked(t, ts.Client(), req, sent)
}

// uploadKeyed uploads body as media with an Idempotency-Key.
func (ts *testServer) uploadKeyed(t *testing.T, a account, key string, body []byte) (*http.Response, []byte) {
	t.Helper()
	return ts.exchangeMedia(t, "POST", "/api/v1/media", a.token, map[string]string{"Content-Type": "image/jpeg", "Idempotency-Key": key}, bytes.NewReader(body), body)
}

func (ts *testServer) momentCount(t *testing.T, a account) int {
	t.Helper()
	n, err := ts.store.MomentCount(t.Context(), a.id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestIdempotentMomentRetry: a retry with the same key and body answers the
// first 201 byte for byte, marked as a replay, without a second moment; the
// same key with another body is 422; a bad key is 400; keys are each
// person's own.
func TestIdempotentMomentRetry(t *testing.T) {
	ts := newTestServer(t)
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	res, first := ts.postKeyed(t, ann, "k-1", []byte("hello"))
	if res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %v %s", res.StatusCode, res.Header, first)
	}
	ts.clock.Advance(time.Minute)
	res, again := ts.postKeyed(t, ann, "k-1", []byte("hello"))
	if res.StatusCode != 201 || !bytes.Equal(again, first) || res.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry: %d %v %s, want %s replayed", res.StatusCode, res.Header, again, first)
	}
	if n := ts.momentCount(t, ann); n != 1 {
		t.Errorf("%d moments after a retry, want 1", n)
	}
	res, raw := ts.postKeyed(t, ann, "k-1", []byte("something else"))
	if res.StatusCode != 422 || !strings.Contains(string(raw), "idempotency_key_reused") {
		t.Errorf("same key, other body: %d %s", res.StatusCode, raw)
	}
	for _, bad := range []string{"", "has space", strings.Repeat("k", 256), "tab\there"} {
		if res, raw := ts.postKeyed(t, ann, bad, []byte("hello")); res.StatusCode != 400 || !strings.Contains(string(raw), "invalid_idempotency_key") {
			t.Errorf("key %q: %d %s", bad, res.StatusCode, raw)
		}
	}
	if res, raw := ts.postKeyed(t, ann, strings.Repeat("k", 255), []byte("hello")); res.StatusCode != 201 {
		t.Errorf("a key of 255 bytes: %d %s", res.StatusCode, raw)
	}
	if res, raw := ts.postKeyed(t, bob, "k-1", []byte("hello")); res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != "" || bytes.Equal(raw, first) {
		t.Errorf("bob with ann's key: %d %v %s", res.StatusCode, res.Header, raw)
	}
	if n := ts.momentCount(t, ann); n != 2 {
		t.Errorf("ann has %d moments, want 2", n)
	}
}

// TestIdempotentMomentConcurrentRetries: 16 requests with one key at once
// make one moment, and every one of them answers it.
func TestIdempotentMomentConcurrentRetries(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	var mu sync.Mutex
	answers := map[string]int{}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			res, raw := ts.postKeyed(t, ann, "same", []byte("once"))
			mu.Lock()
			answers[fmt.Sprint(res.StatusCode, " ", string(raw))]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(answers) != 1 || ts.momentCount(t, ann) != 1 {
		t.Errorf("16 concurrent retries: answers %v, %d moments; want one 201 sixteen times and 1 moment", answers, ts.momentCount(t, ann))
	}
	for a := range answers {
		if !strings.HasPrefix(a, "201 ") {
			t.Errorf("answer %s", a)
		}
	}
}

// TestIdempotentRetryAfterCutOff: a post cut off mid-body writes nothing,
// and its retry with the same key writes once.
func TestIdempotentRetryAfterCutOff(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	body := `{"body":"` + base64.StdEncoding.EncodeToString([]byte("cut off")) + `"}`
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /api/v1/moments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nIdempotency-Key: cut\r\nContent-Length: %d\r\n\r\n%s", ann.token, len(body), body[:len(body)/2])
	c.Close()
	time.Sleep(100 * time.Millisecond)
	if n := ts.momentCount(t, ann); n != 0 {
		t.Fatalf("a cut-off post made %d moments", n)
	}
	for i := range 2 {
		if res, raw := ts.postKeyed(t, ann, "cut", []byte("cut off")); res.StatusCode != 201 {
			t.Fatalf("retry %d: %d %s", i, res.StatusCode, raw)
		}
	}
	if n := ts.momentCount(t, ann); n != 1 {
		t.Errorf("%d moments after a cut-off post and two retries, want 1", n)
	}
}

// TestIdempotencyBound: a key is forgotten after store.IdemKeep, or once
// store.IdemMaxKeys newer ones were stored; until then it replays. It logs
// what a key costs in the person's database.
func TestIdempotencyBound(t *testing.T) {
	ts := newTestServer(t)
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	dbBytes := func(a account) float64 {
		return ts.do(t, "GET", "/api/v1/me", a.token, nil).json["storage"].(map[string]any)["database"].(float64)
	}
	ann0, bob0 := dbBytes(ann), dbBytes(bob)
	body := []byte("sixteen bytes..!")
	for i := range store.IdemMaxKeys + 1 {
		if res, raw := ts.postKeyed(t, ann, fmt.Sprintf("%036d", i), body); res.StatusCode != 201 {
			t.Fatalf("post %d: %d %s", i, res.StatusCode, raw)
		}
		ts.post(t, bob, body)
	}
	t.Logf("%d moments of 16 bytes: ann's database (with 36-byte keys) grew %.0f bytes, bob's (no keys) %.0f: %.0f bytes a key",
		store.IdemMaxKeys+1, dbBytes(ann)-ann0, dbBytes(bob)-bob0, (dbBytes(ann)-ann0-(dbBytes(bob)-bob0))/float64(store.IdemMaxKeys+1))
	if res, _ := ts.postKeyed(t, ann, fmt.Sprintf("%036d", 1), body); res.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the second oldest key is no longer replayed")
	}
	if res, _ := ts.postKeyed(t, ann, fmt.Sprintf("%036d", 0), body); res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("the oldest key, %d keys ago, is still kept", store.IdemMaxKeys+1)
	}
	ts.clock.Advance(store.IdemKeep - time.Minute)
	if res, _ := ts.postKeyed(t, ann, fmt.Sprintf("%036d", 5), body); res.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("a key is forgotten before %v", store.IdemKeep)
	}
	ts.clock.Advance(2 * time.Minute)
	ts.postKeyed(t, ann, "new", body) // a write stores a key and drops the old
	if res, _ := ts.postKeyed(t, ann, fmt.Sprintf("%036d", 5), body); res.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("a key is kept past %v", store.IdemKeep)
	}
}

// TestIdempotentUpload: a media upload retried with its key answers the
// first 201 without a second file, even when the first filled the quota;
// other bytes under the key are 422; a retry sent while the first is still
// streaming is 409 with Retry-After.
func TestIdempotentUpload(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.QuotaBytes = 512 << 10 })
	ann := ts.signup(t, "ann")
	db, _ := walkMedia(t, ts, ann.id)
	body := randomBytes(int(512<<10 - db - 1024)) // the quota, all but a little
	res, first := ts.uploadKeyed(t, ann, "photo-1", body)
	if res.StatusCode != 201 {
		t.Fatalf("first: %d %s", res.StatusCode, first)
	}
	res, again := ts.uploadKeyed(t, ann, "photo-1", body)
	if res.StatusCode != 201 || !bytes.Equal(again, first) || res.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry with the quota full: %d %s, want %s replayed", res.StatusCode, again, first)
	}
	other := bytes.Clone(body)
	other[0] ^= 1
	if res, raw := ts.uploadKeyed(t, ann, "photo-1", other); res.StatusCode != 422 || !strings.Contains(string(raw), "idempotency_key_reused") {
		t.Errorf("same key, other bytes: %d %s", res.StatusCode, raw)
	}
	if _, media := walkMedia(t, ts, ann.id); media != int64(len(body)) {
		t.Errorf("%d bytes of media stored, want the one file of %d", media, len(body))
	}
	if l := ts.leftovers(t, ann); len(l) > 0 {
		t.Errorf("left in the media folder: %v", l)
	}

	// A first upload still streaming: its retry is refused at once. A retry
	// that reaches the server before the first one's headers is the first
	// itself; then the round is tried again with another key.
	bob, cyd := ts.signup(t, "bob"), ts.signup(t, "cyd")
	small := randomBytes(1000)
	var (
		key  string
		busy *http.Response
		raw  []byte
		pw   *io.PipeWriter
		done chan *http.Response
	)
	for round := range 20 {
		key = fmt.Sprintf("video-%d", round)
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		done = make(chan *http.Response, 1)
		go func() {
			req, _ := http.NewRequest("POST", ts.URL+"/api/v1/media", pr)
			req.Header.Set("Authorization", "Bearer "+bob.token)
			req.Header.Set("Idempotency-Key", key)
			req.Header.Set("Content-Type", "image/jpeg")
			res, err := ts.Client().Do(req)
			if err != nil {
				t.Error(err)
				close(done)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			done <- res
		}()
		pw.Write(small[:500])
		if busy, raw = ts.uploadKeyed(t, bob, key, small); busy.StatusCode == 409 {
			break
		}
		pw.Write(small[500:]) // overtaken: the first ends as a retry of it
		pw.Close()
		<-done
	}
	if busy.StatusCode != 409 || !strings.Contains(string(raw), "idempotency_key_in_use") || busy.Header.Get("Retry-After") != "1" {
		// Fatal: every round's first upload was already waited for, so the
		// wait below would never end.
		t.Fatalf("retry while the first streams: %d %v %s", busy.StatusCode, busy.Header, raw)
	}
	// Keys are each person's own: cyd's upload with bob's key goes through.
	if res, raw := ts.uploadKeyed(t, cyd, key, small); res.StatusCode != 201 {
		t.Errorf("cyd's upload with the key of bob's upload in flight: %d %s", res.StatusCode, raw)
	}
	pw.Write(small[500:])
	pw.Close()
	if res := <-done; res == nil || res.StatusCode != 201 {
		t.Fatalf("the first upload did not finish: %v", res)
	}
	if res, raw := ts.uploadKeyed(t, bob, key, small); res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry after the first finished: %d %s", res.StatusCode, raw)
	}
}

// TestIdempotentReplayAfterDelete: a retry after its moment (or media) was
// deleted answers the first 201, with the deleted id, and makes none: the key
// stands for the request, which did happen (docs/api.md, "A phone on a bad
// network").
func TestIdempotentReplayAfterDelete(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	res, first := ts.postKeyed(t, ann, "k-1", []byte("hello"))
	var m struct{ ID string }
	if res.StatusCode != 201 || json.Unmarshal(first, &m) != nil {
		t.Fatalf("first: %d %s", res.StatusCode, first)
	}
	if r := ts.do(t, "DELETE", "/api/v1/moments/"+m.ID, ann.token, nil); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	res, again := ts.postKeyed(t, ann, "k-1", []byte("hello"))
	if res.StatusCode != 201 || !bytes.Equal(again, first) || res.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry after the delete: %d %v %s, want %s replayed", res.StatusCode, res.Header, again, first)
	}
	if n := ts.momentCount(t, ann); n != 0 {
		t.Errorf("%d moments after the retry of a deleted one, want 0", n)
	}

	res, first = ts.uploadKeyed(t, ann, "k-2", []byte("photo"))
	if res.StatusCode != 201 || json.Unmarshal(first, &m) != nil {
		t.Fatalf("upload: %d %s", res.StatusCode, first)
	}
	if r := ts.do(t, "DELETE", "/api/v1/media/"+m.ID, ann.token, nil); r.status != 204 {
		t.Fatalf("delete the media: %d %s", r.status, r.raw)
	}
	res, again = ts.uploadKeyed(t, ann, "k-2", []byte("photo"))
	if res.StatusCode != 201 || !bytes.Equal(again, first) || res.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("upload retried after the delete: %d %s, want %s replayed", res.StatusCode, again, first)
	}
	if _, media := walkMedia(t, ts, ann.id); media != 0 {
		t.Errorf("%d bytes of media after the retry of a deleted one, want 0", media)
	}
}
