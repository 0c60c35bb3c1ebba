package app

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// tus sends one request of the resumable upload protocol, checked against
// openapi.json.
func (ts *testServer) tus(t *testing.T, method, path, token string, hdr map[string]string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body, req.ContentLength = nil, 0
	}
	req.Header.Set("Tus-Resumable", "1.0.0")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/offset+octet-stream")
	}
	return sendChecked(t, ts.Client(), req, body)
}

func tusMeta(pairs ...string) string {
	var out []string
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, pairs[i]+" "+base64.StdEncoding.EncodeToString([]byte(pairs[i+1])))
	}
	return joinComma(out)
}

func joinComma(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(x)
	}
	return b.String()
}

// createUpload creates an upload and returns its path, or fails.
func (ts *testServer) createUpload(t *testing.T, a account, length int, meta string) string {
	t.Helper()
	res, raw := ts.tus(t, "POST", "/api/v1/uploads", a.token, map[string]string{"Upload-Length": strconv.Itoa(length), "Upload-Metadata": meta}, nil)
	if res.StatusCode != 201 || res.Header.Get("Location") == "" {
		t.Fatalf("create: %d %s", res.StatusCode, raw)
	}
	return res.Header.Get("Location")
}

// uploadOffset is HEAD's Upload-Offset, or -status when it is not 200.
func (ts *testServer) uploadOffset(t *testing.T, a account, loc string) int64 {
	t.Helper()
	res, _ := ts.tus(t, "HEAD", loc, a.token, nil, nil)
	if res.StatusCode != 200 {
		return -int64(res.StatusCode)
	}
	n, err := strconv.ParseInt(res.Header.Get("Upload-Offset"), 10, 64)
	if err != nil {
		t.Fatalf("HEAD %s: Upload-Offset %q", loc, res.Header.Get("Upload-Offset"))
	}
	return n
}

func (ts *testServer) patchUpload(t *testing.T, a account, loc string, offset int64, piece []byte, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	h := map[string]string{"Upload-Offset": strconv.FormatInt(offset, 10)}
	for i := 0; i+1 < len(hdr); i += 2 {
		h[hdr[i]] = hdr[i+1]
	}
	return ts.tus(t, "PATCH", loc, a.token, h, piece)
}

// cutPatch sends a PATCH at offset that declares the rest of the file
// (total bytes) but sends only sent before closing the connection, as a
// phone losing its network does.
func (ts *testServer) cutPatch(t *testing.T, a account, loc string, offset int64, total int, sent []byte) {
	t.Helper()
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "PATCH %s HTTP/1.1\r\nHost: nah\r\nAuthorization: Bearer %s\r\nTus-Resumable: 1.0.0\r\n"+
		"Content-Type: application/offset+octet-stream\r\nUpload-Offset: %d\r\nContent-Length: %d\r\n\r\n", loc, a.token, offset, total)
	if _, err := c.Write(sent); err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// waitOffset waits for HEAD to say want, as the server reads to the cut.
