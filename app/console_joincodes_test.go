package app

import (
	"net/url"
	"regexp"
	"strings"
	"testing"
)

func TestConsoleJoinCodes(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.OpenSignup = false })
	c := signedInAdmin(t, ts)
	p := postForm(t, c, ts.URL+"/console/joincodes", url.Values{"ttl": {"168h"}})
	code := regexp.MustCompile(`<output class="secret" id="secret">([0-9a-z]{16})</output>`).FindStringSubmatch(p.body)
	if p.status != 201 || code == nil {
		t.Fatalf("create: %d", p.status)
	}
	if p := postForm(t, c, ts.URL+"/console/joincodes", url.Values{"ttl": {"forever"}}); p.status != 400 {
		t.Fatalf("bad ttl: %d", p.status)
	}
	list := get(t, c, ts.URL+"/console/joincodes")
	if !strings.Contains(list.body, code[1][:4]+"…") || strings.Contains(list.body, code[1]) {
		t.Fatal("the list should show the hint and never the code")
	}
	id := regexp.MustCompile(`/console/joincodes/([0-9a-f]{16})/revoke`).FindStringSubmatch(list.body)
	if p := postForm(t, c, ts.URL+"/console/joincodes/"+id[1]+"/revoke", nil); p.status != 303 {
		t.Fatalf("revoke: %d", p.status)
	}
	r := ts.do(t, "POST", "/api/v1/accounts", "", map[string]string{"handle": "eve", "password": "password-eve", "join_code": code[1]})
	if r.status != 400 || r.errCode() != "invalid_join_code" {
		t.Fatalf("revoked code signed up: %d", r.status)
	}
	if p := postForm(t, c, ts.URL+"/console/joincodes/"+id[1]+"/revoke", nil); p.status != 404 {
		t.Fatalf("revoke twice: %d", p.status)
	}
}
