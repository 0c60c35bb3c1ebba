package app

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

// TestPostBodyForms sends posts in the one form the fast path reads in
// place and in forms only encoding/json reads right (escapes, a repeated
// key, whitespace, a second value): each answer and each stored body is
// what encoding/json makes of the request, whichever path read it.
func TestPostBodyForms(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	cases := []struct {
		name, raw string
		status    int
		code      string
		body      string // stored, for a 201
	}{
		{"plain", `{"body":"` + b64("hello") + `"}`, 201, "", "hello"},
		{"trailing white space", `{"body":"` + b64("white") + "\"} \n\t\r\n", 201, "", "white"},
		{"leading white space", ` {"body":"` + b64("lead") + `"}`, 201, "", "lead"},
		{"space after the colon", `{"body": "` + b64("colon") + `"}`, 201, "", "colon"},
		{"an escaped letter", `{"body":"` + strings.Replace(b64("escaped"), "X", `\u0058`, 1) + `"}`, 201, "", "escaped"},
		{"an escaped slash", `{"body":"` + b64("???") + `"}`, 201, "", "???"},
		{"the key twice", `{"body":"` + b64("first") + `","body":"` + b64("second") + `"}`, 201, "", "second"},
		{"another field", `{"body":"` + b64("other") + `","x":"` + b64("x") + `"}`, 201, "", "other"},
		{"two values", `{"body":"` + b64("one") + `"}{"body":"` + b64("two") + `"}`, 400, "invalid_json", ""},
		{"a raw line break", "{\"body\":\"" + b64("raw") + "\n\"}", 400, "invalid_json", ""},
		{"an escaped line break", `{"body":"` + b64("esc") + `\n"}`, 400, "invalid_body", ""},
		{"null", `{"body":null}`, 400, "invalid_json", ""},
		{"empty", `{"body":""}`, 400, "missing_body", ""},
		{"not closed", `{"body":"` + b64("open"), 400, "invalid_json", ""},
		{"bad padding", `{"body":"aGVsbG8==="}`, 400, "invalid_body", ""},
	}
	for _, c := range cases {
		if c.name == "an escaped slash" {
			if !strings.Contains(b64("???"), "/") {
				t.Fatalf("%s: no slash in %s", c.name, b64("???"))
			}
			c.raw = strings.Replace(c.raw, "/", `\/`, 1)
		}
		ts.clock.Advance(time.Millisecond) // the newest is the one just posted
		r := ts.do(t, "POST", "/api/v1/moments", ann.token, c.raw)
		if r.status != c.status || r.errCode() != c.code {
			t.Errorf("%s: %s: %d %s, want %d %q", c.name, c.raw, r.status, r.raw, c.status, c.code)
			continue
		}
		if c.status != 201 {
			continue
		}
		items := ts.readAll(t, ann.token, "/api/v1/feed", 1)
		if len(items) == 0 || items[0].ID != r.str("id") || items[0].Body != b64(c.body) {
			t.Errorf("%s: stored %+v, want id %s body %q", c.name, items[:min(1, len(items))], r.str("id"), c.body)
		}
	}
}