func (ts *testServer) waitOffset(t *testing.T, a account, loc string, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := ts.uploadOffset(t, a, loc)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("HEAD %s: Upload-Offset %d, want %d (every byte sent before the cut)", loc, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// uploadFiles lists the files in a person's uploads folder.
func uploadFiles(t *testing.T, dir, person string) []string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(dir, filepath.FromSlash(nah.PersonDirRel(person)), nah.UploadsDirName))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestUploadResumesAfterCuts: a 3 MiB upload whose connection is closed
// mid-piece at several offsets keeps every byte that arrived, HEAD says
// where, and the pieces resumed from there make a media whose bytes and
// sha256 are the source's, served like any other.
func TestUploadResumesAfterCuts(t *testing.T) {
	ts := newTestServer(t)
	a := ts.signup(t, "ana")
	src := randomBytes(3 << 20)
	sum := sha256.Sum256(src)
	loc := ts.createUpload(t, a, len(src), tusMeta("filetype", "video/mp4", "sha256", hex.EncodeToString(sum[:])))
	if got := ts.uploadOffset(t, a, loc); got != 0 {
		t.Fatalf("new upload at %d", got)
	}
	var at int64
	for _, cut := range []int64{1, 100_000, 1 << 20, 1<<20 + 1, 2<<20 + 12345} {
		ts.cutPatch(t, a, loc, at, len(src)-int(at), src[at:cut])
		ts.waitOffset(t, a, loc, cut)
		at = cut
	}
	res, raw := ts.patchUpload(t, a, loc, at, src[at:])
	if res.StatusCode != 204 || res.Header.Get("Upload-Offset") != strconv.Itoa(len(src)) || res.Header.Get("Media-Id") == "" {
		t.Fatalf("last piece: %d %v %s", res.StatusCode, res.Header, raw)
	}
	mid := res.Header.Get("Media-Id")
	got, raw := ts.download(t, a.token, a.id, mid, nil)
	if got.StatusCode != 200 || !bytes.Equal(raw, src) {
		t.Fatalf("GET the media: %d, %d bytes, equal %v", got.StatusCode, len(raw), bytes.Equal(raw, src))
	}
	if et, want := got.Header.Get("ETag"), `"`+hex.EncodeToString(sum[:])+`"`; et != want || got.Header.Get("Content-Type") != "video/mp4" {
		t.Fatalf("ETag %s want %s, type %s", et, want, got.Header.Get("Content-Type"))
	}
	// Finished: HEAD still answers with the media's id until it expires;
	// the bytes are in media/ only.
	h, _ := ts.tus(t, "HEAD", loc, a.token, nil, nil)
	if h.StatusCode != 200 || h.Header.Get("Media-Id") != mid || h.Header.Get("Upload-Offset") != strconv.Itoa(len(src)) {
		t.Fatalf("HEAD after the end: %d %v", h.StatusCode, h.Header)
	}
	if files := uploadFiles(t, ts.dir, a.id); len(files) != 1 || filepath.Ext(files[0]) != ".json" {
		t.Fatalf("uploads folder after the end: %v, want the finished state only", files)
	}
	if res, _ := ts.patchUpload(t, a, loc, int64(len(src)), []byte("x")); res.StatusCode != 409 {
		t.Fatalf("a piece after the end: %d", res.StatusCode)
	}
}

// TestUploadOffsetChecked: a piece sent at any other offset than the
// upload's is 409 with the offset the server has, and writes nothing.
func TestUploadOffsetChecked(t *testing.T) {
	ts := newTestServer(t)
	a := ts.signup(t, "ana")
	src := randomBytes(1000)
	loc := ts.createUpload(t, a, len(src), "")
	for _, c := range []struct {
		at, status, want int64
	}{{5, 409, 0}, {0, 204, 10}, {0, 409, 10}, {11, 409, 10}, {9, 409, 10}} {
		res, raw := ts.patchUpload(t, a, loc, c.at, src[c.at:c.at+10])
		if int64(res.StatusCode) != c.status || res.Header.Get("Upload-Offset") != strconv.FormatInt(c.want, 10) {
			t.Fatalf("PATCH at %d: %d Upload-Offset %s, want %d at %d: %s", c.at, res.StatusCode, res.Header.Get("Upload-Offset"), c.status, c.want, raw)
		}
	}
	res, _ := ts.patchUpload(t, a, loc, 10, src[10:])
	if res.StatusCode != 204 {
		t.Fatalf("the rest: %d", res.StatusCode)
	}
	if _, got := ts.download(t, a.token, a.id, res.Header.Get("Media-Id"), nil); !bytes.Equal(got, src) {
		t.Fatal("the media is not the source: a refused piece was written")
	}
}

// TestUploadAbandonAndExpiryGiveBack: an unfinished upload holds its whole
// length of the quota; a DELETE, and an expiry (seen by a request, by the
// sweep and by a restart), leave no file and give the quota back.
func TestUploadAbandonAndExpiryGiveBack(t *testing.T) {
	dir := t.TempDir()
	const quota = 4 << 20
	edit := func(c *serverConfig) { c.Dir, c.QuotaBytes, c.MaxMediaBytes = dir, quota, quota }
	ts := newTestServer(t, edit)
	a := ts.signup(t, "ana")
	loc := ts.createUpload(t, a, 3<<20, "")
	if res, _ := ts.patchUpload(t, a, loc, 0, randomBytes(1<<20)); res.StatusCode != 204 {
		t.Fatalf("piece: %d", res.StatusCode)
	}
	full := func(why string) {
		t.Helper()
		res, raw := ts.tus(t, "POST", "/api/v1/uploads", a.token, map[string]string{"Upload-Length": strconv.Itoa(3 << 20)}, nil)
		if res.StatusCode != 413 || !bytes.Contains(raw, []byte("quota_exceeded")) {
			t.Fatalf("%s: a second 3 MiB upload with 4 MiB of quota: %d %s", why, res.StatusCode, raw)
		}
		if r := ts.do(t, "POST", "/api/v1/media", a.token, randomBytes(1<<20+512<<10)); r.status != 413 || r.errCode() != "quota_exceeded" {
			t.Fatalf("%s: POST /media of 1.5 MiB beside an unfinished 3 MiB upload: %d %s", why, r.status, r.raw)
		}
	}
	full("unfinished")
	held := func() float64 {
		t.Helper()
		return ts.do(t, "GET", "/api/v1/me", a.token, nil).json["storage"].(map[string]any)["uploads"].(float64)
	}
	if got := held(); got != 3<<20 {
		t.Fatalf("GET /me storage.uploads: %v, want the unfinished upload's 3 MiB", got)
	}
	if res, raw := ts.tus(t, "DELETE", loc, a.token, nil, nil); res.StatusCode != 204 {
		t.Fatalf("DELETE: %d %s", res.StatusCode, raw)
	}
	if got := ts.uploadOffset(t, a, loc); got != -404 {
		t.Fatalf("HEAD after DELETE: %d", got)
	}
	if files := uploadFiles(t, dir, a.id); len(files) != 0 || held() != 0 {
		t.Fatalf("left after DELETE: %v, %v bytes held", files, held())
	}

	// By a request past the expiry, which each piece moves on (a first
	// piece at once: an upload with no byte expires in minutes).
	loc = ts.createUpload(t, a, 3<<20, "")
	ts.patchUpload(t, a, loc, 0, randomBytes(1000))
	ts.clock.Advance(store.DefaultUploadExpiry - time.Minute)
	if res, _ := ts.patchUpload(t, a, loc, 1000, randomBytes(1000)); res.StatusCode != 204 {
		t.Fatalf("a piece a day less a minute after the first: %d", res.StatusCode)
	}
	full("the second")
	ts.clock.Advance(store.DefaultUploadExpiry - time.Minute)
	if got := ts.uploadOffset(t, a, loc); got != 2000 {
		t.Fatalf("HEAD a day less a minute after the last piece (two after the creation): %d", got)
	}
	ts.clock.Advance(2 * time.Minute)
	if got := ts.uploadOffset(t, a, loc); got != -404 {
		t.Fatalf("HEAD after the expiry: %d", got)
	}
	if files := uploadFiles(t, dir, a.id); len(files) != 0 {
		t.Fatalf("left after the expiry: %v", files)
	}
	// By the sweep.
	ts.createUpload(t, a, 3<<20, "")
	ts.clock.Advance(store.DefaultUploadExpiry + time.Minute)
	ts.store.Resumables().Sweep(t.Context())
	if files := uploadFiles(t, dir, a.id); len(files) != 0 {
		t.Fatalf("left after the sweep: %v", files)
	}
	// By a restart, the clock past the expiry; before it, the upload found
	// on disk holds its length of the quota again.
	loc = ts.createUpload(t, a, 3<<20, "")
	ts.patchUpload(t, a, loc, 0, randomBytes(1000))
	ts.Close()
	ts.store.Close()
	ts = newTestServer(t, edit)
	full("after a restart")
	ts.clock.Advance(5 * store.DefaultUploadExpiry) // the first server's clock was 3 days on
	if got := ts.uploadOffset(t, a, loc); got != -404 {
		t.Fatalf("HEAD after a restart past the expiry: %d", got)
	}
	if files := uploadFiles(t, dir, a.id); len(files) != 0 {
		t.Fatalf("left after a restart past the expiry: %v", files)
	}
	// The quota is whole again.
	loc = ts.createUpload(t, a, 3<<20, "")
	if res, _ := ts.patchUpload(t, a, loc, 0, randomBytes(3<<20)); res.StatusCode != 204 || res.Header.Get("Media-Id") == "" {
		t.Fatalf("a 3 MiB upload after the others went: %d", res.StatusCode)
	}
}

// TestUploadQuotaUnderConcurrentSessions: a person signed in three times
// creates uploads and posts media at once; what was accepted never passes
// the quota together, and only MaxResumables uploads are unfinished at once.
func TestUploadQuotaUnderConcurrentSessions(t *testing.T) {
	const quota = 10 << 20
	ts := newTestServer(t, func(c *serverConfig) { c.QuotaBytes, c.MaxMediaBytes = quota, quota })
	a := ts.signup(t, "ana")
	tokens := []string{a.token}
	for range 2 {
		r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ana", "password": "password-ana"})
		if r.status != 201 {
			t.Fatalf("sign in: %d %s", r.status, r.raw)
		}
		tokens = append(tokens, r.str("token"))
	}
	var mu sync.Mutex
	var accepted, refused int64
	var wg sync.WaitGroup
	for i := range 12 {
		tok := tokens[i%len(tokens)]
		wg.Go(func() {
			res, raw := ts.tus(t, "POST", "/api/v1/uploads", tok, map[string]string{"Upload-Length": strconv.Itoa(3 << 20)}, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case res.StatusCode == 201:
				accepted += 3 << 20
			case res.StatusCode == 413 || res.StatusCode == 409:
				refused++
			default:
				t.Errorf("create: %d %s", res.StatusCode, raw)
			}
		})
		wg.Go(func() {
			req, _ := http.NewRequest("POST", ts.URL+"/api/v1/media", bytes.NewReader(make([]byte, 1<<20)))
			req.Header.Set("Authorization", "Bearer "+tok)
			res, raw := sendChecked(t, ts.Client(), req, nil)
			mu.Lock()
			defer mu.Unlock()
			switch res.StatusCode {
			case 201:
				accepted += 1 << 20
			case 413:
				refused++
			default:
				t.Errorf("POST /media: %d %s", res.StatusCode, raw)
			}
		})
	}
	wg.Wait()
	st, err := ts.store.StorageOf(t.Context(), a.id)
	if err != nil {
		t.Fatal(err)
	}
	if accepted+st.Database > quota || refused == 0 {
		t.Fatalf("accepted %d bytes of uploads and media with a %d-byte database, %d refused: past the quota of %d", accepted, st.Database, refused, quota)
	}
}

// TestUploadResumesAfterRestart: the server stops between two pieces (and
// after a crash's extra bytes past the saved state); the upload resumes
// from the offset HEAD gives after the restart and ends with the source's
// sha256.
func TestUploadResumesAfterRestart(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, func(c *serverConfig) { c.Dir = dir })
	a := ts.signup(t, "ana")
	src := randomBytes(2<<20 + 7)
	loc := ts.createUpload(t, a, len(src), "")
	if res, _ := ts.patchUpload(t, a, loc, 0, src[:700_000]); res.StatusCode != 204 {
		t.Fatalf("first piece: %d", res.StatusCode)
	}
	ts.Close()
	ts.store.Close()
	// What a kill -9 during the next piece leaves: bytes in the file past
	// the state the last piece saved.
	data := filepath.Join(dir, filepath.FromSlash(nah.PersonDirRel(a.id)), nah.UploadsDirName, filepath.Base(loc))
	f, err := os.OpenFile(data, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(src[700_000:900_000])
	f.Close()

	ts = newTestServer(t, func(c *serverConfig) { c.Dir = dir })
	at := ts.uploadOffset(t, a, loc)
	if at != 900_000 {
		t.Fatalf("HEAD after the restart: %d, want 900000", at)
	}
	res, raw := ts.patchUpload(t, a, loc, at, src[at:])
	if res.StatusCode != 204 {
		t.Fatalf("the rest after the restart: %d %s", res.StatusCode, raw)
	}
	m, got := ts.download(t, a.token, a.id, res.Header.Get("Media-Id"), nil)
	sum := sha256.Sum256(src)
	if !bytes.Equal(got, src) || m.Header.Get("ETag") != `"`+hex.EncodeToString(sum[:])+`"` {
		t.Fatalf("the media after the restart: %d bytes, ETag %s", len(got), m.Header.Get("ETag"))
	}
	// The person's export holds it as any media, and nothing of an
	// unfinished upload.
	ts.patchUpload(t, a, ts.createUpload(t, a, 5000, ""), 0, src[:1000])
	ex, raw := sendChecked(t, ts.Client(), exportRequest(t, ts, "GET", a.token), nil)
	names, files := untarExport(t, raw)
	if ex.StatusCode != 200 || !bytes.Equal(files["media/"+res.Header.Get("Media-Id")], src) || len(names) != 3 {
		t.Fatalf("export: %d, entries %v, want person.db, the media and manifest.json", ex.StatusCode, names)
	}
}

// TestUploadChecksums: a piece whose Upload-Checksum does not match is
// dropped whole (460, offset unchanged); a whole file whose sha256 is not
// the declared one is deleted (460) and gives its quota back.
func TestUploadChecksums(t *testing.T) {
	ts := newTestServer(t)
	a := ts.signup(t, "ana")
	src := randomBytes(100_000)
	wrong := sha256.Sum256([]byte("another file"))
	loc := ts.createUpload(t, a, len(src), tusMeta("sha256", hex.EncodeToString(wrong[:])))
	piece := src[:40_000]
	bad := sha256.Sum256(src[1:40_001])
	res, raw := ts.patchUpload(t, a, loc, 0, piece, "Upload-Checksum", "sha256 "+base64.StdEncoding.EncodeToString(bad[:]))
	if res.StatusCode != 460 || !bytes.Contains(raw, []byte(`"checksum_mismatch"`)) || res.Header.Get("Upload-Offset") != "0" {
		t.Fatalf("a piece with a wrong checksum: %d %v %s", res.StatusCode, res.Header, raw)
	}
	good := sha256.Sum256(piece)
	if res, raw := ts.patchUpload(t, a, loc, 0, piece, "Upload-Checksum", "sha256 "+base64.StdEncoding.EncodeToString(good[:])); res.StatusCode != 204 {
		t.Fatalf("a piece with its checksum: %d %s", res.StatusCode, raw)
	}
	res, raw = ts.patchUpload(t, a, loc, 40_000, src[40_000:])
	if res.StatusCode != 460 || !bytes.Contains(raw, []byte(`"upload_checksum_mismatch"`)) {
		t.Fatalf("a file whose sha256 is not the declared one: %d %s", res.StatusCode, raw)
	}
	if got := ts.uploadOffset(t, a, loc); got != -404 {
		t.Fatalf("HEAD after the whole file's mismatch: %d", got)
	}
	if files := uploadFiles(t, ts.dir, a.id); len(files) != 0 {
		t.Fatalf("left after the mismatch: %v", files)
	}
	// The dropped piece leaves nothing in the file's running sha256: sent
	// again whole, the file ends with the one declared.
	right := sha256.Sum256(src)
	loc = ts.createUpload(t, a, len(src), tusMeta("sha256", hex.EncodeToString(right[:])))
	if res, raw := ts.patchUpload(t, a, loc, 0, piece, "Upload-Checksum", "sha256 "+base64.StdEncoding.EncodeToString(bad[:])); res.StatusCode != 460 {
		t.Fatalf("a piece with a wrong checksum: %d %s", res.StatusCode, raw)
	}
	if res, raw := ts.patchUpload(t, a, loc, 0, src); res.StatusCode != 204 || res.Header.Get("Media-Id") == "" {
		t.Fatalf("the whole file after a dropped piece: %d %s", res.StatusCode, raw)
	}
}

// TestUploadKeepsTheNewestFinished: past the 16 finished uploads' states a
// person keeps, the oldest goes first; the newest answer HEAD with their
// media's id.
func TestUploadKeepsTheNewestFinished(t *testing.T) {
	ts := newTestServer(t)
	a := ts.signup(t, "ana")
	const kept = 16 // store's maxFinished
	var locs []string
	for i := range kept + 1 {
		loc := ts.createUpload(t, a, 10, "")
		if res, raw := ts.patchUpload(t, a, loc, 0, fmt.Appendf(nil, "file %5d", i)); res.StatusCode != 204 {
			t.Fatalf("upload %d: %d %s", i, res.StatusCode, raw)
		}
		locs = append(locs, loc)
		ts.clock.Advance(time.Millisecond) // media ids, which order them, of distinct times
	}
	if got := ts.uploadOffset(t, a, locs[0]); got != -404 {
		t.Errorf("HEAD the oldest of %d finished uploads: %d, want 404", kept+1, got)
	}
	for i, loc := range locs[1:] {
		if got := ts.uploadOffset(t, a, loc); got != 10 {
			t.Errorf("HEAD finished upload %d of the newest %d: %d, want 10", i+2, kept, got)
		}
	}
}

// TestUploadCreateIdempotent: a creation retried with its Idempotency-Key
// gets the same upload; the key with another length is 422.
func TestUploadCreateIdempotent(t *testing.T) {
	ts := newTestServer(t)
	a := ts.signup(t, "ana")
	hdr := map[string]string{"Upload-Length": "5000", "Idempotency-Key": "k-1"}
	first, _ := ts.tus(t, "POST", "/api/v1/uploads", a.token, hdr, nil)
	again, _ := ts.tus(t, "POST", "/api/v1/uploads", a.token, hdr, nil)
	if first.StatusCode != 201 || again.StatusCode != 201 || again.Header.Get("Location") != first.Header.Get("Location") || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s, then %d %s %q", first.StatusCode, first.Header.Get("Location"), again.StatusCode, again.Header.Get("Location"), again.Header.Get("Idempotent-Replayed"))
	}
	hdr["Upload-Length"] = "5001"
	if res, raw := ts.tus(t, "POST", "/api/v1/uploads", a.token, hdr, nil); res.StatusCode != 422 {
		t.Fatalf("the key with another length: %d %s", res.StatusCode, raw)
	}
	if files := uploadFiles(t, ts.dir, a.id); len(files) != 2 {
		t.Fatalf("uploads folder: %v, want one upload's bytes and state", files)
	}
}

