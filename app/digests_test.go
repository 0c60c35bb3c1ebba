package app

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah/store"
)

// TestDigestSettings: PUT /me/digest saves what GET /me shows; a bad or
// missing field is 400 naming it.
func TestDigestSettings(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	if r := ts.do(t, "GET", "/api/v1/me", ann.token, nil); r.status != 200 || r.json["digest"] != nil {
		t.Fatalf("before any choice: %d %s", r.status, r.raw)
	}
	for _, c := range []struct {
		name string
		body any
		code string
	}{
		{"bad time", map[string]any{"time": "8:30", "timezone": "Europe/Lisbon", "enabled": true}, "invalid_time"},
		{"hour 24", map[string]any{"time": "24:00", "timezone": "Europe/Lisbon", "enabled": true}, "invalid_time"},
		{"no time", map[string]any{"timezone": "Europe/Lisbon", "enabled": true}, "invalid_time"},
		{"unknown zone", map[string]any{"time": "08:30", "timezone": "Europe/Atlantis", "enabled": true}, "invalid_timezone"},
		{"the server's zone", map[string]any{"time": "08:30", "timezone": "Local", "enabled": true}, "invalid_timezone"},
		{"a path", map[string]any{"time": "08:30", "timezone": "../../etc/passwd", "enabled": true}, "invalid_timezone"},
		{"an offset", map[string]any{"time": "08:30", "timezone": "+01:00", "enabled": true}, "invalid_timezone"},
		// Files of the host's zoneinfo that are no IANA zone: the host's
		// own zone, and New York's rules under another name.
		{"the host's localtime", map[string]any{"time": "08:30", "timezone": "localtime", "enabled": true}, "invalid_timezone"},
		{"posixrules", map[string]any{"time": "08:30", "timezone": "posixrules", "enabled": true}, "invalid_timezone"},
		{"the host's right/ copy", map[string]any{"time": "08:30", "timezone": "right/Europe/Lisbon", "enabled": true}, "invalid_timezone"},
		{"the host's posix/ copy", map[string]any{"time": "08:30", "timezone": "posix/Europe/Lisbon", "enabled": true}, "invalid_timezone"},
		{"no enabled", map[string]any{"time": "08:30", "timezone": "Europe/Lisbon"}, "invalid_enabled"},
		{"null enabled", `{"time":"08:30","timezone":"Europe/Lisbon","enabled":null}`, "invalid_json"},
		{"null time", `{"time":null,"timezone":"Europe/Lisbon","enabled":true}`, "invalid_json"},
	} {
		if r := ts.do(t, "PUT", "/api/v1/me/digest", ann.token, c.body); r.status != 400 || r.errCode() != c.code {
			t.Errorf("%s: %d %s, want 400 %s", c.name, r.status, r.raw, c.code)
		}
	}
	want := map[string]any{"time": "07:45", "timezone": "Asia/Kolkata", "enabled": true}
	if r := ts.do(t, "PUT", "/api/v1/me/digest", ann.token, want); r.status != 200 || fmt.Sprint(r.json) != fmt.Sprint(want) {
		t.Fatalf("put: %d %s", r.status, r.raw)
	}
	r := ts.do(t, "GET", "/api/v1/me", ann.token, nil)
	if fmt.Sprint(r.json["digest"]) != fmt.Sprint(want) {
		t.Errorf("GET /me digest %v, want %v", r.json["digest"], want)
	}
	if r := ts.do(t, "PUT", "/api/v1/me/digest", "", want); r.status != 401 {
		t.Errorf("without a token: %d", r.status)
	}
}

