package app

import (
	"strings"
	"testing"
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
