package app

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// exchangeMedia sends one media request with extra headers, checks it
// against openapi.json, and returns the answer with its body read.
func (ts *testServer) exchangeMedia(t *testing.T, method, path, token string, hdr map[string]string, body io.Reader, sent []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return sendChecked(t, ts.Client(), req, sent)
}

// upload posts body as a media file of a, with Content-Type ct.
func (ts *testServer) upload(t *testing.T, a account, body []byte, ct string) (int, mediaJSON, []byte) {
	t.Helper()
	res, raw := ts.exchangeMedia(t, "POST", "/api/v1/media", a.token, map[string]string{"Content-Type": ct}, bytes.NewReader(body), body)
	var m mediaJSON
	if res.StatusCode == 201 {
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
	}
	return res.StatusCode, m, raw
}

func (ts *testServer) mustUpload(t *testing.T, a account, body []byte) mediaJSON {
	t.Helper()
	status, m, raw := ts.upload(t, a, body, "image/jpeg")
	if status != 201 {
		t.Fatalf("upload %d bytes: %d %s", len(body), status, raw)
	}
	return m
}

func (ts *testServer) download(t *testing.T, token, owner, id string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	return ts.exchangeMedia(t, "GET", "/api/v1/people/"+owner+"/media/"+id, token, hdr, nil, nil)
}