// TestUploadPieceTakesOverAStalledOne: a phone that changed networks leaves
// its piece's connection open and silent; its next piece, from HEAD's
// offset, stops the old one at once instead of waiting out the transfer's
// grace, and the file ends whole.
func TestUploadPieceTakesOverAStalledOne(t *testing.T) {
	ts := newTestServer(t)
	a := ts.signup(t, "ana")
	src := randomBytes(300_000)
	loc := ts.createUpload(t, a, len(src), "")
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "PATCH %s HTTP/1.1\r\nHost: nah\r\nAuthorization: Bearer %s\r\nTus-Resumable: 1.0.0\r\n"+
		"Content-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\nContent-Length: %d\r\n\r\n", loc, a.token, len(src))
	c.Write(src[:100_000]) // and then silence, the connection left open
	ts.waitOffset(t, a, loc, 100_000)
	began := time.Now()
	res, raw := ts.patchUpload(t, a, loc, 100_000, src[100_000:])
	if res.StatusCode != 204 || time.Since(began) > 5*time.Second {
		t.Fatalf("a piece beside a stalled one: %d after %s: %s", res.StatusCode, time.Since(began), raw)
	}
	if _, got := ts.download(t, a.token, a.id, res.Header.Get("Media-Id"), nil); !bytes.Equal(got, src) {
		t.Fatal("the media is not the source")
	}
}
