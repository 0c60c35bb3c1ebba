package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah/store"
)

// tusJS is the command that runs tus-js-client (pinned in
// app/testdata/tus; `make tusjs` installs it, as .ci/run does through make
// test). Without node or the package the test skips, except under CI.
func tusJS(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join("testdata", "tus", "node_modules", "tus-js-client", "package.json"))
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("tus-js-client is not installed (make tusjs): %v", err)
		}
		t.Skipf("tus-js-client is not installed (make tusjs); skipping: %v", err)
	}
	return node
}

type tusJSResult struct {
	OK      bool   `json:"ok"`
	URL     string `json:"url"`
	MediaID string `json:"mediaId"`
	Status  int    `json:"status"`
	Error   string `json:"error"`
}

// runTusJS uploads file to endpoint with tus-js-client and opts merged into
// its options, as a phone app does, and returns what the app would see.
func runTusJS(t *testing.T, node, endpoint, token string, file []byte, opts map[string]any) tusJSResult {
	t.Helper()
	path := filepath.Join(t.TempDir(), "clip.mp4")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	o, _ := json.Marshal(opts)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, filepath.Join("testdata", "tus", "tusjs.mjs"), endpoint, token, path, string(o)).CombinedOutput()
	var res tusJSResult
	if err != nil || json.Unmarshal(bytes.TrimSpace(out), &res) != nil {
		t.Fatalf("tus-js-client: %v\n%s", err, out)
	}
	return res
}

// tusProxy stands between tus-js-client and the server as a phone's
// network does: it notes each request's method (and override), and cuts
// the answers of the next `cut` creations: the server has made the upload,
// the client sees its connection drop.
type tusProxy struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
	cut  int
}

func newTusProxy(t *testing.T, target string) *tusProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &tusProxy{}
	errCut := errors.New("answer cut")
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		ModifyResponse: func(res *http.Response) error {
			p.mu.Lock()
			defer p.mu.Unlock()
			if res.Request.Method == "POST" && res.Request.URL.Path == "/api/v1/uploads" && res.StatusCode == 201 && p.cut > 0 {
				p.cut--
				return errCut
			}
			return nil
		},
		ErrorHandler: func(http.ResponseWriter, *http.Request, error) { panic(http.ErrAbortHandler) },
	}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.seen = append(p.seen, strings.TrimSpace(r.Method+" "+r.Header.Get("X-HTTP-Method-Override")))
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func countOf(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

// cutNext makes the proxy cut the answers of the next n creations.
func (p *tusProxy) cutNext(n int) {
	p.mu.Lock()
	p.cut = n
	p.mu.Unlock()
}

// take returns the requests seen since the last take.
func (p *tusProxy) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.seen
	p.seen = nil
	return s
}

