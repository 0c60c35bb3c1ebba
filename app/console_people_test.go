package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/nah-app/nah/store"
	"github.com/nah-app/nah/ui"
)

func TestConsolePeopleActions(t *testing.T) {
	ts := newTestServer(t)
	c := signedInAdmin(t, ts)
	// Create a person; they can sign in.
	p := postForm(t, c, ts.URL+"/console/people", url.Values{"handle": {"dan"}, "password": {"password-dan"}})
	if p.status != 303 {
		t.Fatalf("create: %d %s", p.status, p.body)
	}
	id := strings.TrimPrefix(strings.Split(p.header.Get("Location"), "?")[0], "/console/people/")
	r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "dan", "password": "password-dan"})
	if r.status != 201 {
		t.Fatalf("dan signs in: %d", r.status)
	}
	token := r.str("token")
	if p := postForm(t, c, ts.URL+"/console/people", url.Values{"handle": {"dan"}, "password": {"password-dan"}}); p.status != 409 {
		t.Fatalf("duplicate handle: %d", p.status)
	}
	// Disable: the token stops at once, and is revoked: enabling brings
	// it not back (the console says their tokens no longer work), and dan
	// signs in anew.
	postForm(t, c, ts.URL+"/console/people/"+id+"/disable", nil)
	if r := ts.do(t, "GET", "/api/v1/me", token, nil); r.status != 401 {
		t.Fatalf("disabled: %d", r.status)
	}
	postForm(t, c, ts.URL+"/console/people/"+id+"/enable", nil)
	if r := ts.do(t, "GET", "/api/v1/me", token, nil); r.status != 401 {
		t.Fatalf("a token from before the disable, once enabled: %d, want 401", r.status)
	}
	if r = ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "dan", "password": "password-dan"}); r.status != 201 {
		t.Fatalf("dan signs in once enabled: %d", r.status)
	}
	token = r.str("token")
	// Sessions: listed, revoked one by one.
	pg := get(t, c, ts.URL+"/console/people/"+id)
	m := regexp.MustCompile(`name="session" value="([0-9a-f]{16})"`).FindStringSubmatch(pg.body)
	if m == nil {
		t.Fatal("no session listed")
	}
	if p := postForm(t, c, ts.URL+"/console/people/"+id+"/sessions/revoke", url.Values{"session": {m[1]}}); p.status != 303 {
		t.Fatalf("revoke: %d", p.status)
	}
	if r := ts.do(t, "GET", "/api/v1/me", token, nil); r.status != 401 {
		t.Fatalf("revoked session: %d", r.status)
	}
	// Password reset link: shown once, works once, revokes sessions.
	r = ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "dan", "password": "password-dan"})
	token = r.str("token")
	p = postForm(t, c, ts.URL+"/console/people/"+id+"/reset", nil)
	link := regexp.MustCompile(`http://[^<"]+/reset/[A-Za-z0-9_-]+`).FindString(p.body)
	if p.status != 201 || link == "" {
		t.Fatalf("reset link: %d", p.status)
	}
	if p := get(t, consoleClient(t), link); p.status != 200 || !strings.Contains(p.body, "dan") {
		t.Fatalf("reset page: %d", p.status)
	}
	if p := postForm(t, consoleClient(t), link, url.Values{"password": {"short"}}); p.status != 400 {
		t.Fatalf("short password: %d", p.status)
	}
	if p := postForm(t, consoleClient(t), link, url.Values{"password": {"a-new-password"}, "password2": {"a-new-password"}}); p.status != 200 {
		t.Fatalf("reset: %d %s", p.status, p.body)
	}
	if r := ts.do(t, "GET", "/api/v1/me", token, nil); r.status != 401 {
		t.Fatalf("session survived a reset: %d", r.status)
	}
	if r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "dan", "password": "a-new-password"}); r.status != 201 {
		t.Fatalf("new password: %d", r.status)
	}
	if p := postForm(t, consoleClient(t), link, url.Values{"password": {"third-password"}}); p.status != 404 {
		t.Fatalf("reset link used twice: %d", p.status)
	}
}