// leftovers lists what is in a's media folder besides media files.
func (ts *testServer) leftovers(t *testing.T, a account) []string {
	t.Helper()
	es, _ := os.ReadDir(filepath.Join(ts.dir, "people", a.id, "media"))
	var out []string
	for _, e := range es {
		if !nah.ValidMediaID(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestMediaRoundTrip uploads 1, 64 KiB, 10 MiB and exactly the limit,
// downloads each whole with its sha256, and refuses one byte over the limit
// both when Content-Length says so and when a chunked stream passes it,
// leaving no file behind.
func TestMediaRoundTrip(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	limit := int(nah.DefaultMaxMediaBytes)
	for _, n := range []int{1, 64 << 10, 10 << 20, limit} {
		body := randomBytes(n)
		m := ts.mustUpload(t, ann, body)
		if m.Size != int64(n) || m.SHA256 != hexSum(body) || m.ContentType != "image/jpeg" || !nah.ValidMediaID(m.ID) || !timeRE.MatchString(m.CreatedAt) {
			t.Fatalf("upload of %d bytes: %+v", n, m)
		}
		res, got := ts.download(t, ann.token, ann.id, m.ID, nil)
		if res.StatusCode != 200 || !bytes.Equal(got, body) {
			t.Fatalf("download of %d bytes: %d, %d bytes back", n, res.StatusCode, len(got))
		}
		if res.Header.Get("ETag") != `"`+m.SHA256+`"` || res.Header.Get("Cache-Control") != "private" ||
			res.Header.Get("Content-Disposition") != "attachment" || res.Header.Get("Content-Type") != "image/jpeg" ||
			res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("download headers: %v", res.Header)
		}
	}
	over := randomBytes(limit + 1)
	if status, _, raw := ts.upload(t, ann, over, "video/mp4"); status != 413 || !strings.Contains(string(raw), "body_too_large") {
		t.Errorf("one byte over with Content-Length: %d %s", status, raw)
	}
	// Chunked: no Content-Length, so the stream itself passes the limit.
	res, raw := ts.exchangeMedia(t, "POST", "/api/v1/media", ann.token, map[string]string{"Content-Type": "video/mp4"},
		struct{ io.Reader }{bytes.NewReader(over)}, over)
	if res.StatusCode != 413 || !strings.Contains(string(raw), "body_too_large") {
		t.Errorf("one byte over, chunked: %d %s", res.StatusCode, raw)
	}
	if l := ts.leftovers(t, ann); len(l) > 0 {
		t.Errorf("left in the media folder: %v", l)
	}
	me := ts.do(t, "GET", "/api/v1/me", ann.token, nil)
	st := me.json["storage"].(map[string]any)
	if want := float64(nah.MediaCharge(1) + 64<<10 + 10<<20 + int64(limit)); st["media"] != want { // what the quota counts
		t.Errorf("storage %v, want media %v", st, want)
	}
}

// TestEmptyMediaRefused: an empty body, with Content-Length: 0 or chunked,
// and a resumable upload of Upload-Length: 0 are 400 empty_media, and
// leave no row, no file and no quota taken.
func TestEmptyMediaRefused(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	if status, _, raw := ts.upload(t, ann, nil, "image/jpeg"); status != 400 || !strings.Contains(string(raw), `"empty_media"`) {
		t.Errorf("Content-Length: 0: %d %s", status, raw)
	}
	res, raw := ts.exchangeMedia(t, "POST", "/api/v1/media", ann.token, map[string]string{"Content-Type": "image/jpeg"},
		struct{ io.Reader }{bytes.NewReader(nil)}, nil)
	if res.StatusCode != 400 || !strings.Contains(string(raw), `"empty_media"`) {
		t.Errorf("chunked, empty: %d %s", res.StatusCode, raw)
	}
	res, raw = ts.tus(t, "POST", "/api/v1/uploads", ann.token, map[string]string{"Upload-Length": "0"}, nil)
	if res.StatusCode != 400 || !strings.Contains(string(raw), `"empty_media"`) {
		t.Errorf("Upload-Length: 0: %d %s", res.StatusCode, raw)
	}
	if l := ts.leftovers(t, ann); len(l) > 0 {
		t.Errorf("left in the media folder: %v", l)
	}
	if files := uploadFiles(t, ts.dir, ann.id); len(files) > 0 {
		t.Errorf("left in the uploads folder: %v", files)
	}
	st, err := ts.store.StorageOf(t.Context(), ann.id)
	if err != nil || st.MediaCount != 0 || st.Media != 0 || st.Uploads != 0 {
		t.Errorf("storage after empty uploads: %+v %v", st, err)
	}
}

// TestMediaContentTypes: no Content-Type is application/octet-stream, a
// malformed one is 400, and types a browser would run are not served as
// themselves.
func TestMediaContentTypes(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	for _, c := range []struct{ sent, kept, served string }{
		{"", "application/octet-stream", "application/octet-stream"},
		{"image/heic", "image/heic", "image/heic"},
		{"Text/HTML; charset=utf-8", "text/html; charset=utf-8", "application/octet-stream"},
		{"image/svg+xml", "image/svg+xml", "application/octet-stream"},
		{"application/xhtml+xml", "application/xhtml+xml", "application/octet-stream"},
		{"*/*", "application/octet-stream", "application/octet-stream"},
		{"image/*", "application/octet-stream", "application/octet-stream"},
		{"text/javascript", "text/javascript", "application/octet-stream"},
	} {
		status, m, raw := ts.upload(t, ann, []byte("<script>alert(1)</script>"), c.sent)
		if status != 201 || m.ContentType != c.kept {
			t.Errorf("Content-Type %q: %d %s, want kept as %q", c.sent, status, raw, c.kept)
			continue
		}
		res, _ := ts.download(t, ann.token, ann.id, m.ID, nil)
		if got := res.Header.Get("Content-Type"); got != c.served {
			t.Errorf("Content-Type %q served as %q, want %q", c.sent, got, c.served)
		}
	}
	if status, _, raw := ts.upload(t, ann, []byte("x"), "not a type"); status != 400 || !strings.Contains(string(raw), "invalid_content_type") {
		t.Errorf("malformed Content-Type: %d %s", status, raw)
	}
}

// TestMediaRange asks for parts of a file: first byte, last byte, middle,
// suffix, beyond the end (416 with Content-Range), two ranges (multipart),
// If-None-Match (304) and HEAD.
func TestMediaRange(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	body := randomBytes(100_000)
	m := ts.mustUpload(t, ann, body)
	n := len(body)
	for _, c := range []struct {
		rng, contentRange string
		want              []byte
	}{
		{"bytes=0-0", "bytes 0-0/100000", body[:1]},
		{"bytes=99999-99999", "bytes 99999-99999/100000", body[n-1:]},
		{"bytes=1000-1999", "bytes 1000-1999/100000", body[1000:2000]},
		{"bytes=-500", "bytes 99500-99999/100000", body[n-500:]},
		{"bytes=99000-", "bytes 99000-99999/100000", body[99000:]},
	} {
		res, got := ts.download(t, ann.token, ann.id, m.ID, map[string]string{"Range": c.rng})
		if res.StatusCode != 206 || res.Header.Get("Content-Range") != c.contentRange || !bytes.Equal(got, c.want) {
			t.Errorf("Range %s: %d %q, %d bytes", c.rng, res.StatusCode, res.Header.Get("Content-Range"), len(got))
		}
	}
	res, raw := ts.download(t, ann.token, ann.id, m.ID, map[string]string{"Range": "bytes=100000-"})
	if res.StatusCode != 416 || res.Header.Get("Content-Range") != "bytes */100000" || !strings.Contains(string(raw), "range_not_satisfiable") {
		t.Errorf("Range beyond the end: %d %v %s", res.StatusCode, res.Header, raw)
	}
	// Two ranges: a multipart/byteranges body, each part its bytes.
	res, raw = ts.download(t, ann.token, ann.id, m.ID, map[string]string{"Range": "bytes=0-9,500-509"})
	ct := res.Header.Get("Content-Type")
	if res.StatusCode != 206 || !strings.HasPrefix(ct, "multipart/byteranges; boundary=") {
		t.Fatalf("two ranges: %d %q", res.StatusCode, ct)
	}
	mr := multipart.NewReader(bytes.NewReader(raw), strings.TrimPrefix(ct, "multipart/byteranges; boundary="))
	for _, want := range [][]byte{body[:10], body[500:510]} {
		p, err := mr.NextPart()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(p)
		if !bytes.Equal(got, want) {
			t.Errorf("part %s: wrong bytes", p.Header.Get("Content-Range"))
		}
	}
	// Ranges larger together than the file: the whole file, 200.
	res, raw = ts.download(t, ann.token, ann.id, m.ID, map[string]string{"Range": "bytes=0-99999,0-99999"})
	if res.StatusCode != 200 || !bytes.Equal(raw, body) {
		t.Errorf("overlapping ranges: %d, %d bytes", res.StatusCode, len(raw))
	}
	res, raw = ts.download(t, ann.token, ann.id, m.ID, map[string]string{"If-None-Match": `"` + m.SHA256 + `"`})
	if res.StatusCode != 304 || len(raw) != 0 || res.Header.Get("ETag") != `"`+m.SHA256+`"` {
		t.Errorf("If-None-Match: %d %v", res.StatusCode, res.Header)
	}
	res, _ = ts.download(t, ann.token, ann.id, m.ID, map[string]string{"If-None-Match": `"other"`})
	if res.StatusCode != 200 {
		t.Errorf("If-None-Match of another file: %d", res.StatusCode)
	}
	res, raw = ts.exchangeMedia(t, "HEAD", "/api/v1/people/"+ann.id+"/media/"+m.ID, ann.token, nil, nil, nil)
	if res.StatusCode != 200 || len(raw) != 0 || res.Header.Get("Content-Length") != strconv.Itoa(n) {
		t.Errorf("HEAD: %d %v", res.StatusCode, res.Header)
	}
}

// TestMediaZeroSuffixAndIfMatch: a Range of zero-length suffixes selects
// no byte (416 with Content-Range, not a 206 of "bytes 1000-999/1000"),
// one beside a real range is ignored, and a failed If-Match is 412 with
// the error body; a matching one sends the file.
func TestMediaZeroSuffixAndIfMatch(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	body := randomBytes(1000)
	m := ts.mustUpload(t, ann, body)
	for _, rng := range []string{"bytes=-0", "bytes=-00, -0"} {
		res, raw := ts.download(t, ann.token, ann.id, m.ID, map[string]string{"Range": rng})
		if res.StatusCode != 416 || res.Header.Get("Content-Range") != "bytes */1000" || !strings.Contains(string(raw), "range_not_satisfiable") {
			t.Errorf("Range %s: %d %q %s", rng, res.StatusCode, res.Header.Get("Content-Range"), raw)
		}
	}
	res, raw := ts.download(t, ann.token, ann.id, m.ID, map[string]string{"Range": "bytes=-0,0-9"})
	if res.StatusCode != 206 || res.Header.Get("Content-Range") != "bytes 0-9/1000" || !bytes.Equal(raw, body[:10]) {
		t.Errorf("Range bytes=-0,0-9: %d %q, %d bytes", res.StatusCode, res.Header.Get("Content-Range"), len(raw))
	}
	res, raw = ts.download(t, ann.token, ann.id, m.ID, map[string]string{"If-Match": `"other"`})
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); res.StatusCode != 412 || err != nil || e.Error.Code != "precondition_failed" || e.Error.Message == "" {
		t.Errorf("If-Match of another file: %d %q", res.StatusCode, raw)
	}
	res, raw = ts.download(t, ann.token, ann.id, m.ID, map[string]string{"If-Match": `"` + m.SHA256 + `"`})
	if res.StatusCode != 200 || !bytes.Equal(raw, body) {
		t.Errorf("If-Match of this file: %d, %d bytes", res.StatusCode, len(raw))
	}
}

// TestMediaAuthorization: a media file is read by its owner and their
// connections only; every refusal is the same 404 with no byte of it, and
// only the owner deletes.
func TestMediaAuthorization(t *testing.T) {
	ts := newTestServer(t)
	ann, bob, cat, dan := ts.signup(t, "ann"), ts.signup(t, "bob"), ts.signup(t, "cat"), ts.signup(t, "dan")
	ts.connect(t, ann, bob)
	ts.connect(t, ann, dan)
	secret := []byte("ann's photo, not for strangers")
	m := ts.mustUpload(t, ann, secret)
	catM := ts.mustUpload(t, cat, []byte("cat's photo"))
	gone := ts.mustUpload(t, ann, []byte("deleted soon"))
	if r := ts.do(t, "DELETE", "/api/v1/media/"+gone.ID, ann.token, nil); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	if r := ts.do(t, "DELETE", "/api/v1/connections/"+ann.id, dan.token, nil); r.status != 204 {
		t.Fatalf("disconnect: %d %s", r.status, r.raw)
	}
	for _, c := range []struct {
		name       string
		token      string
		owner, id  string
		wantStatus int
	}{
		{"self", ann.token, ann.id, m.ID, 200},
		{"connection", bob.token, ann.id, m.ID, 200},
		{"former connection", dan.token, ann.id, m.ID, 404},
		{"stranger", cat.token, ann.id, m.ID, 404},
		{"deleted media", ann.token, ann.id, gone.ID, 404},
		{"deleted media, connection", bob.token, ann.id, gone.ID, 404},
		{"another's media under my id", cat.token, cat.id, m.ID, 404},
		{"a stranger's media under a connection's id", bob.token, ann.id, catM.ID, 404},
		{"never existed", ann.token, ann.id, nah.NewMediaID(1), 404},
		{"unknown person", ann.token, nah.NewPersonID(), m.ID, 404},
		{"no token", "", ann.id, m.ID, 401},
	} {
		res, raw := ts.download(t, c.token, c.owner, c.id, nil)
		if res.StatusCode != c.wantStatus {
			t.Errorf("%s: %d, want %d", c.name, res.StatusCode, c.wantStatus)
		}
		if c.wantStatus != 200 && bytes.Contains(raw, secret) {
			t.Errorf("%s: the bytes leaked", c.name)
		}
		if c.wantStatus == 404 && !strings.Contains(string(raw), `"not_found"`) {
			t.Errorf("%s: %s", c.name, raw)
		}
	}
	for _, c := range []struct {
		name, token, id string
	}{
		{"a connection's", bob.token, m.ID},
		{"a stranger's", cat.token, m.ID},
		{"already deleted", ann.token, gone.ID},
	} {
		if r := ts.do(t, "DELETE", "/api/v1/media/"+c.id, c.token, nil); r.status != 404 {
			t.Errorf("delete %s: %d", c.name, r.status)
		}
	}
	// Path tricks in either id, sent raw: never a byte, always 404.
	for _, raw := range []string{
		"/api/v1/people/" + ann.id + "/media/..%2Fperson.db",
		"/api/v1/people/" + ann.id + "/media/..",
		"/api/v1/people/" + ann.id + "/media/" + strings.ToUpper(m.ID),
		"/api/v1/people/" + ann.id + "/media/" + m.ID + "%00",
		"/api/v1/people/" + ann.id + "/media/%2e%2e%2f%2e%2e%2fdirectory.db",
		"/api/v1/people/..%2F" + ann.id + "/media/" + m.ID,
		"/api/v1/people/" + ann.id + "%2Fmedia%2F" + m.ID + "/media/" + m.ID,
		"/api/v1/people/" + ann.id + "/media/" + m.ID + "/..",
		"/api/v1/people/./media/" + m.ID,
	} {
		for _, method := range []string{"GET", "DELETE"} {
			if method == "DELETE" {
				raw = "/api/v1/media/" + raw[strings.LastIndex(raw, "/media/")+len("/media/"):]
			}
			req, _ := http.NewRequest(method, ts.URL+"/", nil)
			req.URL.Opaque = raw
			req.Header.Set("Authorization", "Bearer "+bob.token)
			res, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 404 || bytes.Contains(body, secret) {
				t.Errorf("%s %s: %d %.100s", method, raw, res.StatusCode, body)
				continue
			}
			checkErrorContract(t, method+" "+raw, res, body)
		}
	}
	if res, raw := ts.download(t, bob.token, ann.id, m.ID, nil); res.StatusCode != 200 || !bytes.Equal(raw, secret) {
		t.Errorf("after the tricks, the file: %d %q", res.StatusCode, raw)
	}
}

// walkMedia sums what person id's folder holds on disk: person.db (not its
// -wal and -shm, as the quota) apart from the media files under media/.
func walkMedia(t *testing.T, ts *testServer, id string) (database, media int64) {
	t.Helper()
	root := filepath.Join(ts.dir, "people", id)
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if filepath.Dir(p) == root {
			if e.Name() == nah.PersonFileName { // as the quota counts it: not its -wal and -shm
				database += info.Size()
			}
		} else {
			media += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return database, media
}

// TestTinyFilesCountAgainstTheQuota: 1-byte uploads from four phones at a
// 20 MiB quota are refused (413 quota_exceeded, a resumable one too) once
// their nah.MediaChargeBytes each fill it, near 20 MiB / 4 KiB less the
// database, not after tens of thousands; a delete gives one charge back.
func TestTinyFilesCountAgainstTheQuota(t *testing.T) {
	const quota = 20 << 20
	ts := newTestServer(t, func(c *serverConfig) { c.QuotaBytes = quota })
	ann := ts.signup(t, "ann")
	most := quota / nah.MediaChargeBytes // 5,120: none fits past it
	var (
		mu       sync.Mutex
		ok       []string
		refused  bool
		attempts int
		wg       sync.WaitGroup
	)
	for range 4 {
		wg.Go(func() {
			for {
				mu.Lock()
				if refused || attempts > 2*most {
					mu.Unlock()
					return
				}
				attempts++
				mu.Unlock()
				// Not checked against openapi.json one by one: thousands.
				req, _ := http.NewRequest("POST", ts.URL+"/api/v1/media", strings.NewReader("x"))
				req.Header.Set("Authorization", "Bearer "+ann.token)
				req.Header.Set("Content-Type", "image/png")
				res, err := ts.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				raw, _ := io.ReadAll(res.Body)
				res.Body.Close()
				mu.Lock()
				switch {
				case res.StatusCode == 201:
					var m mediaJSON
					json.Unmarshal(raw, &m)
					ok = append(ok, m.ID)
				case res.StatusCode == 413 && strings.Contains(string(raw), `"quota_exceeded"`):
					refused = true
				default:
					t.Errorf("upload: %d %s", res.StatusCode, raw)
					refused = true
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	db, _ := walkMedia(t, ts, ann.id)
	t.Logf("%d 1-byte files stored before a refusal (database %d bytes), %d at most at %d bytes each", len(ok), db, most, nah.MediaChargeBytes)
	if !refused || len(ok) > most || int64(len(ok)+1)*nah.MediaChargeBytes+db < quota-nah.MediaChargeBytes*8 {
		t.Fatalf("%d 1-byte files stored, refused %v: want a refusal once %d files of %d bytes and the database's %d fill %d",
			len(ok), refused, len(ok), nah.MediaChargeBytes, db, quota)
	}
	if status, _, raw := ts.upload(t, ann, []byte("y"), "image/png"); status != 413 || !strings.Contains(string(raw), "quota_exceeded") {
		t.Errorf("one more: %d %s", status, raw)
	}
	res, raw := ts.tus(t, "POST", "/api/v1/uploads", ann.token, map[string]string{"Upload-Length": "1"}, nil)
	if res.StatusCode != 413 || !strings.Contains(string(raw), "quota_exceeded") {
		t.Errorf("a resumable one more: %d %s", res.StatusCode, raw)
	}
	for _, id := range ok[:2] {
		if r := ts.do(t, "DELETE", "/api/v1/media/"+id, ann.token, nil); r.status != 204 {
			t.Fatalf("delete: %d %s", r.status, r.raw)
		}
	}
	ts.mustUpload(t, ann, []byte("z"))
}

// TestMediaQuotaRace fills a person's quota from two phones at once: the
// total never passes it, the uploads that would are 413 quota_exceeded,
// and GET /me's counter equals a walk of the folder, before and after
// deletes.
func TestMediaQuotaRace(t *testing.T) {
	const size = 64 << 10
	ts := newTestServer(t, func(c *serverConfig) { c.QuotaBytes = 1 << 20 })
	ann := ts.signup(t, "ann")
	phone2 := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"}).str("token")
	db, _ := walkMedia(t, ts, ann.id)
	var (
		mu       sync.Mutex
		ok       []mediaJSON
		refused  int
		wg       sync.WaitGroup
		tokens   = []string{ann.token, phone2}
		attempts = 2 * int((1<<20)/size)
	)
	for p := range 2 {
		wg.Go(func() {
			for i := range attempts / 2 {
				body := randomBytes(size)
				// Chunked, so that the quota is met by the stream, not by
				// Content-Length, on some of them.
				var rd io.Reader = bytes.NewReader(body)
				if i%2 == 0 {
					rd = struct{ io.Reader }{rd}
				}
				res, raw := ts.exchangeMedia(t, "POST", "/api/v1/media", tokens[p], map[string]string{"Content-Type": "image/png"}, rd, body)
				mu.Lock()
				switch {
				case res.StatusCode == 201:
					var m mediaJSON
					json.Unmarshal(raw, &m)
					ok = append(ok, m)
				case res.StatusCode == 413 && strings.Contains(string(raw), "quota_exceeded"):
					refused++
				default:
					t.Errorf("upload: %d %s", res.StatusCode, raw)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	total := db + int64(len(ok))*size
	if total > 1<<20 || refused == 0 || len(ok) == 0 {
		t.Fatalf("%d stored (%d bytes with the database's %d), %d refused; quota %d", len(ok), total, db, refused, 1<<20)
	}
	// Nothing more fits; less than one more file's room is left, counted
	// with the database as it is now (its WAL grew with every row).
	dbNow, mediaNow := walkMedia(t, ts, ann.id)
	if left := 1<<20 - dbNow - mediaNow; left >= size+size/2 {
		t.Errorf("%d bytes of quota left unused with uploads refused (database %d, media %d)", left, dbNow, mediaNow)
	}
	checkStorage := func(when string) {
		t.Helper()
		me := ts.do(t, "GET", "/api/v1/me", ann.token, nil)
		st := me.json["storage"].(map[string]any)
		wantDB, wantMedia := walkMedia(t, ts, ann.id)
		if st["media"] != float64(wantMedia) || st["database"] != float64(wantDB) || me.json["storage_used"] != float64(wantDB+wantMedia) || st["quota"] != float64(1<<20) {
			t.Errorf("%s: /me says %v (used %v), the walk %d + %d", when, st, me.json["storage_used"], wantDB, wantMedia)
		}
	}
	checkStorage("full")
	for _, m := range ok[:3] {
		if r := ts.do(t, "DELETE", "/api/v1/media/"+m.ID, phone2, nil); r.status != 204 {
			t.Fatalf("delete: %d", r.status)
		}
	}
	checkStorage("after three deletes")
	if status, _, raw := ts.upload(t, ann, randomBytes(size), "image/png"); status != 201 {
		t.Errorf("after deletes, an upload: %d %s", status, raw)
	}
	checkStorage("after one more upload")
	if l := ts.leftovers(t, ann); len(l) > 0 {
		t.Errorf("left in the media folder: %v", l)
	}
}

// TestMediaStalledUploadCutOff: a body that stops coming is cut off after
// the transfer's grace (here shortened), with no file and no row left; a
// client that hangs up halfway leaves nothing either.
func TestMediaStalledUploadCutOff(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) {
		c.Transfer = Transfer{Grace: 300 * time.Millisecond, MinRate: 1 << 20}
	})
	ann := ts.signup(t, "ann")
	for _, hangUp := range []bool{false, true} {
		c := dialRaw(t, ts)
		fmt.Fprintf(c, "POST /api/v1/media HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: image/jpeg\r\nContent-Length: 10000000\r\n\r\n", ann.token)
		c.Write(randomBytes(100_000))
		start := time.Now()
		if hangUp {
			c.Close()
		} else {
			// The server closes the connection without an answer.
			n, err := io.Copy(io.Discard, c)
			if n != 0 || err != nil {
				t.Errorf("stalled: read %d bytes, %v", n, err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("cut off after %v", d)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for len(ts.leftovers(t, ann)) > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if l := ts.leftovers(t, ann); len(l) > 0 {
			t.Errorf("hang up %v: left %v", hangUp, l)
		}
	}
	me := ts.do(t, "GET", "/api/v1/me", ann.token, nil)
	if st := me.json["storage"].(map[string]any); st["media"] != float64(0) {
		t.Errorf("storage after cut-off uploads: %v", st)
	}
	// A body that keeps up with the rate goes through though it takes
	// longer than the grace.
	body := randomBytes(600 << 10)
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < len(body); i += 64 << 10 {
			pw.Write(body[i:min(i+64<<10, len(body))])
			time.Sleep(50 * time.Millisecond)
		}
		pw.Close()
	}()
	res, raw := ts.exchangeMedia(t, "POST", "/api/v1/media", ann.token, map[string]string{"Content-Type": "image/jpeg"}, pr, body)
	if res.StatusCode != 201 {
		t.Errorf("a slow steady upload: %d %s", res.StatusCode, raw)
	}
}

// TestMediaOutlastsServerTimeouts: an upload and a download slower than
// the server's 30 s read and write timeouts, but above the minimum rate,
// go through whole.
func TestMediaOutlastsServerTimeouts(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 35 s")
	}
	t.Parallel()
	ts := newTestServer(t, func(c *serverConfig) { c.Transfer = Transfer{Grace: 5 * time.Second, MinRate: 4 << 10} })
	ann := ts.signup(t, "ann")
	body := randomBytes(160 << 10) // 35 s at 4.5 KiB/s
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < len(body); i += 4608 {
			pw.Write(body[i:min(i+4608, len(body))])
			time.Sleep(time.Second)
		}
		pw.Close()
	}()
	res, raw := ts.exchangeMedia(t, "POST", "/api/v1/media", ann.token, map[string]string{"Content-Type": "video/mp4"}, pr, body)
	if res.StatusCode != 201 {
		t.Fatalf("slow upload: %d %s", res.StatusCode, raw)
	}
	var m mediaJSON
	json.Unmarshal(raw, &m)
	if m.SHA256 != hexSum(body) {
		t.Errorf("sha256 %s", m.SHA256)
	}
}

// TestMediaSlowDownloadCutOff: a reader that stops reading is cut off
// when its transfer's time is up, before the file is through.
func TestMediaSlowDownloadCutOff(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.Transfer = Transfer{Grace: 300 * time.Millisecond, MinRate: 8 << 20} })
	ann := ts.signup(t, "ann")
	const size = 24 << 20 // 3.3 s at 8 MiB/s
	m := ts.mustUpload(t, ann, randomBytes(size))
	c := dialRaw(t, ts)
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		tc.SetReadBuffer(4 << 10)
	}
	fmt.Fprintf(c, "GET /api/v1/people/%s/media/%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", ann.id, m.ID, ann.token)
	time.Sleep(5 * time.Second) // reads nothing past the deadline
	n, _ := io.Copy(io.Discard, c)
	if n >= size {
		t.Errorf("a reader that stalled got all %d bytes", n)
	}
}

// TestMediaExportImportDelete: a person's export holds their media files
// (this fails the day export stops including them), an import elsewhere
// brings every one back with its id and sha256, and deleting the person
// (with no grace) leaves no media file of theirs.
func TestMediaExportImportDelete(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.DeleteGrace = -1 })
	ann := ts.signup(t, "ann")
	bodies := map[string][]byte{}
	for _, n := range []int{1, 1000, 300 << 10} {
		b := randomBytes(n)
		bodies[ts.mustUpload(t, ann, b).ID] = b
	}
	res, tarball := sendChecked(t, ts.Client(), exportRequest(t, ts, "GET", ann.token), nil)
	if res.StatusCode != 200 {
		t.Fatalf("export: %d", res.StatusCode)
	}
	names, files := untarExport(t, tarball)
	if len(names) != 2+len(bodies) || names[0] != "person.db" || names[len(names)-1] != "manifest.json" {
		t.Fatalf("entries %v", names)
	}
	var m struct {
		Files      []struct{ Name, SHA256 string }
		MediaCount int `json:"media_count"`
	}
	json.Unmarshal(files["manifest.json"], &m)
	if len(m.Files) != 1 || m.MediaCount != len(bodies) {
		t.Fatalf("manifest files %v, %d media", m.Files, m.MediaCount)
	}
	for id, b := range bodies {
		if !bytes.Equal(files["media/"+id], b) {
			t.Errorf("media/%s: not the uploaded bytes", id)
		}
	}

	other := newTestServer(t)
	res2, err := other.store.ImportPerson(t.Context(), bytes.NewReader(tarball), store.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for id, b := range bodies {
		f, md, err := other.store.OpenMedia(t.Context(), res2.Person.ID, id)
		if err != nil {
			t.Fatalf("imported %s: %v", id, err)
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if !bytes.Equal(got, b) || md.SHA256 != hexSum(b) {
			t.Errorf("imported %s: other bytes", id)
		}
	}
	st, err := other.store.StorageOf(t.Context(), res2.Person.ID)
	if err != nil || st.MediaCount != len(bodies) || st.Media != 1+1000+300<<10 {
		t.Errorf("imported storage %+v %v", st, err)
	}

	if r := ts.do(t, "DELETE", "/api/v1/me", ann.token, map[string]string{"password": "password-ann"}); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	for _, d := range []string{"people", "deleted"} {
		if _, err := os.Stat(filepath.Join(ts.dir, d, ann.id)); !os.IsNotExist(err) {
			t.Errorf("%s/%s is still there: %v", d, ann.id, err)
		}
	}
}
