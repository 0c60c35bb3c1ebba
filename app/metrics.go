package app

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah/digest"
	"github.com/nah-app/nah/ui"
)

// Metrics are counters and latency histograms per route, kept in memory:
// no request log, only aggregates. They feed the console's overview chart
// (a ring of one-minute slots over the last 15 minutes) and, when
// NAH_METRICS_ADDR is set, a Prometheus text endpoint on its own listener.

// bucketsMs are the histogram bounds in milliseconds; the last is +Inf.
var bucketsMs = []float64{0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, math.Inf(1)}

// hist is a latency histogram with atomic counters.
type hist struct {
	counts [15]atomic.Int64 // len(bucketsMs)
	sumUs  atomic.Int64
	n      atomic.Int64
}

func (h *hist) observe(d time.Duration) {
	ms := float64(d.Microseconds()) / 1000
	i, _ := slices.BinarySearch(bucketsMs, ms)
	h.counts[min(i, len(bucketsMs)-1)].Add(1)
	h.sumUs.Add(d.Microseconds())
	h.n.Add(1)
}

// quantile estimates the q-quantile in ms as the upper bound of its bucket.
func (h *hist) quantile(q float64) float64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	var seen int64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			if math.IsInf(bucketsMs[i], 1) {
				return bucketsMs[i-1]
			}
			return bucketsMs[i]
		}
	}
	return bucketsMs[len(bucketsMs)-2]
}

// routeKey is one label set. Both labels come from a fixed vocabulary, so
// the map of them is bounded by len(knownMethods)+1 times the number of
// routes plus one, whatever clients send: Go's server accepts any token of
// up to ~16 KB as a method, and a path that matches no route is the
// client's own text.
type routeKey struct{ method, route string }

// knownMethods are the method labels; any other method is "other".
var knownMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}

// methodLabel is the label of method: the vocabulary's own string (not the
// request's, which would keep the request line alive) or "other".
func methodLabel(method string) string {
	if i := slices.Index(knownMethods, method); i >= 0 {
		return knownMethods[i]
	}
	return "other"
}

type routeStats struct {
	hist
	codes [6]atomic.Int64 // by status class: 1xx..5xx at 1..5
}

// slot is one minute of the overview chart.
type slot struct {
	minute int64 // unix minute; a stale slot is reset on first use
	feed   hist
	post   hist
	rssMax atomic.Int64
}

const ringMinutes = 15

type metrics struct {
	start time.Time
	now   func() time.Time

	// patterns are the router's route patterns, the only route labels
	// besides "unmatched"; set by setRoutes before the first request and
	// only read after.
	patterns map[string]bool

	mu     sync.RWMutex
	routes map[routeKey]*routeStats

	ringMu sync.Mutex // taken only to start a new minute
	ring   [ringMinutes]atomic.Pointer[slot]

	lastRSS atomic.Int64 // unix seconds of the last RSS sample
}

func newMetrics(now func() time.Time) *metrics {
	return &metrics{start: now(), now: now, routes: make(map[routeKey]*routeStats)}
}

// setRoutes takes the route labels from the router: every pattern it
// serves. A 404 or 405 can leave chi with a partial pattern such as
// "/api/v1/*" (the mount point), which is not one of them and so is
// "unmatched" like the rest.
func (m *metrics) setRoutes(r chi.Routes) {
	m.patterns = make(map[string]bool)
	// Walk fails only when its callback does, and this one does not.
	_ = chi.Walk(r, func(_, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		m.patterns[route] = true
		return nil
	})
}

// routeLabel is the label of the route r matched, or "unmatched".
func (m *metrics) routeLabel(r *http.Request) string {
	if p := routePattern(r); m.patterns[p] {
		return p
	}
	return "unmatched"
}

// slotFor returns the ring slot of the minute of t; lock-free but once a
// minute, since every feed and post lands here.
func (m *metrics) slotFor(t time.Time) *slot {
	minute := t.Unix() / 60
	i := minute % ringMinutes
	if s := m.ring[i].Load(); s != nil && s.minute == minute {
		return s
	}
	m.ringMu.Lock()
	defer m.ringMu.Unlock()
	s := m.ring[i].Load()
	if s == nil || s.minute != minute {
		s = &slot{minute: minute}
		m.ring[i].Store(s)
	}
	return s
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ReadFrom passes a copy on to the ResponseWriter's own ReadFrom, which
// sends a media file with sendfile rather than through a buffer.
func (w *statusWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return io.Copy(w.ResponseWriter, r)
}

// measure is the middleware that counts: route pattern, method, status
// class and duration, each label from a fixed vocabulary (see routeKey).
// Nothing about the request itself is kept.
func (m *metrics) measure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		d := time.Since(start)
		m.record(routeKey{methodLabel(r.Method), m.routeLabel(r)}, sw.status, d)
	})
}

