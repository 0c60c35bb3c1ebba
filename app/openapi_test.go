package app

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestOpenAPIMatchesRoutes fails when a route exists that openapi.json
// lacks, or the other way round. HEAD is answered wherever GET is, so the
// document has a HEAD for every GET, and a documented HEAD counts as
// routed when its path routes GET (the router may answer HEAD through GET
// rather than list it as a route of its own).
func TestOpenAPIMatchesRoutes(t *testing.T) {
	raw, err := os.ReadFile("../openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi %q, want 3.1", doc.OpenAPI)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			var o struct {
				Responses map[string]any `json:"responses"`
			}
			if err := json.Unmarshal(op, &o); err != nil || len(o.Responses) == 0 {
				t.Errorf("%s %s: no responses", method, path)
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	ts := newTestServer(t)
	var routed []string
	err = chi.Walk(ts.app.handler.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.TrimSuffix(route, "/")
		if strings.HasPrefix(route, "/api/") || route == "/healthz" { // the console is HTML, not API
			routed = append(routed, method+" "+route)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(documented)
	slices.Sort(routed)
	for _, r := range routed {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	for _, d := range documented {
		if path, ok := strings.CutPrefix(d, "HEAD "); ok {
			if !slices.Contains(routed, "GET "+path) && !slices.Contains(routed, d) {
				t.Errorf("openapi.json documents %s, which is not routed, and neither is GET %s", d, path)
			}
			continue
		}
		if !slices.Contains(routed, d) {
			t.Errorf("openapi.json documents %s, which is not routed", d)
		}
	}
	for _, d := range documented {
		if path, ok := strings.CutPrefix(d, "GET "); ok && !slices.Contains(documented, "HEAD "+path) {
			t.Errorf("openapi.json documents GET %s without its HEAD", path)
		}
	}
}
