package app

import (
	"fmt"
	"net/http"
	"testing"
	"time"
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

// refreshFrom reads everything newer than after (a refresh cursor), the
// gap paged with before= as the document says, checking the paging rules,
// and returns the moments' ids, newest first, and the new refresh cursor
// (after itself when nothing settled came).
func (ts *testServer) refreshFrom(t *testing.T, token, path, after string, limit int) ([]string, string) {
	t.Helper()
	var ids []string
	refresh, next := after, ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("the refresh does not end")
		}
		u := fmt.Sprintf("%s?limit=%d", path, limit)
		if after != "" {
			u += "&after=" + after
		}
		if next != "" {
			u += "&before=" + next
		}
		r := ts.do(t, "GET", u, token, nil)
		if r.status != 200 {
			t.Fatalf("GET %s: %d %s", u, r.status, r.raw)
		}
		ms, _ := r.json["moments"].([]any)
		for _, m := range ms {
			ids = append(ids, m.(map[string]any)["id"].(string))
		}
		if s, ok := r.json["refresh"].(string); ok && next == "" {
			refresh = s
		}
		n, _ := r.json["next"].(string)
		if n == "" {
			return ids, refresh
		}
		if len(ms) != limit {
			t.Fatalf("GET %s: a page that is not the last holds %d, want %d", u, len(ms), limit)
		}
		next = n
	}
}

// TestFeedAfter: a refresh with after= and its gap paged with before=
// brings exactly the moments posted since, newest first, none missed and
// none repeated; a moment of the current millisecond waits for the next
// refresh instead of being skipped by the one after it (two posters in one
// millisecond, whose ids are in either order).
func TestFeedAfter(t *testing.T) {
	ts := newTestServer(t)
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	ts.connect(t, ann, bob)
	feed, bobs := "/api/v1/feed", "/api/v1/people/"+bob.id+"/moments"
	for i := range 4 {
		ts.post(t, []account{ann, bob}[i%2], fmt.Appendf(nil, "old %d", i))
		ts.clock.Advance(time.Millisecond)
	}
	old, refresh := ts.refreshFrom(t, ann.token, feed, "", 2)
	_, bobRefresh := ts.refreshFrom(t, ann.token, bobs, "", 2)
	if len(old) != 4 || refresh == "" || bobRefresh == "" {
		t.Fatalf("first read: %v, refresh %q %q", old, refresh, bobRefresh)
	}
	if r := ts.do(t, "GET", feed+"?after=x"+refresh[1:], ann.token, nil); r.status != 400 || r.errCode() != "invalid_cursor" {
		t.Errorf("a tampered after: %d %s", r.status, r.raw)
	}
	if ids, again := ts.refreshFrom(t, ann.token, feed, refresh, 2); len(ids) != 0 || again != refresh {
		t.Errorf("nothing new: %v, refresh %q, want none and %q", ids, again, refresh)
	}

	seen := map[string]int{}
	for _, id := range old {
		seen[id]++
	}
	var bobPosted []string
	for round := range 12 {
		// Two posters in one millisecond, refreshed in that millisecond
		// and again after it.
		a := ts.post(t, bob, fmt.Appendf(nil, "bob %d", round))
		bobPosted = append(bobPosted, a)
		for i := range 2 {
			if i == 1 {
				ts.post(t, ann, fmt.Appendf(nil, "ann %d", round))
				ts.clock.Advance(time.Millisecond)
			}
			ids, r := ts.refreshFrom(t, ann.token, feed, refresh, 3)
			for _, id := range ids {
				seen[id]++
			}
			refresh = r
		}
		if round%3 == 2 {
			ts.post(t, ann, []byte("between"))
			ts.clock.Advance(time.Millisecond)
		}
	}
	ids, _ := ts.refreshFrom(t, ann.token, feed, refresh, 3)
	for _, id := range ids {
		seen[id]++
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("moment %s came %d times across refreshes", id, n)
		}
	}
	all := ts.readAll(t, ann.token, feed, 100)
	if len(seen) != len(all) {
		t.Errorf("refreshes brought %d moments, the feed holds %d", len(seen), len(all))
	}
	for _, m := range all {
		if seen[m.ID] == 0 {
			t.Errorf("moment %s (%s) was missed by every refresh", m.ID, m.CreatedAt)
		}
	}
	// A person's moments refresh the same way, newest first.
	ids, _ = ts.refreshFrom(t, ann.token, bobs, bobRefresh, 5)
	if len(ids) != len(bobPosted) {
		t.Fatalf("bob's moments since: %d, want %d", len(ids), len(bobPosted))
	}
	for i, id := range ids {
		if want := bobPosted[len(bobPosted)-1-i]; id != want {
			t.Errorf("bob's moment %d since is %s, want %s (newest first)", i, id, want)
		}
	}
}