func (m *metrics) record(k routeKey, status int, d time.Duration) {
	m.mu.RLock()
	rs := m.routes[k]
	m.mu.RUnlock()
	if rs == nil {
		m.mu.Lock()
		if rs = m.routes[k]; rs == nil {
			rs = new(routeStats)
			m.routes[k] = rs
		}
		m.mu.Unlock()
	}
	rs.observe(d)
	rs.codes[min(max(status/100, 1), 5)].Add(1)
	now := m.now()
	switch {
	case k.method == "GET" && k.route == "/api/v1/feed":
		m.slotFor(now).feed.observe(d)
	case k.method == "POST" && k.route == "/api/v1/moments":
		m.slotFor(now).post.observe(d)
	}
	m.sampleRSS(now, false)
}

// sampleRSS records resident memory into the current slot, at most every
// ten seconds.
func (m *metrics) sampleRSS(now time.Time, force bool) {
	last := m.lastRSS.Load()
	if !force && (now.Unix()-last < 10 || !m.lastRSS.CompareAndSwap(last, now.Unix())) {
		return
	}
	rss, _ := procMemory()
	s := m.slotFor(now)
	for {
		old := s.rssMax.Load()
		if rss <= old || s.rssMax.CompareAndSwap(old, rss) {
			return
		}
	}
}

// procMemory reads the resident memory now and at its peak (VmRSS, VmHWM)
// in bytes; zero where /proc is not there.
func procMemory() (rss, peak int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		for field, dst := range map[string]*int64{"VmRSS:": &rss, "VmHWM:": &peak} {
			if rest, ok := strings.CutPrefix(line, field); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				*dst = kb << 10
			}
		}
	}
	return rss, peak
}

// series returns the last 15 minutes, oldest first.
func (m *metrics) series() []ui.Point {
	now := m.now()
	m.sampleRSS(now, true) // a fresh sample for the current minute
	cur := now.Unix() / 60
	pts := make([]ui.Point, ringMinutes)
	for k := range ringMinutes {
		minute := cur - int64(ringMinutes-1-k)
		p := ui.Point{Minute: time.Unix(minute*60, 0).UTC()}
		if s := m.ring[minute%ringMinutes].Load(); s != nil && s.minute == minute {
			p.FeedP95, p.PostP95 = s.feed.quantile(0.95), s.post.quantile(0.95)
			p.RSSMB = float64(s.rssMax.Load()) / (1 << 20)
		}
		pts[k] = p
	}
	return pts
}