// TestTusJSClient runs tus-js-client 4.3.1 itself against the server: a
// creation whose answer is lost, with and without an Idempotency-Key; a
// client that sends PATCH as POST with X-HTTP-Method-Override; parallel
// uploads (Upload-Concat), a zero-byte file and the unfinished-uploads
// limit, each refused in a way the client shows at once.
func TestTusJSClient(t *testing.T) {
	node := tusJS(t)
	ts := newTestServer(t)
	proxy := newTusProxy(t, ts.URL)
	endpoint := proxy.URL + "/api/v1/uploads"
	src := randomBytes(300_000)
	unfinished := func(t *testing.T, a account) []any {
		t.Helper()
		r := ts.do(t, "GET", "/api/v1/uploads", a.token, nil)
		if r.status != 200 {
			t.Fatalf("GET /uploads: %d %s", r.status, r.raw)
		}
		return r.json["uploads"].([]any)
	}
	run := func(t *testing.T, token string, file []byte, opts map[string]any) tusJSResult {
		t.Helper()
		proxy.take() // what an earlier subtest left
		return runTusJS(t, node, endpoint, token, file, opts)
	}
	stored := func(t *testing.T, a account, res tusJSResult) {
		t.Helper()
		if !res.OK || res.MediaID == "" {
			t.Fatalf("tus-js-client: %+v", res)
		}
		if _, got := ts.download(t, a.token, a.id, res.MediaID, nil); !bytes.Equal(got, src) {
			t.Fatalf("the media is not the file sent (%d bytes)", len(got))
		}
	}
	nothingKept := func(t *testing.T, a account) {
		t.Helper()
		st := ts.do(t, "GET", "/api/v1/me", a.token, nil).json["storage"].(map[string]any)
		if files := uploadFiles(t, ts.dir, a.id); len(files) != 0 || st["media"] != 0.0 || st["uploads"] != 0.0 {
			t.Fatalf("kept: uploads folder %v, storage %v", files, st)
		}
	}

	t.Run("creation cut, with an Idempotency-Key", func(t *testing.T) {
		a := ts.signup(t, "ana")
		proxy.cutNext(1)
		res := run(t, a.token, src, map[string]any{"headers": map[string]string{"Idempotency-Key": "clip-1"}})
		stored(t, a, res)
		if seen := proxy.take(); countOf(seen, "POST") != 2 {
			t.Fatalf("requests %v: the cut creation was not retried", seen)
		}
		if u := unfinished(t, a); len(u) != 0 {
			t.Fatalf("unfinished uploads after a keyed retry: %v", u)
		}
	})

	t.Run("creation cut, without a key", func(t *testing.T) {
		a := ts.signup(t, "bob")
		proxy.cutNext(1)
		stored(t, a, run(t, a.token, src, nil))
		u := unfinished(t, a)
		if len(u) != 1 || u[0].(map[string]any)["offset"] != 0.0 || !strings.Contains(u[0].(map[string]any)["metadata"].(string), "filename") {
			t.Fatalf("GET /uploads after a lost creation: %v, want the orphan at offset 0 with its metadata", u)
		}
		ts.clock.Advance(store.EmptyUploadExpiry + time.Second)
		if u := unfinished(t, a); len(u) != 0 {
			t.Fatalf("the orphan %v is still there %s after its creation", u, store.EmptyUploadExpiry+time.Second)
		}
		if st := ts.do(t, "GET", "/api/v1/me", a.token, nil).json["storage"].(map[string]any); st["uploads"] != 0.0 {
			t.Fatalf("storage after the orphan expired: %v", st)
		}
	})

	t.Run("X-HTTP-Method-Override", func(t *testing.T) {
		a := ts.signup(t, "cat")
		stored(t, a, run(t, a.token, src, map[string]any{"overridePatchMethod": true}))
		if seen := proxy.take(); !slices.Contains(seen, "POST PATCH") || slices.Contains(seen, "PATCH") {
			t.Fatalf("requests %v: want the piece as POST with X-HTTP-Method-Override: PATCH", seen)
		}
	})

	refused := func(t *testing.T, res tusJSResult, status int, says string) {
		t.Helper()
		if res.OK || res.Status != status || !strings.Contains(res.Error, says) {
			t.Fatalf("tus-js-client: %+v, want a %d that says %q", res, status, says)
		}
		if seen := proxy.take(); len(seen) != 1 {
			t.Fatalf("requests %v: want one, refused and not retried", seen)
		}
	}
	t.Run("Upload-Concat", func(t *testing.T) {
		a := ts.signup(t, "dan")
		res := run(t, a.token, src, map[string]any{"parallelUploads": 2})
		nothingKept(t, a)
		if res.OK || res.Status != 400 || !strings.Contains(res.Error, "concatenation_unsupported") {
			t.Fatalf("parallel uploads: %+v", res)
		}
	})

	t.Run("zero-byte file", func(t *testing.T) {
		a := ts.signup(t, "eve")
		refused(t, run(t, a.token, nil, nil), 400, "a media file has at least one byte")
		nothingKept(t, a)
	})

	t.Run("too many unfinished uploads", func(t *testing.T) {
		a := ts.signup(t, "fay")
		for range store.MaxResumables {
			ts.createUpload(t, a, 1000, "")
		}
		refused(t, run(t, a.token, src, nil), 413, "too_many_uploads")
	})
}
