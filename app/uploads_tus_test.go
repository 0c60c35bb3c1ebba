package app

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/nah-app/nah/store"
)

// TestUploadListAndEmptyExpiry: the unfinished-uploads limit is 413
// too_many_uploads; GET /uploads lists the unfinished uploads oldest
// first with their metadata, so a phone that lost a creation's answer
// can delete one; an upload that never got a byte expires after
// EmptyUploadExpiry, one with a byte keeps NAH_UPLOAD_EXPIRY.
func TestUploadListAndEmptyExpiry(t *testing.T) {
	ts := newTestServer(t)
	a := ts.signup(t, "ana")
	var locs []string
	for i := range store.MaxResumables {
		locs = append(locs, ts.createUpload(t, a, 1000, tusMeta("filename", "clip-"+strconv.Itoa(i)+".mp4")))
		ts.clock.Advance(time.Second)
	}
	if res, _ := ts.patchUpload(t, a, locs[3], 0, []byte("x")); res.StatusCode != 204 {
		t.Fatalf("a byte: %d", res.StatusCode)
	}
	res, raw := ts.tus(t, "POST", "/api/v1/uploads", a.token, map[string]string{"Upload-Length": "1000"}, nil)
	if res.StatusCode != 413 || !bytes.Contains(raw, []byte(`"too_many_uploads"`)) {
		t.Fatalf("one upload past the limit: %d %s", res.StatusCode, raw)
	}
	list := func() []map[string]any {
		t.Helper()
		r := ts.do(t, "GET", "/api/v1/uploads", a.token, nil)
		if r.status != 200 {
			t.Fatalf("GET /uploads: %d %s", r.status, r.raw)
		}
		var out []map[string]any
		for _, u := range r.json["uploads"].([]any) {
			out = append(out, u.(map[string]any))
		}
		return out
	}
	l := list()
	if len(l) != len(locs) {
		t.Fatalf("GET /uploads: %v, want the %d unfinished uploads", l, len(locs))
	}
	for i, u := range l {
		if "/api/v1/uploads/"+u["id"].(string) != locs[i] || u["metadata"] != tusMeta("filename", "clip-"+strconv.Itoa(i)+".mp4") {
			t.Fatalf("GET /uploads[%d]: %v, want %s with its metadata, oldest first", i, u, locs[i])
		}
	}
	if res, _ := ts.tus(t, "DELETE", locs[0], a.token, nil, nil); res.StatusCode != 204 {
		t.Fatalf("DELETE the oldest: %d", res.StatusCode)
	}
	locs[0] = ts.createUpload(t, a, 1000, "")

	ts.clock.Advance(store.EmptyUploadExpiry)
	if l := list(); len(l) != 1 || "/api/v1/uploads/"+l[0]["id"].(string) != locs[3] {
		t.Fatalf("GET /uploads %s on: %v, want only the upload with a byte", store.EmptyUploadExpiry, l)
	}
	if files := uploadFiles(t, ts.dir, a.id); len(files) != 2 {
		t.Fatalf("uploads folder: %v, want the one upload's bytes and state", files)
	}
	if got := ts.uploadOffset(t, a, locs[3]); got != 1 {
		t.Fatalf("HEAD of the upload with a byte: %d", got)
	}
}

