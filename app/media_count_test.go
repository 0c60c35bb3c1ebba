package app

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nah-app/nah"
)

// holdMedia gives person id n media rows of one byte each, written into
// their file directly (uploading 100,000 takes minutes), before anything
// has loaded their usage; the first row also gets its file, so that it can
// be deleted through the API. It returns that first media's id.
func holdMedia(t *testing.T, ts *testServer, id string, n int) string {
	t.Helper()
	p := filepath.Join(ts.dir, filepath.FromSlash(nah.PersonRel(id)))
	db, err := sql.Open("sqlite", "file:"+p+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	stmt, err := tx.Prepare(`INSERT INTO media(id, size, sha256, content_type, created_at) VALUES (?, 1, ?, 'image/png', ?)`)
	if err != nil {
		t.Fatal(err)
	}
	defer stmt.Close()
	// sha256 of "x"
	const sum = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
	at := ts.clock.Now().UnixMilli() - int64(n)
	first := ""
	for i := range n {
		mid := nah.NewMediaID(at + int64(i))
		if i == 0 {
			first = mid
		}
		if _, err := stmt.Exec(mid, sum, at+int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(ts.dir, filepath.FromSlash(nah.MediaDirRel(id)))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, first), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	return first
}

// TestMediaCountBoundOverHTTP: a person holding nah.MaxMediaCount media,
// at a quota that bytes never reach, is refused a one-request upload and
// a resumable upload's creation, each 413 quota_exceeded saying the count;
// after one delete, one upload fits and the next is refused again.
func TestMediaCountBoundOverHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100,000 media rows")
	}
	ts := newTestServer(t, func(c *serverConfig) { c.QuotaBytes = 1 << 40 })
	ann := ts.signup(t, "ann")
	first := holdMedia(t, ts, ann.id, nah.MaxMediaCount)
	count := fmt.Sprintf("you keep %d media files", nah.MaxMediaCount)
	refused := func(what string, status int, raw []byte) {
		t.Helper()
		if status != 413 || !strings.Contains(string(raw), `"quota_exceeded"`) || !strings.Contains(string(raw), count) {
			t.Errorf("%s at %d media: %d %s, want 413 quota_exceeded saying %q", what, nah.MaxMediaCount, status, raw, count)
		}
	}
	status, _, raw := ts.upload(t, ann, []byte("x"), "image/png")
	refused("a one-request upload", status, raw)
	res, raw := ts.tus(t, "POST", "/api/v1/uploads", ann.token, map[string]string{"Upload-Length": "1", "Upload-Metadata": "content-type aW1hZ2UvcG5n"}, nil)
	refused("a resumable upload's creation", res.StatusCode, raw)
	if l := ts.leftovers(t, ann); len(l) > 0 {
		t.Errorf("left in the media folder: %v", l)
	}
	if files := uploadFiles(t, ts.dir, ann.id); len(files) > 0 {
		t.Errorf("left in the uploads folder: %v", files)
	}

	if r := ts.do(t, "DELETE", "/api/v1/media/"+first, ann.token, nil); r.status != 204 {
		t.Fatalf("delete a media: %d %s", r.status, r.raw)
	}
	if status, _, raw := ts.upload(t, ann, []byte("x"), "image/png"); status != 201 {
		t.Fatalf("an upload after a delete: %d %s", status, raw)
	}
	res, raw = ts.tus(t, "POST", "/api/v1/uploads", ann.token, map[string]string{"Upload-Length": "1", "Upload-Metadata": "content-type aW1hZ2UvcG5n"}, nil)
	refused("a resumable upload's creation at the cap again", res.StatusCode, raw)
	st, err := ts.store.StorageOf(t.Context(), ann.id)
	if err != nil || st.MediaCount != nah.MaxMediaCount {
		t.Errorf("storage %+v %v, want %d media", st, err, nah.MaxMediaCount)
	}
}