// writePrometheus writes every metric in the Prometheus text format.
func (a *App) writePrometheus(w io.Writer) {
	m := a.metrics
	// The rows are copied under the lock: a request with a new label pair
	// may write the map while the page is written, and a map read during a
	// write is a fatal error.
	type row struct {
		routeKey
		rs *routeStats
	}
	m.mu.RLock()
	rows := make([]row, 0, len(m.routes))
	for k, rs := range m.routes {
		rows = append(rows, row{k, rs})
	}
	m.mu.RUnlock()
	slices.SortFunc(rows, func(x, y row) int { return strings.Compare(x.route+x.method, y.route+y.method) })

	fmt.Fprintln(w, "# HELP nah_http_requests_total Requests served, by route, method and status class.")
	fmt.Fprintln(w, "# TYPE nah_http_requests_total counter")
	for _, k := range rows {
		rs := k.rs
		for c := 1; c <= 5; c++ {
			if n := rs.codes[c].Load(); n > 0 {
				fmt.Fprintf(w, "nah_http_requests_total{route=%q,method=%q,code=\"%dxx\"} %d\n", k.route, k.method, c, n)
			}
		}
	}
	fmt.Fprintln(w, "# HELP nah_http_request_duration_seconds Request latency, by route and method.")
	fmt.Fprintln(w, "# TYPE nah_http_request_duration_seconds histogram")
	for _, k := range rows {
		rs := k.rs
		var cum int64
		for i, b := range bucketsMs {
			cum += rs.counts[i].Load()
			le := "+Inf"
			if !math.IsInf(b, 1) {
				le = strconv.FormatFloat(b/1000, 'g', -1, 64)
			}
			fmt.Fprintf(w, "nah_http_request_duration_seconds_bucket{route=%q,method=%q,le=%q} %d\n", k.route, k.method, le, cum)
		}
		fmt.Fprintf(w, "nah_http_request_duration_seconds_sum{route=%q,method=%q} %g\n", k.route, k.method, float64(rs.sumUs.Load())/1e6)
		fmt.Fprintf(w, "nah_http_request_duration_seconds_count{route=%q,method=%q} %d\n", k.route, k.method, rs.n.Load())
	}
	rss, peak := procMemory()
	st := a.store.Stats()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	gauges := []gauge{
		{"nah_open_person_files", "Person files open now.", float64(st.OpenFiles)},
		{"nah_replica_queue", "Written person files waiting in the replication queue, watched or not: the replica lacks some of their writes.", float64(st.ReplicationQueue)},
		{"nah_replica_queue_wait_seconds", "Age of the oldest write of a person file waiting in the replication queue.", st.ReplicationQueueWait.Seconds()},
		{"nah_sqlite_connections", "SQLite connections open: one per open person file, plus the directory's writer and readers.", float64(st.SQLiteConnections)},
		{"nah_sqlite_memory_bytes", "Memory SQLite holds now (outside the Go heap).", float64(st.SQLiteBytes)},
		{"nah_sqlite_memory_peak_bytes", "The most memory SQLite has held.", float64(st.SQLitePeakBytes)},
		{"nah_head_cache_bytes", "Memory of the cached newest moments.", float64(st.HeadBytes)},
		{"nah_go_heap_bytes", "Go heap in use.", float64(ms.HeapInuse)},
		{"nah_resident_memory_bytes", "Resident memory of the process (VmRSS).", float64(rss)},
		{"nah_resident_memory_peak_bytes", "Peak resident memory of the process (VmHWM).", float64(peak)},
		{"nah_goroutines", "Goroutines now.", float64(runtime.NumGoroutine())},
		{"nah_request_budget_bytes", "Memory requests may hold at once (from NAH_MEMORY_LIMIT).", float64(a.mem.limit)},
		{"nah_request_budget_used_bytes", "Memory requests hold now.", float64(a.mem.used.Load())},
		{"nah_requests_shed", "Requests answered 503 because the budget was spent, since start.", float64(a.mem.shed.Load())},
		{"nah_uptime_seconds", "Seconds since start.", m.now().Sub(m.start).Seconds()},
		{"nah_person_files_unreadable", "Person files that cannot be read now: skipped in others' feeds, their owners get 503.", float64(st.UnreadableFiles)},
	}
	gauges = append(gauges, a.replicationGauges()...)
	gauges = append(gauges, a.drillGauges()...)
	for _, g := range gauges {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %g\n", g.name, g.help, g.name, g.name, g.v)
	}
	signins := a.signins.view()
	// What a post costs beyond its insert: the bench divides these by
	// posts; and who tried to get in (signins.go).
	for _, c := range []struct {
		name, help string
		v          int64
	}{
		{"nah_person_file_opens_total", "Person files opened, since start.", st.FileOpens},
		{"nah_person_file_closes_total", "Person files closed, since start.", st.FileCloses},
		{"nah_replica_takeups_total", "Person files handed to replication (a registration and a first sync each), since start.", st.TakeUps},
		{"nah_replica_ships_total", "Written person files shipped to the replica without a take-up (their new WAL frames as one LTX file), since start.", st.Ships},
		{"nah_console_signin_failures_total", "Console sign-ins refused for a wrong name or password, since start.", signins.Failed},
		{"nah_signin_lockouts_total", "Lockouts after too many wrong passwords, of an account or an address, in the console or the app, since start.", signins.Lockouts},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", c.name, c.help, c.name, c.name, c.v)
	}
	a.writeDigestMetrics(w)
}

// writeDigestMetrics writes the digest loop's counters and the push
// relay's latency; their names are fixed and they carry no label.
func (a *App) writeDigestMetrics(w io.Writer) {
	if a.cfg.Digests == nil {
		return
	}
	t := a.cfg.Digests.Totals()
	for _, c := range []struct {
		name, help string
		v          int64
	}{
		{"nah_digests_due_total", "People whose digest minute came, since start.", t.Due},
		{"nah_digests_sent_total", "Digests a device's push relay took, since start.", t.Sent},
		{"nah_digests_failed_total", "Digests that no device got (the relay failed, or counting did), since start.", t.Failed},
		{"nah_digests_skipped_total", "Due digests not sent: nothing new, no device, or no relay configured, since start.", t.Skipped},
		{"nah_key_change_pushes_sent_total", "Key change pushes the push relay took, one per device, since start.", t.KeyChangesSent},
		{"nah_key_change_pushes_failed_total", "Key change pushes the push relay refused or did not answer, since start.", t.KeyChangesFailed},
		{"nah_key_change_pushes_dropped_total", "Key changes not pushed because the queue was full, since start.", t.KeyChangesDropped},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", c.name, c.help, c.name, c.name, c.v)
	}
	const h = "nah_push_relay_request_duration_seconds"
	fmt.Fprintf(w, "# HELP %s Latency of each request to the push relay.\n# TYPE %s histogram\n", h, h)
	for i, b := range digest.LatencyBounds {
		le := "+Inf"
		if !math.IsInf(b, 1) {
			le = strconv.FormatFloat(b, 'g', -1, 64)
		}
		fmt.Fprintf(w, "%s_bucket{le=%q} %d\n", h, le, t.RelayLatency[i])
	}
	fmt.Fprintf(w, "%s_sum %g\n%s_count %d\n", h, t.RelaySum.Seconds(), h, t.RelayCount)
}

// gauge is one gauge of the Prometheus page.
type gauge struct {
	name, help string
	v          float64
}

// MetricsHandler serves the Prometheus text format; run it on its own
// listener (NAH_METRICS_ADDR), never on the public one.
func (a *App) MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		a.writePrometheus(w)
	})
}
