package app

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPrometheusMetrics(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	ts.post(t, ann, []byte("x"))
	ts.do(t, "GET", "/api/v1/feed", ann.token, nil)
	rec := &strings.Builder{}
	ts.app.writePrometheus(rec)
	out := rec.String()
	for _, want := range []string{
		`nah_http_requests_total{route="/api/v1/feed",method="GET",code="2xx"} 1`,
		`nah_http_request_duration_seconds_count{route="/api/v1/moments",method="POST"} 1`,
		`nah_http_request_duration_seconds_bucket{route="/api/v1/feed",method="GET",le="+Inf"} 1`,
		"nah_open_person_files ", "nah_sqlite_memory_bytes ", "nah_goroutines ", "nah_resident_memory_bytes ", "nah_sqlite_connections ",
		"nah_request_budget_bytes ", "nah_request_budget_used_bytes ", "nah_requests_shed ",
		"nah_person_file_opens_total 1", "nah_person_file_closes_total 0", "nah_replica_takeups_total ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(out, ann.token) || strings.Contains(out, ann.id) {
		t.Error("metrics hold a token or an id")
	}
	pts := ts.app.metrics.series()
	if len(pts) != ringMinutes || pts[len(pts)-1].FeedP95 <= 0 || pts[len(pts)-1].PostP95 <= 0 {
		t.Fatalf("chart series: %+v", pts[len(pts)-1])
	}
}

// TestMetricsLabelsAreFixed: made-up methods and paths, thousands of them on
// one keep-alive connection, leave the metrics with labels from a fixed
// vocabulary (known methods else "other", routes of the router else
// "unmatched"), so the map cannot grow with what a client sends.
func TestMetricsLabelsAreFixed(t *testing.T) {
	ts := newTestServer(t)
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	paths := []string{"/", "/healthz", "/api/v1/feed", "/api/v1/nope%d", "/static/%d", "/console/people/%d", "/reset/%d/x"}
	const n = 3000
	for i := range n {
		method := fmt.Sprintf("M%d", i)
		if i%100 == 0 {
			method += strings.Repeat("X", 4000)
		}
		path := paths[i%len(paths)]
		if strings.Contains(path, "%d") {
			path = fmt.Sprintf(path, i)
		}
		if _, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: nah\r\n\r\n", method, path); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.Close {
			t.Fatalf("request %d: the server closed the connection", i)
		}
	}
	// And the known methods on unknown paths: still one "unmatched" each.
	for _, m := range []string{"GET", "POST", "DELETE"} {
		for i := range 100 {
			ts.do(t, m, fmt.Sprintf("/api/v1/nope/%d", i), "", nil)
		}
	}

	// Real routes keep their own label, the same pattern chi.Walk gave.
	for _, c := range []struct{ method, path, route string }{
		{"GET", "/healthz", "/healthz"},
		{"GET", "/console/people/x", "/console/people/{id}"},
		{"GET", "/static/nope.css", "/static/*"},
		{"HEAD", "/static/nope.css", "/static/*"},
	} {
		req, _ := http.NewRequest(c.method, ts.URL+c.path, nil)
		res, err := ts.Client().Transport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		ts.app.metrics.mu.RLock()
		rs := ts.app.metrics.routes[routeKey{c.method, c.route}]
		ts.app.metrics.mu.RUnlock()
		if rs == nil {
			t.Errorf("%s %s is not counted under route %q", c.method, c.path, c.route)
		}
	}

	m := ts.app.metrics
	m.mu.RLock()
	keys := make([]routeKey, 0, len(m.routes))
	for k := range m.routes {
		keys = append(keys, k)
	}
	m.mu.RUnlock()
	if len(keys) > 12 {
		t.Errorf("after %d made-up methods and paths the metrics hold %d label sets, e.g. %.80q", n, len(keys), keys[:3])
	}
	for _, k := range keys {
		if !slices.Contains(knownMethods, k.method) && k.method != "other" {
			t.Errorf("method label %.80q is not from the fixed vocabulary", k.method)
		}
		if k.route != "unmatched" && !m.patterns[k.route] {
			t.Errorf("route label %.80q is not a route of the router", k.route)
		}
	}
}

// TestScrapeWhileNewLabelsArrive: writing the Prometheus page while
// requests add label pairs never reads the map unlocked (a concurrent map
// read and write is a fatal error that kills the server).
func TestScrapeWhileNewLabelsArrive(t *testing.T) {
	ts := newTestServer(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// record itself takes any pair; the vocabulary is measure's.
		for i := range 20000 {
			ts.app.metrics.record(routeKey{"GET", fmt.Sprintf("/route/%d", i)}, 200, time.Millisecond)
		}
	}()
	for {
		select {
		case <-done:
			return
		default:
			ts.app.writePrometheus(io.Discard)
		}
	}
}
