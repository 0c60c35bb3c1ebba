package app

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nah-app/nah/internal/testutil"
	"github.com/nah-app/nah/store"
)

// postImport sends the console's import form: handle first, then the file,
// as a browser sends them.
func postImport(t *testing.T, c *http.Client, ts *testServer, handle string, tarball []byte) htmlPage {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("handle", handle)
	fw, err := mw.CreateFormFile("export", "ann.tar")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(tarball)
	mw.Close()
	req, _ := http.NewRequest("POST", ts.URL+"/console/people/import", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return send(t, c, req)
}

// TestImportRoundTrip moves a person with 50 moments (some binary) from one
// server to another: exported through the API, imported through the
// console's form on the second server (and through the store directly on a
// third data directory). Every moment's id, time and body is equal; the
// one-time link sets a password that signs in; the former connection with
// an account here is named; a taken handle is refused with a message that
// names the new handle, which then works.
func TestImportRoundTrip(t *testing.T) {
	old := newTestServer(t)
	ann, bob, cyd := old.signup(t, "ann"), old.signup(t, "bob"), old.signup(t, "cyd")
	old.connect(t, ann, bob)
	old.connect(t, ann, cyd)
	for i := range 50 {
		body := []byte(strings.Repeat("moment ", i+1))
		if i%4 == 0 {
			body = []byte{0, 0xff, 0xfe, byte(i), '\n', 0x80, 0}
		}
		old.post(t, ann, body)
	}
	want := old.readAll(t, ann.token, "/api/v1/people/"+ann.id+"/moments", 20)
	if len(want) != 50 {
		t.Fatalf("%d moments on the old server", len(want))
	}
	res, err := old.Client().Do(exportRequest(t, old, "GET", ann.token))
	if err != nil {
		t.Fatal(err)
	}
	tarball, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("export: %d %v", res.StatusCode, err)
	}

	ts := newTestServer(t)
	bobHere := ts.signup(t, "bob")
	c := signedInAdmin(t, ts)
	if p := get(t, c, ts.URL+"/console/people"); !strings.Contains(p.body, `action="/console/people/import"`) || !strings.Contains(p.body, `enctype="multipart/form-data"`) {
		t.Fatal("the people page has no import form")
	}
	p := postImport(t, c, ts, "", tarball)
	link := regexp.MustCompile(`http://[^<"]+/reset/[A-Za-z0-9_-]{43}`).FindString(p.body)
	if p.status != 201 || link == "" {
		t.Fatalf("import: %d, link %q\n%s", p.status, link, p.body)
	}
	former := regexp.MustCompile(`(?s)<ul id="former-connections">(.*?)</ul>`).FindStringSubmatch(p.body)
	if former == nil || !strings.Contains(former[1], "bob") || strings.Contains(former[1], "cyd") {
		t.Errorf("former connections here: %v, want bob only", former)
	}

	// No password matches until the link sets one.
	if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"}); r.status != 401 {
		t.Fatalf("sign-in before the link: %d", r.status)
	}
	if p := postForm(t, consoleClient(t), link, url.Values{"password": {"a-new-password"}, "password2": {"a-new-password"}}); p.status != 200 {
		t.Fatalf("link: %d %s", p.status, p.body)
	}
	r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "a-new-password"})
	if r.status != 201 {
		t.Fatalf("sign-in after the link: %d", r.status)
	}
	newID := r.json["person"].(map[string]any)["id"].(string)
	if newID == ann.id {
		t.Error("the import kept the old id")
	}
	got := ts.readAll(t, r.str("token"), "/api/v1/people/"+newID+"/moments", 20)
	if len(got) != len(want) {
		t.Fatalf("%d moments here, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].CreatedAt != want[i].CreatedAt || got[i].Body != want[i].Body || got[i].Author != newID {
			t.Fatalf("moment %d: got %+v, want %+v by %s", i, got[i], want[i], newID)
		}
	}

	// Their console page names the former connections here, until they
	// connect again.
	page := get(t, c, ts.URL+"/console/people/"+newID)
	former = regexp.MustCompile(`(?s)<p id="former">(.*?)</p>`).FindStringSubmatch(page.body)
	if page.status != 200 || former == nil || !strings.Contains(former[1], "bob") || strings.Contains(former[1], "cyd") {
		t.Fatalf("the person page's former connections: %d %v", page.status, former)
	}
	annHere := account{id: newID, handle: "ann", token: r.str("token")}
	ts.connect(t, annHere, bobHere)
	if page := get(t, c, ts.URL+"/console/people/"+newID); strings.Contains(page.body, `id="former"`) {
		t.Fatal("bob is still a former connection once connected again")
	}

	// A taken handle names the way out; the new handle works.
	if p := postImport(t, c, ts, "", tarball); p.status != 409 || !strings.Contains(p.body, "new handle") {
		t.Fatalf("import of a taken handle: %d\n%s", p.status, p.body)
	}
	if p := postImport(t, c, ts, "ann.two", tarball); p.status != 201 || !strings.Contains(p.body, "ann.two") {
		t.Fatalf("import as ann.two: %d\n%s", p.status, p.body)
	}
	if p := postImport(t, c, ts, "", []byte("not a tar at all, not even close")); p.status != 400 || !strings.Contains(p.body, "not a usable nah export") {
		t.Fatalf("import of junk: %d\n%s", p.status, p.body)
	}
	if left, _ := filepath.Glob(filepath.Join(ts.dir, "import-tmp-*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	if p := postImport(t, consoleClient(t), ts, "", tarball); p.status != 303 {
		t.Errorf("import without an admin: %d", p.status)
	}

	// The store directly, on a data directory of its own.
	s, err := store.Open(context.Background(), store.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	imp, err := s.ImportPerson(context.Background(), bytes.NewReader(tarball), store.ImportOptions{})
	if err != nil || imp.Moments != 50 || imp.Person.Handle != "ann" || len(imp.Connections) != 0 {
		t.Fatalf("store import: %+v, %v", imp, err)
	}
	ms, err := s.Moments(context.Background(), imp.Person.ID, nil, 100, nil)
	if err != nil || len(ms) != 50 {
		t.Fatalf("%d moments, %v", len(ms), err)
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	for _, w := range want {
		if !slices.Contains(ids, w.ID) {
			t.Fatalf("moment %s missing", w.ID)
		}
	}
}

// TestMoveAPerson is the whole move of issue 10: a person exports their
// data, deletes their account on a server that purges at once, and is
// imported on another: every moment (id, time, body) is there, the handle
// signs in through the one-time link, and the old server keeps no file
// that names them.
func TestMoveAPerson(t *testing.T) {
	old := newTestServer(t, func(c *serverConfig) { c.DeleteGrace = -1 })
	ann := old.signup(t, "ann")
	for i := range 30 {
		old.post(t, ann, []byte{byte(i), 0xff, 'm'})
	}
	want := old.readAll(t, ann.token, "/api/v1/people/"+ann.id+"/moments", 100)
	res, err := old.Client().Do(exportRequest(t, old, "GET", ann.token))
	if err != nil {
		t.Fatal(err)
	}
	tarball, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("export: %d %v", res.StatusCode, err)
	}
	if r := old.do(t, "DELETE", "/api/v1/me", ann.token, map[string]string{"password": "password-ann"}); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	old.Close()
	if err := old.store.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.NoTrace(t, old.dir, ann.id)

	ts := newTestServer(t)
	got, err := ts.store.ImportPerson(context.Background(), bytes.NewReader(tarball), store.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	link := get(t, consoleClient(t), ts.URL+"/reset/"+got.Link)
	if link.status != 200 {
		t.Fatalf("the one-time link: %d", link.status)
	}
	if p := postForm(t, consoleClient(t), ts.URL+"/reset/"+got.Link, url.Values{"password": {"a-new-password"}, "password2": {"a-new-password"}}); p.status != 200 {
		t.Fatalf("setting the password: %d", p.status)
	}
	r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "a-new-password"})
	if r.status != 201 {
		t.Fatalf("sign-in on the new server: %d %s", r.status, r.raw)
	}
	moved := ts.readAll(t, r.str("token"), "/api/v1/people/"+got.Person.ID+"/moments", 100)
	if len(moved) != len(want) {
		t.Fatalf("%d moments moved, %d posted", len(moved), len(want))
	}
	for i := range want {
		if moved[i].ID != want[i].ID || moved[i].CreatedAt != want[i].CreatedAt || moved[i].Body != want[i].Body {
			t.Fatalf("moment %d: %+v, was %+v", i, moved[i], want[i])
		}
	}
}
