package app

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nah-app/nah/internal/testdisk"
)

// TestDiskFull: on a full disk every write answers 507 insufficient_storage
// and reads go on, also of files that were closed; health says so; a
// refused sign-up leaves no folder; and once space returns everything works
// again by itself.
func TestDiskFull(t *testing.T) {
	dir := testdisk.Mount(t, "8m")
	// One open file and no heads, so that feeds open closed files.
	ts := newTestServer(t, func(c *serverConfig) { c.Dir, c.MaxOpenFiles, c.HeadCacheBytes = dir, 1, -1 })
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	ts.connect(t, ann, bob)
	ts.post(t, ann, []byte("ann"))
	ts.post(t, bob, []byte("bob"))
	admin := signedInAdmin(t, ts)
	folders := func() int {
		t.Helper()
		es, err := os.ReadDir(filepath.Join(dir, "people"))
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}

	for _, w := range []struct {
		name, method, path, token string
		body                      any
	}{
		// bob's file is open (his post was the last file used), ann's closed.
		{"post to an open file", "POST", "/api/v1/moments", bob.token, map[string]string{"body": "aGk="}},
		// Opening ann's file closes bob's, whose WAL is then removed: the
		// body is larger than the space that frees.
		{"post to a closed file", "POST", "/api/v1/moments", ann.token, map[string]string{"body": base64.StdEncoding.EncodeToString(make([]byte, 60<<10))}},
		{"sign in", "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"}},
		{"sign up", "POST", "/api/v1/accounts", "", map[string]string{"handle": "cat", "password": "password-cat"}},
		{"invite", "POST", "/api/v1/invites", bob.token, nil},
	} {
		ts.store.WaitClosed() // a close still running would free its WAL's space after the fill
		testdisk.Fill(t, dir)
		r := ts.do(t, w.method, w.path, w.token, w.body)
		if r.status != 507 || r.errCode() != "insufficient_storage" {
			t.Errorf("%s on a full disk: %d %s, want 507 insufficient_storage", w.name, r.status, r.raw)
		}
	}
	if n := folders(); n != 2 {
		t.Errorf("people/ holds %d folders after a refused sign-up, want 2", n)
	}
	for _, who := range []account{ann, bob} {
		if got := ts.readAll(t, who.token, "/api/v1/feed", 1); len(got) != 2 {
			t.Errorf("%s's feed on a full disk: %d moments, want 2", who.handle, len(got))
		}
		if got := ts.readAll(t, who.token, "/api/v1/people/"+ann.id+"/moments", 30); len(got) != 1 {
			t.Errorf("ann's moments read by %s on a full disk: %d, want 1", who.handle, len(got))
		}
		if r := ts.do(t, "GET", "/api/v1/me", who.token, nil); r.status != 200 {
			t.Errorf("%s's /me on a full disk: %d", who.handle, r.status)
		}
	}
	h := ts.do(t, "GET", "/healthz", "", nil)
	if h.status != 200 || h.str("status") != "degraded" || h.json["disk_full"] != true {
		t.Errorf("health on a full disk: %d %s", h.status, h.raw)
	}
	if p := get(t, admin, ts.URL+"/console"); p.status != 200 || !strings.Contains(p.body, "The disk is full") {
		t.Errorf("overview on a full disk: %d, does not say the disk is full", p.status)
	}

	testdisk.Free(t, dir)
	ts.post(t, ann, []byte("ann again"))
	cat := ts.signup(t, "cat")
	ts.connect(t, cat, bob)
	if got := ts.readAll(t, bob.token, "/api/v1/feed", 30); len(got) != 3 {
		t.Errorf("bob's feed after space returned: %d moments, want 3", len(got))
	}
	h = ts.do(t, "GET", "/healthz", "", nil)
	if h.status != 200 || h.str("status") != "ok" || h.json["disk_full"] != false {
		t.Errorf("health after space returned: %d %s", h.status, h.raw)
	}
}

// TestUploadPieceOnAFullDisk: a resumable upload's piece that meets a full
// disk is 507 and keeps the upload where its last fsynced piece left it;
// once space returns the piece is sent again and the file ends whole.
func TestUploadPieceOnAFullDisk(t *testing.T) {
	dir := testdisk.Mount(t, "8m")
	ts := newTestServer(t, func(c *serverConfig) { c.Dir = dir })
	a := ts.signup(t, "ann")
	src := randomBytes(3 << 20)
	loc := ts.createUpload(t, a, len(src), "")
	if res, _ := ts.patchUpload(t, a, loc, 0, src[:100_000]); res.StatusCode != 204 {
		t.Fatalf("first piece: %d", res.StatusCode)
	}
	testdisk.Fill(t, dir)
	res, raw := ts.patchUpload(t, a, loc, 100_000, src[100_000:])
	if res.StatusCode != 507 || !strings.Contains(string(raw), "insufficient_storage") || res.Header.Get("Upload-Offset") != "100000" {
		t.Fatalf("a piece on a full disk: %d Upload-Offset %q %s", res.StatusCode, res.Header.Get("Upload-Offset"), raw)
	}
	if got := ts.uploadOffset(t, a, loc); got != 100_000 {
		t.Fatalf("HEAD after the full disk: %d, want 100000", got)
	}
	testdisk.Free(t, dir)
	res, raw = ts.patchUpload(t, a, loc, 100_000, src[100_000:])
	if res.StatusCode != 204 {
		t.Fatalf("the piece again once there is space: %d %s", res.StatusCode, raw)
	}
	if _, got := ts.download(t, a.token, a.id, res.Header.Get("Media-Id"), nil); !bytes.Equal(got, src) {
		t.Fatal("the media is not the source")
	}
}