// TestDevices: registering is idempotent, an 11th device drops the
// oldest, DELETE removes one, tokens are bounded and checked, and a
// deleted account's devices are gone at once.
// TestDevicesInTheBody: PUT and DELETE /me/devices take the token in the
// body, an FCM token's ':' included, and the token never needs to be in a
// URL; the deprecated path form decodes %3A before it checks the token.
func TestDevicesInTheBody(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	fcm := "dXk1:APA91bH-x_y.z"
	devices := func() []store.Device {
		ds, err := ts.store.Devices().List(context.Background(), ann.id)
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	if r := ts.do(t, "PUT", "/api/v1/me/devices", ann.token, map[string]string{"token": fcm, "platform": "android"}); r.status != 204 {
		t.Fatalf("put in the body: %d %s", r.status, r.raw)
	}
	if ds := devices(); len(ds) != 1 || ds[0].Token != fcm || ds[0].Platform != "android" {
		t.Fatalf("devices after a put in the body: %+v", ds)
	}
	for _, c := range []struct {
		name, method string
		body         any
		status       int
		code         string
	}{
		{"put without a token", "PUT", map[string]string{"platform": "ios"}, 400, "invalid_token"},
		{"put a bad token", "PUT", map[string]string{"token": "a b", "platform": "ios"}, 400, "invalid_token"},
		{"put without a platform", "PUT", map[string]string{"token": "t1"}, 400, "invalid_platform"},
		{"put a null token", "PUT", `{"token":null,"platform":"ios"}`, 400, "invalid_json"},
		{"delete an unknown token", "DELETE", map[string]string{"token": "unknown"}, 404, "not_found"},
		{"delete without a token", "DELETE", map[string]string{}, 400, "invalid_token"},
	} {
		if r := ts.do(t, c.method, "/api/v1/me/devices", ann.token, c.body); r.status != c.status || r.errCode() != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, r.status, r.raw, c.status, c.code)
		}
	}
	if r := ts.do(t, "DELETE", "/api/v1/me/devices", ann.token, map[string]string{"token": fcm}); r.status != 204 || len(devices()) != 0 {
		t.Errorf("delete in the body: %d %s, %d devices left", r.status, r.raw, len(devices()))
	}
	// The path form, percent-encoded as encodeURIComponent writes it.
	enc := strings.ReplaceAll(fcm, ":", "%3A")
	if r := ts.do(t, "PUT", "/api/v1/me/devices/"+enc, ann.token, map[string]string{"platform": "android"}); r.status != 204 {
		t.Fatalf("put %s: %d %s", enc, r.status, r.raw)
	}
	if ds := devices(); len(ds) != 1 || ds[0].Token != fcm {
		t.Errorf("devices after a put of %s: %+v, want the decoded token", enc, ds)
	}
	if r := ts.do(t, "DELETE", "/api/v1/me/devices/"+enc, ann.token, nil); r.status != 204 || len(devices()) != 0 {
		t.Errorf("delete %s: %d %s", enc, r.status, r.raw)
	}
}

func TestDevices(t *testing.T) {
	ts := newTestServer(t)
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	ios := map[string]string{"platform": "ios"}
	count := func(a account) int {
		n, err := ts.store.Devices().Count(context.Background(), a.id)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for range 2 {
		if r := ts.do(t, "PUT", "/api/v1/me/devices/tok-0", ann.token, ios); r.status != 204 {
			t.Fatalf("put: %d %s", r.status, r.raw)
		}
	}
	if n := count(ann); n != 1 {
		t.Errorf("the same token twice: %d devices", n)
	}
	for i := 1; i <= 10; i++ {
		ts.do(t, "PUT", fmt.Sprintf("/api/v1/me/devices/tok-%d", i), ann.token, map[string]string{"platform": "android"})
	}
	ds, _ := ts.store.Devices().List(context.Background(), ann.id)
	if len(ds) != 10 || ds[len(ds)-1].Token != "tok-1" {
		t.Errorf("after 11 tokens: %d devices, oldest %v", len(ds), ds[len(ds)-1])
	}
	for _, c := range []struct {
		name, method, path string
		body               any
		status             int
		code               string
	}{
		{"bad platform", "PUT", "/api/v1/me/devices/tok-x", map[string]string{"platform": "windows"}, 400, "invalid_platform"},
		{"no platform", "PUT", "/api/v1/me/devices/tok-x", map[string]string{}, 400, "invalid_platform"},
		{"token too long", "PUT", "/api/v1/me/devices/" + strings.Repeat("a", 257), ios, 400, "invalid_token"},
		{"token with a bad character", "PUT", "/api/v1/me/devices/tok%20x", ios, 400, "invalid_token"},
		{"delete someone else's", "DELETE", "/api/v1/me/devices/tok-5", nil, 404, "not_found"},
		{"delete unknown", "DELETE", "/api/v1/me/devices/tok-none", nil, 404, "not_found"},
	} {
		tok := bob.token
		if c.method == "PUT" {
			tok = ann.token
		}
		if r := ts.do(t, c.method, c.path, tok, c.body); r.status != c.status || r.errCode() != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, r.status, r.raw, c.status, c.code)
		}
	}
	if r := ts.do(t, "DELETE", "/api/v1/me/devices/tok-5", ann.token, nil); r.status != 204 || count(ann) != 9 {
		t.Errorf("delete: %d, %d devices left", r.status, count(ann))
	}
	if r := ts.do(t, "DELETE", "/api/v1/me", ann.token, map[string]string{"password": "password-ann"}); r.status != 204 {
		t.Fatalf("delete account: %d", r.status)
	}
	if n := count(ann); n != 0 {
		t.Errorf("%d devices after the account's deletion", n)
	}
	ts.clock.Advance(8 * 24 * time.Hour)
	if _, err := ts.store.PurgeDeleted(context.Background()); err != nil {
		t.Fatal(err)
	}
}