// TestUploadMethodOverride: a POST with X-HTTP-Method-Override is taken
// as HEAD, PATCH or DELETE, as tus 1.0.0 says a server must.
func TestUploadMethodOverride(t *testing.T) {
	ts := newTestServer(t)
	a := ts.signup(t, "ana")
	loc := ts.createUpload(t, a, 10, "")
	send := func(method string, body []byte, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", ts.URL+loc, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+a.token)
		req.Header.Set("Tus-Resumable", "1.0.0")
		req.Header.Set("X-HTTP-Method-Override", method)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	if res := send("PATCH", []byte("hello"), "Content-Type", "application/offset+octet-stream", "Upload-Offset", "0"); res.StatusCode != 204 || res.Header.Get("Upload-Offset") != "5" {
		t.Fatalf("POST as PATCH: %d, Upload-Offset %q", res.StatusCode, res.Header.Get("Upload-Offset"))
	}
	if res := send("HEAD", nil); res.StatusCode != 200 || res.Header.Get("Upload-Offset") != "5" {
		t.Fatalf("POST as HEAD: %d, Upload-Offset %q", res.StatusCode, res.Header.Get("Upload-Offset"))
	}
	if res := send("DELETE", nil); res.StatusCode != 204 {
		t.Fatalf("POST as DELETE: %d", res.StatusCode)
	}
	if got := ts.uploadOffset(t, a, loc); got != -404 {
		t.Fatalf("HEAD after POST as DELETE: %d", got)
	}
}

// TestUploadConcatRefused: Upload-Concat, partial or final, is 400 at the
// creation and keeps nothing: a partial upload never becomes a media.
func TestUploadConcatRefused(t *testing.T) {
	ts := newTestServer(t)
	a := ts.signup(t, "ana")
	for _, v := range []string{"partial", "final;/api/v1/uploads/0f5c1e0d3a9b4c7e8d2f1a6b5c4d3e2f"} {
		res, raw := ts.tus(t, "POST", "/api/v1/uploads", a.token, map[string]string{"Upload-Length": "1000", "Upload-Concat": v}, nil)
		if res.StatusCode != 400 || !bytes.Contains(raw, []byte(`"concatenation_unsupported"`)) {
			t.Fatalf("Upload-Concat: %s: %d %s", v, res.StatusCode, raw)
		}
	}
	if files := uploadFiles(t, ts.dir, a.id); len(files) != 0 {
		t.Fatalf("uploads folder: %v", files)
	}
}

// TestUploadTusDetails: Tus-Resumable on a 401 and a 405; OPTIONS on an
// upload's URL; lengths and offsets in digits only; an empty PATCH at the
// end of a finished upload is 204 as tusd answers; 460's status line has
// its reason phrase.
func TestUploadTusDetails(t *testing.T) {
	ts := newTestServer(t)
	a := ts.signup(t, "ana")
	loc := ts.createUpload(t, a, 5, "")
	for _, c := range []struct {
		method, token string
		status        int
	}{{"HEAD", "", 401}, {"PATCH", "nope", 401}, {"PUT", a.token, 405}, {"OPTIONS", "", 204}} {
		res, raw := ts.tus(t, c.method, loc, c.token, nil, nil)
		if res.StatusCode != c.status || res.Header.Get("Tus-Resumable") != "1.0.0" {
			t.Fatalf("%s %s: %d, Tus-Resumable %q: %s", c.method, loc, res.StatusCode, res.Header.Get("Tus-Resumable"), raw)
		}
		if c.method == "OPTIONS" && res.Header.Get("Tus-Version") != "1.0.0" {
			t.Fatalf("OPTIONS %s: %v", loc, res.Header)
		}
	}
	res, raw := ts.tus(t, "POST", "/api/v1/uploads", a.token, map[string]string{"Upload-Length": "+5"}, nil)
	if res.StatusCode != 400 || !bytes.Contains(raw, []byte(`"invalid_upload_length"`)) {
		t.Fatalf("Upload-Length: +5: %d %s", res.StatusCode, raw)
	}
	if res, raw := ts.patchUpload(t, a, loc, 0, []byte("hello"), "Upload-Offset", "+0"); res.StatusCode != 400 {
		t.Fatalf("Upload-Offset: +0: %d %s", res.StatusCode, raw)
	}
	res, _ = ts.patchUpload(t, a, loc, 0, []byte("hello"))
	mid := res.Header.Get("Media-Id")
	if res, raw := ts.patchUpload(t, a, loc, 5, []byte{}); res.StatusCode != 204 || res.Header.Get("Media-Id") != mid || mid == "" {
		t.Fatalf("an empty PATCH at the end of a finished upload: %d %v %s", res.StatusCode, res.Header, raw)
	}
	if res, raw := ts.patchUpload(t, a, loc, 5, []byte("!")); res.StatusCode != 409 {
		t.Fatalf("a byte past the end of a finished upload: %d %s", res.StatusCode, raw)
	}

	loc = ts.createUpload(t, a, 5, "")
	wrong := sha256.Sum256([]byte("other"))
	res, _ = ts.patchUpload(t, a, loc, 0, []byte("hello"), "Upload-Checksum", "sha256 "+base64.StdEncoding.EncodeToString(wrong[:]))
	if res.Status != "460 Checksum Mismatch" || res.Header.Get("Tus-Resumable") != "1.0.0" || res.Header.Get("Upload-Offset") != "0" {
		t.Fatalf("a piece whose checksum is wrong: %q %v", res.Status, res.Header)
	}
}
