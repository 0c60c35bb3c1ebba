package app

import (
	"net/http"
	"testing"
)

// getPage GETs path with If-None-Match etag (none when empty), checked
// against openapi.json, and returns the status and the answer's ETag.
func (ts *testServer) getPage(t *testing.T, token, path, etag string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", ts.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	res, raw := sendChecked(t, ts.Client(), req, nil)
	if res.StatusCode == 304 && len(raw) > 0 {
		t.Errorf("a 304 with a body: %q", raw)
	}
	if res.Header.Get("Cache-Control") != "private, no-cache" {
		t.Errorf("GET %s: Cache-Control %q", path, res.Header.Get("Cache-Control"))
	}
	return res.StatusCode, res.Header.Get("ETag")
}

// TestPageETag: the feed and a person's moments answer 304 to their own
// ETag exactly while nothing on the page changed; a post by a connection,
// a deletion and a disconnect each change it.
func TestPageETag(t *testing.T) {
	ts := newTestServer(t)
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	ts.connect(t, ann, bob)
	ts.post(t, ann, []byte("ann's"))
	feed, bobs := "/api/v1/feed", "/api/v1/people/"+bob.id+"/moments"

	st, e1 := ts.getPage(t, ann.token, feed, "")
	if st != 200 || e1 == "" {
		t.Fatalf("feed: %d, ETag %q", st, e1)
	}
	if st, e := ts.getPage(t, ann.token, feed, e1); st != 304 || e != e1 {
		t.Errorf("unchanged feed with its ETag: %d %q, want 304 %q", st, e, e1)
	}
	if st, _ := ts.getPage(t, ann.token, feed, `"other", W/`+e1); st != 304 {
		t.Errorf("a list of tags holding the weak form: %d, want 304", st)
	}
	_, b1 := ts.getPage(t, ann.token, bobs, "")

	ts.clock.Advance(1000)
	id := ts.post(t, bob, []byte("bob's"))
	st, e2 := ts.getPage(t, ann.token, feed, e1)
	if st != 200 || e2 == e1 {
		t.Errorf("after a connection's post: %d %q, want 200 with a new ETag", st, e2)
	}
	st, b2 := ts.getPage(t, ann.token, bobs, b1)
	if st != 200 || b2 == b1 {
		t.Errorf("bob's moments after his post: %d, want 200", st)
	}
	if st, _ := ts.getPage(t, ann.token, bobs, b2); st != 304 {
		t.Errorf("bob's moments unchanged: %d, want 304", st)
	}

	if r := ts.do(t, "DELETE", "/api/v1/moments/"+id, bob.token, nil); r.status != 204 {
		t.Fatalf("delete: %d", r.status)
	}
	st, e3 := ts.getPage(t, ann.token, feed, e2)
	if st != 200 || e3 == e2 {
		t.Errorf("after a deletion: %d, want 200 with a new ETag", st)
	}
	// Between two refreshes bob deletes his moment and posts another: the
	// same people, the same count, another page.
	ts.clock.Advance(1000)
	again := ts.post(t, bob, []byte("bob's again"))
	_, e4 := ts.getPage(t, ann.token, feed, "")
	if r := ts.do(t, "DELETE", "/api/v1/moments/"+again, bob.token, nil); r.status != 204 {
		t.Fatalf("delete: %d", r.status)
	}
	ts.clock.Advance(1000)
	ts.post(t, bob, []byte("bob's third"))
	st, e5 := ts.getPage(t, ann.token, feed, e4)
	if st != 200 || e5 == e4 {
		t.Errorf("after a delete and a post: %d, want 200 with a new ETag", st)
	}
	e4 = e5
	if r := ts.do(t, "DELETE", "/api/v1/connections/"+bob.id, ann.token, nil); r.status != 204 {
		t.Fatalf("disconnect: %d", r.status)
	}
	if st, e := ts.getPage(t, ann.token, feed, e4); st != 200 || e == e4 {
		t.Errorf("after a disconnect: %d, want 200 with a new ETag", st)
	}
}
