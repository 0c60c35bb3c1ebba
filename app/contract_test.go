package app

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	vErrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/pb33f/libopenapi-validator/paths"
	"github.com/pb33f/libopenapi-validator/radix"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// The API's contract, openapi.json, is checked on every exchange the tests
// make through ts.do, ts.readAll and the raw API requests of the hostile
// tests: a status, header or body shape the document does not describe
// fails the test that produced it.
//
//   - The request is validated first (path, parameters, security, body). A
//     request the document refuses may still be sent on purpose (a bad
//     cursor, a short password), but the server must then refuse it too: a
//     2xx to such a request means the document is stricter than the server.
//   - The response is validated against the operation and status it
//     answers: the status must be listed, the body must fit its schema with
//     no field the schema does not name (the document leaves objects open so
//     that fields can be added; the tests hold the server to what is
//     written), and its headers must be declared for that response or be
//     among those on every response (everyResponseHeader).
//   - A request on no documented operation (an unknown path: 404, a method
//     the path does not take: 405 with Allow) has no response in the
//     document to check; its answer is checked against the Error schema
//     that the document's description promises for them.
var contract = sync.OnceValues(loadContract)

// Counts of responses checked in this test binary, printed by TestMain.
var (
	contractRouted   atomic.Int64 // against the operation they answer
	contractUnrouted atomic.Int64 // answers to requests on no operation, against the Error schema
)

func TestMain(m *testing.M) {
	code := m.Run()
	if r, u := contractRouted.Load(), contractUnrouted.Load(); r+u > 0 {
		fmt.Printf("openapi.json: %d responses validated: %d against the operation they answer, %d error answers to requests on no operation (404, 405, path tricks) against the Error schema\n", r+u, r, u)
	}
	os.Exit(code)
}

// everyResponseHeader is what any response may carry without the document
// declaring it: what net/http adds (Content-Length, Content-Type, Date, and
// Connection: close where it ends a connection, which is hop-by-hop and so
// not OpenAPI's to describe) and the security headers of headers.go, which
// the document's description lists.
var everyResponseHeader = []string{
	"Content-Length", "Content-Type", "Date", "Connection",
	"X-Content-Type-Options", "X-Frame-Options", "Content-Security-Policy",
}

type apiContract struct {
	model *v3.Document
	// requests checks requests as the server reads them: fields and query
	// parameters the document does not name are allowed (and ignored).
	requests validator.Validator
	// responses checks responses in strict mode: a field in a body that its
	// schema does not name fails.
	responses validator.Validator
	// errorSchema is components/schemas/Error, for unrouted answers.
	errorSchema *base.Schema
	schemas     schema_validation.SchemaValidator
	opts        *config.ValidationOptions
}

