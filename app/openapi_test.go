package app

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
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
		if strings.HasPrefix(route, "/api/") || route == "/healthz" || strings.HasPrefix(route, "/join/") { // the console is HTML, not API
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

// TestOpenAPIListsErrorCodes: every error code the API's code can answer
// (the reasons given to nah.Errorf in app/ and store/, and every kind) is
// a known value of components/schemas/ErrorCode, so that generated
// clients have a constant for it; the console's own are not API answers.
func TestOpenAPIListsErrorCodes(t *testing.T) {
	raw, err := os.ReadFile("../openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas struct {
				ErrorCode struct {
					AnyOf []struct {
						Enum []string `json:"enum"`
					} `json:"anyOf"`
				} `json:"ErrorCode"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var known []string
	for _, a := range doc.Components.Schemas.ErrorCode.AnyOf {
		known = append(known, a.Enum...)
	}
	files, _ := filepath.Glob("*.go")
	more, _ := filepath.Glob("../store/*.go")
	files = append(append(files, more...), "../errors.go")
	reason := regexp.MustCompile(`Errorf\(\s*(?:nah\.)?[A-Z][A-Za-z]+,\s*"([a-z0-9_]+)"`)
	kind := regexp.MustCompile(`Code = "([a-z_]+)"`)
	// The console's and the import's own, answered as HTML pages.
	consoleOnly := []string{"invalid_link", "name_taken", "invalid_export", "export_too_new", "invalid_id", "bad_copy"}
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || strings.HasPrefix(filepath.Base(f), "console") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, re := range []*regexp.Regexp{reason, kind} {
			for _, m := range re.FindAllSubmatch(src, -1) {
				code := string(m[1])
				found++
				if !slices.Contains(known, code) && !slices.Contains(consoleOnly, code) {
					t.Errorf("%s answers error code %q, which ErrorCode in openapi.json does not list", f, code)
				}
			}
		}
	}
	if found < 40 {
		t.Fatalf("found only %d error codes in the source: the patterns no longer match it", found)
	}
}

// TestOpenAPIHeadHasNoBody fails when a HEAD operation describes a body for
// any status: a HEAD answer has none (RFC 9110 section 9.3.2), and
// oapi-codegen's client then fails on the empty body ("unexpected end of
// JSON input") instead of giving the app the status.
func TestOpenAPIHeadHasNoBody(t *testing.T) {
	raw, err := os.ReadFile("../openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	type response struct {
		Ref     string         `json:"$ref"`
		Content map[string]any `json:"content"`
	}
	var doc struct {
		Paths map[string]struct {
			Head *struct {
				Responses map[string]response `json:"responses"`
			} `json:"head"`
		} `json:"paths"`
		Components struct {
			Responses map[string]response `json:"responses"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	heads := 0
	for path, ops := range doc.Paths {
		if ops.Head == nil {
			continue
		}
		heads++
		for status, r := range ops.Head.Responses {
			ref := r.Ref
			if name, ok := strings.CutPrefix(r.Ref, "#/components/responses/"); ok {
				c, found := doc.Components.Responses[name]
				if !found {
					t.Errorf("HEAD %s %s: no component %s", path, status, name)
				}
				r = c
			}
			if len(r.Content) > 0 {
				t.Errorf("HEAD %s %s describes a body (%s)", path, status, ref)
			}
		}
	}
	if heads == 0 {
		t.Error("openapi.json has no HEAD operation")
	}
}