func TestConsolePeoplePages(t *testing.T) {
	ts := newTestServer(t)
	for i := range peoplePerPage + 5 {
		if _, err := ts.store.CreatePerson(context.Background(), store.NewPerson{Handle: fmt.Sprintf("p%03d", i), PasswordHash: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	c := signedInAdmin(t, ts)
	p1 := get(t, c, ts.URL+"/console/people")
	p2 := get(t, c, ts.URL+"/console/people?page=2")
	rows := func(s string) int { return len(parseConsole(t, s).find("data-testid", "person")) }
	pages := parseConsole(t, p1.body).find("aria-label", "Pages")
	if rows(p1.body) != peoplePerPage || rows(p2.body) != 5 || len(pages) != 1 || text(pages[0]) != "page 1 of 2 Next" {
		t.Fatalf("pages hold %d and %d rows; the pager: %d", rows(p1.body), rows(p2.body), len(pages))
	}
	// htmx's search asks for the list alone.
	req, _ := http.NewRequest("GET", ts.URL+"/console/people?q=p00", nil)
	req.Header.Set("HX-Request", "true")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if s := string(b); parseConsole(t, s).find("lang", "en") != nil || !strings.HasPrefix(strings.TrimSpace(s), `<section id="people-list"`) || rows(s) != 10 {
		t.Fatalf("fragment: %.200s", s)
	}
}

// TestResetLinkIgnoresHost: the reset link the console shows starts with
// the configured public URL, whatever Host the request named: a forged Host
// (a proxy that passes it on, a DNS rebinding) must not send a reset token
// to another site.
func TestResetLinkIgnoresHost(t *testing.T) {
	for _, c := range []struct {
		name, publicURL, want string
	}{
		{"NAH_PUBLIC_URL", "https://nah.example.com/family", "https://nah.example.com/family/reset/"},
		{"listen address", "", "http://127.0.0.1:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := newTestServer(t, func(sc *serverConfig) { sc.PublicURL = c.publicURL })
			ann := ts.signup(t, "ann")
			admin := signedInAdmin(t, ts)
			req, _ := http.NewRequest("POST", ts.URL+"/console/people/"+ann.id+"/reset", nil)
			req.Host = "evil.example"
			req.Header.Set("X-Forwarded-Host", "evil.example")
			req.Header.Set("X-Forwarded-Proto", "https")
			for _, ck := range admin.Jar.Cookies(req.URL) { // the jar would look them up by Host
				req.AddCookie(ck)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			link := regexp.MustCompile(`[a-z]+://[^<"\s]+/reset/[A-Za-z0-9_-]{43}`).FindString(string(b))
			if res.StatusCode != 201 || link == "" {
				t.Fatalf("reset: %d, link %q", res.StatusCode, link)
			}
			if !strings.HasPrefix(link, c.want) || strings.Contains(string(b), "evil.example") {
				t.Fatalf("link %q, want it to start with %s and the page not to name the forged Host", link, c.want)
			}
			if c.publicURL == "" {
				if p := get(t, consoleClient(t), link); p.status != 200 {
					t.Fatalf("the link from the listen address: %d", p.status)
				}
			}
		})
	}
}

// TestConsoleDeleteAndUndo: the person's page deletes only once the handle
// is typed; the deleted list shows when the purge comes and undoes the
// deletion: every moment is back, sessions stay revoked (the password still
// signs in: no reset needed), connections do not come back.
func TestConsoleDeleteAndUndo(t *testing.T) {
	ts := newTestServer(t)
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	ts.connect(t, ann, bob)
	var want []string
	for i := range 5 {
		ts.clock.Advance(time.Second)
		want = append(want, ts.post(t, ann, []byte(fmt.Sprintf("moment %d", i))))
	}
	c := signedInAdmin(t, ts)
	if p := get(t, c, ts.URL+"/console/people/"+ann.id); !strings.Contains(p.body, `action="/console/people/`+ann.id+`/delete"`) {
		t.Fatal("no delete form on the person's page")
	}
	p := postForm(t, c, ts.URL+"/console/people/"+ann.id+"/delete", url.Values{"handle": {"bob"}})
	if p.status != 400 || !strings.Contains(p.body, "Type the handle ann") {
		t.Fatalf("wrong handle: %d", p.status)
	}
	if r := ts.do(t, "GET", "/api/v1/me", ann.token, nil); r.status != 200 {
		t.Fatalf("a wrong handle deleted: %d", r.status)
	}
	if p := postForm(t, c, ts.URL+"/console/people/"+ann.id+"/delete", url.Values{"handle": {"ann"}}); p.status != 303 || p.header.Get("Location") != "/console/deleted?m=deleted" {
		t.Fatalf("delete: %d %s", p.status, p.header.Get("Location"))
	}
	if r := ts.do(t, "GET", "/api/v1/me", ann.token, nil); r.status != 401 {
		t.Fatalf("token after delete: %d", r.status)
	}
	if p := get(t, c, ts.URL+"/console/people/"+ann.id); p.status != 404 {
		t.Fatalf("a deleted person's page: %d", p.status)
	}
	list := get(t, c, ts.URL+"/console/deleted?m=deleted")
	if list.status != 200 || !strings.Contains(list.body, "ann") || !strings.Contains(list.body, "7 days") ||
		!strings.Contains(list.body, ui.When(ts.clock.Now().Add(7*24*time.Hour).UnixMilli())) {
		t.Fatalf("deleted list: %d %s", list.status, list.body)
	}
	if p := postForm(t, c, ts.URL+"/console/deleted/"+ann.id+"/restore", nil, "Origin", "https://evil.example"); p.status != 403 {
		t.Fatalf("cross-origin undo: %d", p.status)
	}
	if p := postForm(t, c, ts.URL+"/console/deleted/"+ann.id+"/restore", nil); p.status != 303 {
		t.Fatalf("undo: %d %s", p.status, p.body)
	}
	if p := postForm(t, c, ts.URL+"/console/deleted/"+ann.id+"/restore", nil); p.status != 404 {
		t.Fatalf("undo twice: %d", p.status)
	}
	if r := ts.do(t, "GET", "/api/v1/me", ann.token, nil); r.status != 401 {
		t.Fatalf("a session came back with the undo: %d", r.status)
	}
	r := ts.do(t, "POST", "/api/v1/sessions", "", map[string]string{"handle": "ann", "password": "password-ann"})
	if r.status != 201 {
		t.Fatalf("sign-in after undo: %d", r.status)
	}
	ann.token = r.str("token")
	got := ts.readAll(t, ann.token, "/api/v1/people/"+ann.id+"/moments", 2)
	if len(got) != len(want) {
		t.Fatalf("%d moments after undo, want %d", len(got), len(want))
	}
	for i, it := range got {
		if it.ID != want[len(want)-1-i] {
			t.Fatalf("moment %d: %s, want %s", i, it.ID, want[len(want)-1-i])
		}
	}
	if me := ts.do(t, "GET", "/api/v1/me", ann.token, nil); me.json["connections"].(float64) != 0 {
		t.Fatalf("connections came back: %s", me.raw)
	}
	if items := ts.readAll(t, bob.token, "/api/v1/feed", 10); len(items) != 0 {
		t.Fatalf("bob sees ann again without reconnecting: %v", items)
	}
}

// TestPeopleListCounts: the People list shows each person's moments,
// storage (database and counted media) and last active, from the store's
// counts; Create and Import come before the list.
func TestPeopleListCounts(t *testing.T) {
	ts := newTestServer(t)
	ann, bea := ts.signup(t, "ann"), ts.signup(t, "bea")
	ts.post(t, ann, []byte("one"))
	ts.post(t, ann, []byte("two"))
	photo := strings.Repeat("a photo ", 4096)
	ts.mustUpload(t, ann, []byte(photo))
	c := signedInAdmin(t, ts)
	p := get(t, c, ts.URL+"/console/people")
	doc := parseConsole(t, p.body)
	cell := func(row *html.Node, id string) string {
		for n := range row.Descendants() {
			if v, _ := attr(n, "data-testid"); v == id {
				return text(n)
			}
		}
		return ""
	}
	rows := doc.find("data-testid", "person")
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	annP, err := ts.store.FindPersonByID(context.Background(), ann.id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ts.store.StorageOf(context.Background(), ann.id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Media < int64(len(photo)) {
		t.Fatalf("ann's media: %d bytes", st.Media)
	}
	got := []string{cell(rows[0], "moments"), cell(rows[0], "storage"), cell(rows[0], "newest-moment")}
	if want := []string{"2", ui.Bytes(st.Database + st.Media), ui.When(annP.NewestAt)}; !slices.Equal(got, want) {
		t.Errorf("ann's row: %q, want %q", got, want)
	}
	beaSt, err := ts.store.StorageOf(context.Background(), bea.id) // counts her media from now
	if err != nil {
		t.Fatal(err)
	}
	if got := cell(rows[1], "moments") + " | " + cell(rows[1], "newest-moment"); got != "0 | none yet" {
		t.Errorf("bea's row: %q", got)
	}
	if s := cell(rows[1], "storage"); s != ui.Bytes(beaSt.Database)+" and photos not counted yet" {
		t.Errorf("bea's storage before her media were counted: %q", s)
	}
	if s := cell(parseConsole(t, get(t, c, ts.URL+"/console/people").body).find("data-testid", "person")[1], "storage"); s != ui.Bytes(beaSt.Database) {
		t.Errorf("bea's storage once counted: %q", s)
	}
	// Create and Import, then the list.
	var order []string
	for n := range doc.root.Descendants() {
		if id, _ := attr(n, "id"); id == "create-person" || id == "import-person" || id == "people-list" {
			order = append(order, id)
		}
	}
	if !slices.Equal(order, []string{"create-person", "import-person", "people-list"}) {
		t.Errorf("the People page's order: %v", order)
	}
}