// loadContract reads, checks and builds openapi.json, once per test binary
// (contract): about 0.1 s, where checking an exchange takes 0.2 ms on
// average (17,700 of them in a run of the app tests add 3 to 4 s of CPU).
func loadContract() (*apiContract, error) {
	raw, err := os.ReadFile("../openapi.json")
	if err != nil {
		return nil, err
	}
	doc, err := libopenapi.NewDocument(raw)
	if err != nil {
		return nil, err
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	extra := config.WithStrictIgnoredHeadersExtra(everyResponseHeader...)
	c := &apiContract{
		model:     &m.Model,
		requests:  validator.NewValidatorFromV3Model(&m.Model),
		responses: validator.NewValidatorFromV3Model(&m.Model, config.WithStrictMode(), extra),
		schemas:   schema_validation.NewSchemaValidator(config.WithStrictMode()),
		// For paths.FindPath in checkHeaders: without a path tree or a
		// cache it compiles a regular expression per path per request.
		opts: config.NewValidationOptions(config.WithPathTree(radix.BuildPathTree(&m.Model)), config.WithRegexCache(&sync.Map{})),
	}
	c.requests.SetDocument(doc)
	if ok, errs := c.requests.ValidateDocument(); !ok {
		return nil, fmt.Errorf("openapi.json is not a valid OpenAPI document: %s", describe(errs))
	}
	if s, ok := m.Model.Components.Schemas.Get("Error"); ok {
		c.errorSchema = s.Schema()
	}
	if c.errorSchema == nil {
		return nil, fmt.Errorf("openapi.json has no components/schemas/Error")
	}
	return c, nil
}

// exchange is one request as sent and its answer as read.
type exchange struct {
	method, url string
	header      http.Header // of the request
	body        []byte      // of the request
	res         *http.Response
	resBody     []byte
}

// checkContract validates one exchange against openapi.json (see contract).
func checkContract(t *testing.T, x exchange) {
	t.Helper()
	c, err := contract()
	if err != nil {
		t.Fatal(err)
	}
	name := x.method + " " + strings.TrimPrefix(x.url, "http://"+x.res.Request.URL.Host)

	req, err := http.NewRequest(x.method, x.url, bytes.NewReader(x.body))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	req.Header = x.header.Clone()
	if len(x.body) > 0 && req.Header.Values("Content-Type") == nil { // a media upload may send an empty one
		// The server does not look at Content-Type, and the tests send
		// none; the document describes JSON bodies, as a client sends them.
		req.Header.Set("Content-Type", "application/json")
	}
	_, reqErrs := c.requests.ValidateHttpRequestSync(req)
	if slices.ContainsFunc(reqErrs, func(e *vErrors.ValidationError) bool {
		return e.IsPathMissingError() || e.IsOperationMissingError()
	}) {
		c.checkUnrouted(t, name, x)
		return
	}
	if len(reqErrs) > 0 && x.res.StatusCode < 300 {
		t.Errorf("%s: openapi.json refuses this request, but the server answered %d: %s", name, x.res.StatusCode, describe(reqErrs))
	}

	res := *x.res
	res.Body = io.NopCloser(bytes.NewReader(x.resBody))
	req, _ = http.NewRequest(x.method, x.url, nil)
	if _, errs := c.responses.ValidateHttpResponse(req, &res); len(errs) > 0 {
		t.Errorf("%s: the %d answer does not fit openapi.json: %s\n%.300s", name, x.res.StatusCode, describe(errs), x.resBody)
	}
	c.checkHeaders(t, name, req, x.res)
	contractRouted.Add(1)
}

// checkUnrouted checks the answer to a request on no documented operation:
// the 404 or 405 of the info description (or what any route may answer),
// with the Error body.
func (c *apiContract) checkUnrouted(t *testing.T, name string, x exchange) {
	t.Helper()
	switch s := x.res.StatusCode; {
	case s == 405 && x.res.Header.Get("Allow") == "":
		t.Errorf("%s: 405 without Allow", name)
	case s != 404 && s != 405 && s != 431 && s != 503:
		t.Errorf("%s: %d to a request on no documented operation; openapi.json promises 404 or 405", name, s)
	}
	extra := []string{"Allow", "Retry-After"}
	if u := x.res.Request.URL.Path; u == "/api/v1/uploads" || strings.HasPrefix(u, "/api/v1/uploads/") {
		extra = append(extra, "Tus-Resumable") // the info description's promise
	}
	c.checkErrorBody(t, name, x.res, x.resBody, extra...)
	contractUnrouted.Add(1)
}

// checkErrorBody checks an error answer that no operation describes
// against the Error schema; its headers may be those of every response and
// extra.
func (c *apiContract) checkErrorBody(t *testing.T, name string, res *http.Response, body []byte, extra ...string) {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: %d with Content-Type %q, not the JSON error body", name, res.StatusCode, ct)
	} else if ok, errs := c.schemas.ValidateSchemaBytesWithVersion(c.errorSchema, body, 3.1); !ok {
		t.Errorf("%s: the %d answer is not the Error schema: %s\n%.300s", name, res.StatusCode, describe(errs), body)
	}
	for h := range res.Header {
		if !slices.ContainsFunc(append(everyResponseHeader, extra...), func(d string) bool { return strings.EqualFold(d, h) }) {
			t.Errorf("%s: the %d answer has header %s, which openapi.json does not declare", name, res.StatusCode, h)
		}
	}
}

// checkHeaders fails a header that is neither among everyResponseHeader
// nor declared on the response of the operation that req was routed to.
// (The validator checks the values of declared headers, and that required
// ones are there, but not that undeclared ones are absent.)
func (c *apiContract) checkHeaders(t *testing.T, name string, req *http.Request, res *http.Response) {
	t.Helper()
	declared := slices.Clone(everyResponseHeader)
	if item, _, _ := paths.FindPath(req, c.model, c.opts); item != nil {
		if op := helpers.ExtractOperation(req, item); op != nil && op.Responses != nil {
			if r := op.Responses.FindResponseByCode(res.StatusCode); r != nil && r.Headers != nil {
				for h := range r.Headers.KeysFromOldest() {
					declared = append(declared, h)
				}
			}
		}
	}
	for h := range res.Header {
		if !slices.ContainsFunc(declared, func(d string) bool { return strings.EqualFold(d, h) }) {
			t.Errorf("%s: the %d answer has header %s, which openapi.json does not declare for it", name, res.StatusCode, h)
		}
	}
}

// describe formats validation errors, one line each, and each failure of a
// schema on a line of its own.
func describe(errs []*vErrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString("\n\t" + e.Message)
		if e.Reason != "" && e.Reason != e.Message {
			b.WriteString(": " + e.Reason)
		}
		for _, f := range e.SchemaValidationErrors {
			where := f.FieldPath
			if where == "" {
				where = strings.Join(f.InstancePath, "/")
			}
			reason := f.Reason
			if len(reason) > 200 { // a moment body in full is no help
				reason = reason[:200] + "…"
			}
			b.WriteString("\n\t\t" + strconv.Quote(where) + ": " + reason)
		}
	}
	return b.String()
}

// sendChecked sends req (whose body, if any, is body) with client, checks
// the exchange against openapi.json like ts.do, and returns the answer
// with its body read: for the API requests that tests build themselves.
func sendChecked(t *testing.T, client *http.Client, req *http.Request, body []byte) (*http.Response, []byte) {
	t.Helper()
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	checkContract(t, exchange{req.Method, req.URL.String(), req.Header, body, res, raw})
	return res, raw
}

// checkErrorContract checks only the answer of a request that the document
// cannot describe (a path with tricks in it, sent raw): it must be the
// Error schema, with no header the document does not declare on every
// response.
func checkErrorContract(t *testing.T, name string, res *http.Response, body []byte) {
	t.Helper()
	c, err := contract()
	if err != nil {
		t.Fatal(err)
	}
	c.checkErrorBody(t, name, res, body)
	contractUnrouted.Add(1)
}
