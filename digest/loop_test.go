package digest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/internal/testutil"
	"github.com/nah-app/nah/store"
)

// The loop's tests run the real store on files in t.TempDir and a fake
// push relay: an httptest.Server that records what it is sent and can
// fail, stall, or answer 410 for a token. The clock is the store's and the
// loop's, moved by the test; Run is called for each minute.

// received is one request the relay got.
type received struct {
	push
	at   time.Time // the test clock when it arrived
	auth string
}

type fakeRelay struct {
	*httptest.Server
	clock *testutil.Clock

	mu    sync.Mutex
	got   []received
	fail  atomic.Bool  // answer 503
	stall atomic.Int64 // sleep this long (ns) before answering
	hang  sync.Map     // token -> true: never answer (until the request is cancelled)
	gone  sync.Map     // token -> true: answer 410
}

func newFakeRelay(t *testing.T, clock *testutil.Clock) *fakeRelay {
	r := &fakeRelay{clock: clock}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var p push
		if err := json.NewDecoder(req.Body).Decode(&p); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.got = append(r.got, received{p, clock.Now(), req.Header.Get("Authorization")})
		r.mu.Unlock()
		if _, hang := r.hang.Load(p.Token); hang {
			<-req.Context().Done()
			return
		}
		if d := r.stall.Load(); d > 0 {
			select {
			case <-time.After(time.Duration(d)):
			case <-req.Context().Done():
				return
			}
		}
		switch _, gone := r.gone.Load(p.Token); {
		case r.fail.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
		case gone:
			w.WriteHeader(http.StatusGone)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *fakeRelay) received() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func (r *fakeRelay) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// byToken groups what the relay got by device token.
func (r *fakeRelay) byToken() map[string][]received {
	out := map[string][]received{}
	for _, g := range r.received() {
		out[g.Token] = append(out[g.Token], g)
	}
	return out
}

type world struct {
	t     *testing.T
	dir   string
	s     *store.Store
	clock *testutil.Clock
	relay *fakeRelay
}

func newWorld(t *testing.T, start time.Time) *world {
	t.Helper()
	w := &world{t: t, dir: t.TempDir(), clock: testutil.NewClock(start)}
	w.relay = newFakeRelay(t, w.clock)
	w.open()
	return w
}

func (w *world) open() {
	s, err := store.Open(context.Background(), store.Config{Dir: w.dir, Now: w.clock.Now})
	if err != nil {
		w.t.Fatal(err)
	}
	w.s = s
	w.t.Cleanup(func() { s.Close() })
}

// reopen closes and opens the store: every file closed, no head cached.
func (w *world) reopen() {
	w.s.Close()
	w.open()
}

func (w *world) person(handle string) string {
	w.t.Helper()
	p, err := w.s.CreatePerson(context.Background(), store.NewPerson{Handle: handle, PasswordHash: "x"})
	if err != nil {
		w.t.Fatal(err)
	}
	return p.ID
}

func (w *world) connect(a string, others ...string) {
	w.t.Helper()
	var pairs [][2]string
	for _, o := range others {
		pairs = append(pairs, [2]string{a, o})
	}
	if err := w.s.ImportConnections(context.Background(), pairs, w.clock.Now().UnixMilli()); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) post(author string) {
	w.t.Helper()
	if _, err := w.s.CreateMoment(context.Background(), author, []byte("x")); err != nil {
		w.t.Fatal(err)
	}
}

// digestAt gives person a device (token) and a digest at minute in zone.
func (w *world) digestAt(person, token string, minute int, zone string) {
	w.t.Helper()
	ctx := context.Background()
	if err := w.s.Devices().Put(ctx, person, token, nah.PlatformIOS); err != nil {
		w.t.Fatal(err)
	}
	if err := w.s.SetDigest(ctx, person, nah.Digest{Minute: minute, Timezone: zone, Enabled: true}); err != nil {
		w.t.Fatal(err)
	}
}

// loop makes a loop on the world's store, relay and clock; sends all at
// once unless cfg says otherwise.
func (w *world) loop(cfg Config) *Loop {
	w.t.Helper()
	if cfg.RelayURL == "" {
		cfg.RelayURL = w.relay.URL
	}
	if cfg.RelayURL == "none" {
		cfg.RelayURL = ""
	}
	cfg.Now = w.clock.Now
	if cfg.Spread == 0 {
		cfg.Spread = -1
	}
	l, err := New(cfg, w.s, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(l.Stop)
	return l
}

// runAt sets the clock to at and runs the loop's minute.
func (w *world) runAt(l *Loop, at time.Time) Run {
	w.clock.Set(at)
	return l.Run(at)
}

// TestDigestOncePerDayAcrossDaylightSaving: a person per case of
// zoneCases (São Paulo, Kolkata and Lisbon, at minutes in the gap and
// the repeat of their changes of clocks) gets exactly one digest per
// local day, at that day's slot, while the loop runs every minute through
// three days around each change of 2018.
func TestDigestOncePerDayAcrossDaylightSaving(t *testing.T) {
	begin := time.Date(2018, 1, 10, 0, 0, 0, 0, time.UTC)
	w := newWorld(t, begin)
	pat := w.person("pat") // posts every hour; has no digest
	type who struct {
		token  string
		minute int
		loc    *time.Location
		name   string
	}
	var people []who
	for i, c := range zoneCases {
		if c.year != 2018 {
			continue
		}
		id := w.person(fmt.Sprintf("zone%d", i))
		w.connect(id, pat)
		tok := fmt.Sprintf("tok-%d", i)
		w.digestAt(id, tok, c.minute, c.zone)
		loc, _ := nah.LoadZone(c.zone)
		people = append(people, who{tok, c.minute, loc, c.name})
	}
	l := w.loop(Config{})
	want := map[string][]time.Time{}
	for _, change := range []time.Time{
		time.Date(2018, 2, 17, 0, 0, 0, 0, time.UTC),  // São Paulo falls back
		time.Date(2018, 3, 25, 0, 0, 0, 0, time.UTC),  // Lisbon springs forward
		time.Date(2018, 10, 28, 0, 0, 0, 0, time.UTC), // Lisbon falls back
		time.Date(2018, 11, 4, 0, 0, 0, 0, time.UTC),  // São Paulo springs forward
	} {
		from, to := change.AddDate(0, 0, -1), change.AddDate(0, 0, 2)
		for _, p := range people {
			for d := from.AddDate(0, 0, -1); d.Before(to.AddDate(0, 0, 1)); d = d.AddDate(0, 0, 1) {
				y, m, dd := d.Date()
				if s := slotOn(y, m, dd, p.minute, p.loc); !s.Before(from) && s.Before(to) {
					want[p.token] = append(want[p.token], s.UTC())
				}
			}
		}
		for at := from; at.Before(to); at = at.Add(time.Minute) {
			w.clock.Set(at)
			if at.Minute() == 0 {
				w.post(pat)
			}
			l.Run(at)
		}
	}
	got := w.relay.byToken()
	for _, p := range people {
		var times []time.Time
		for _, g := range got[p.token] {
			times = append(times, g.at.UTC())
		}
		if !slices.EqualFunc(times, want[p.token], time.Time.Equal) {
			t.Errorf("%s: digests at\n%v\nwant\n%v", p.name, times, want[p.token])
		}
	}
}

// TestDigestRestartMidMinute stops the loop in the middle of a spread
// minute, after some pushes, and runs a new loop on the same store in the
// same minute: everyone gets exactly one push, none twice.
func TestDigestRestartMidMinute(t *testing.T) {
	at := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	w := newWorld(t, at.Add(-time.Hour))
	pat := w.person("pat")
	w.post(pat)
	const n = 30
	for i := range n {
		id := w.person(fmt.Sprintf("p%02d", i))
		w.connect(id, pat)
		w.digestAt(id, fmt.Sprintf("tok-%02d", i), 9*60, "Europe/Lisbon") // 08:00 UTC in June
	}
	w.clock.Set(at)
	l := w.loop(Config{Spread: 1500 * time.Millisecond})
	done := make(chan Run)
	go func() { done <- l.Run(at) }()
	for w.relay.count() < 8 {
		time.Sleep(5 * time.Millisecond)
	}
	l.Stop()
	first := <-done
	if first.Left == 0 || first.Sent == 0 {
		t.Fatalf("the stop did not cut the run: %+v", first)
	}
	l2 := w.loop(Config{})
	second := w.runAt(l2, at.Add(20*time.Second))
	if first.Sent+second.Sent != n {
		t.Errorf("sent %d then %d, want %d in all", first.Sent, second.Sent, n)
	}
	for tok, gs := range w.relay.byToken() {
		if len(gs) != 1 {
			t.Errorf("%s got %d pushes", tok, len(gs))
		}
	}
	if len(w.relay.byToken()) != n {
		t.Errorf("%d people got a push, want %d", len(w.relay.byToken()), n)
	}
	// A third run in the same minute, and one later in the hour, owe no one.
	if r := w.runAt(l2, at.Add(30*time.Second)); r.Due != 0 {
		t.Errorf("a third run found %d due", r.Due)
	}
	if r := w.runAt(l2, at.Add(40*time.Minute)); r.Due != 0 {
		t.Errorf("a run later in the hour found %d due", r.Due)
	}
}

// TestDigestResumesAClaimCutOffByACrash: a slot claimed but not done (the
// process was killed between the claim and the end of its pushes) is sent
// again with the same digest id, so the relay can drop a repeat; a slot
// both claimed and done is not.
func TestDigestResumesAClaimCutOffByACrash(t *testing.T) {
	at := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	w := newWorld(t, at.Add(-time.Hour))
	pat := w.person("pat")
	w.post(pat)
	cut, done := w.person("cut"), w.person("done")
	w.connect(pat, cut, done)
	w.digestAt(cut, "tok-cut", 9*60, "Europe/Lisbon")
	w.digestAt(done, "tok-done", 9*60, "Europe/Lisbon")
	slot, from := at.UnixMilli(), at.Add(-24*time.Hour).UnixMilli()
	if err := w.s.MarkDigests(context.Background(), []store.DigestMark{
		{Person: cut, Slot: slot, From: from},
		{Person: done, Slot: slot, From: from, Done: true},
	}); err != nil {
		t.Fatal(err)
	}
	l := w.loop(Config{})
	r := w.runAt(l, at.Add(3*time.Minute))
	got := w.relay.byToken()
	if r.Due != 1 || len(got["tok-cut"]) != 1 || len(got["tok-done"]) != 0 {
		t.Fatalf("run %+v, relay got %v", r, got)
	}
	if id := got["tok-cut"][0].DigestID; id != digestID(cut, slot) {
		t.Errorf("digest id %q, want the claim's %q", id, digestID(cut, slot))
	}
}

// TestDigestCatchUpWithinTheHour: a server down at someone's digest minute
// sends it once when it is back within the hour, and not at all after.
func TestDigestCatchUpWithinTheHour(t *testing.T) {
	at := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	w := newWorld(t, at.Add(-2*time.Hour))
	pat := w.person("pat")
	w.post(pat)
	soon, late := w.person("soon"), w.person("late")
	w.connect(pat, soon, late)
	w.digestAt(soon, "tok-soon", 7*60+30, "UTC") // 31 min before the restart
	w.digestAt(late, "tok-late", 7*60, "UTC")    // 61 min before it
	l := w.loop(Config{})
	r := w.runAt(l, at.Add(time.Minute))
	got := w.relay.byToken()
	if r.Sent != 1 || len(got["tok-soon"]) != 1 || len(got["tok-late"]) != 0 {
		t.Fatalf("run %+v, relay got %v", r, got)
	}
	if r := w.runAt(l, at.Add(2*time.Minute)); r.Due != 0 {
		t.Errorf("the next minute found %d due", r.Due)
	}
}

// TestDigestRelayDownFiveMinutes: the relay answers 503 for five minutes.
// Each minute's people get a bounded number of tries and are given up;
// the loop keeps its schedule (every run is short, the next minute's
// people are sent once the relay is back), nothing is retried in later
// minutes, and no goroutine or error outlives its run.
func TestDigestRelayDownFiveMinutes(t *testing.T) {
	at := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	w := newWorld(t, at.Add(-time.Hour))
	pat := w.person("pat")
	w.post(pat)
	const perMinute = 8
	for m := range 7 {
		for i := range perMinute {
			id := w.person(fmt.Sprintf("m%d-%d", m, i))
			w.connect(id, pat)
			w.digestAt(id, fmt.Sprintf("tok-%d-%d", m, i), 8*60+m, "UTC")
		}
	}
	l := w.loop(Config{Backoff: 5 * time.Millisecond, Attempts: 3})
	goroutines := runtime.NumGoroutine()
	w.relay.fail.Store(true)
	for m := range 7 {
		if m == 5 {
			w.relay.fail.Store(false)
		}
		before := w.relay.count()
		r := w.runAt(l, at.Add(time.Duration(m)*time.Minute))
		tries := w.relay.count() - before
		switch {
		case m < 5 && (r.Failed != perMinute || tries > perMinute*3):
			t.Errorf("minute %d, relay down: %+v after %d tries; want %d failed, at most %d tries", m, r, tries, perMinute, perMinute*3)
		case m >= 5 && (r.Sent != perMinute || tries != perMinute || r.Due != perMinute):
			t.Errorf("minute %d, relay back: %+v after %d tries; want exactly this minute's %d sent", m, r, tries, perMinute)
		}
		if r.Duration > 5*time.Second {
			t.Errorf("minute %d took %v", m, r.Duration)
		}
	}
	if n := len(l.Status().Errors); n > keptErrors {
		t.Errorf("%d errors kept", n)
	}
	// The relay's kept-alive connections (one per worker) are not a pile.
	l.relay.client.CloseIdleConnections()
	w.relay.CloseClientConnections()
	time.Sleep(100 * time.Millisecond)
	if g := runtime.NumGoroutine(); g > goroutines+2 {
		t.Errorf("%d goroutines after the runs, %d before", g, goroutines)
	}
}

// TestDigestRelayStallsTheRunStaysBounded: a relay that never answers
// costs each push its tries' timeouts, in parallel, and nothing more.
func TestDigestRelayStallsTheRunStaysBounded(t *testing.T) {
	at := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	w := newWorld(t, at.Add(-time.Hour))
	pat := w.person("pat")
	w.post(pat)
	for i := range 20 {
		id := w.person(fmt.Sprintf("p%02d", i))
		w.connect(id, pat)
		w.digestAt(id, fmt.Sprintf("tok-%02d", i), 8*60, "UTC")
	}
	w.relay.stall.Store(int64(time.Second))
	l := w.loop(Config{Timeout: 50 * time.Millisecond, Backoff: 5 * time.Millisecond, Workers: 4})
	r := w.runAt(l, at)
	// 20 people on 4 workers, 3 tries of 50 ms each: ~0.8 s.
	if r.Failed != 20 || r.Duration > 3*time.Second {
		t.Errorf("%+v", r)
	}
	if errs := l.Status().Errors; len(errs) == 0 || errs[0].Message != "relay: no answer within 50ms" {
		t.Errorf("errors %v", errs)
	}
}

// TestDigestHangingDevicesDelayNobodyElse: hog has ten devices the relay
// never answers; sam, due the same minute on the one worker after hog, gets
// his push within hog's time budget (two tries' time), not after ten
// devices times three tries one after another; and hog's devices were all
// tried, in parallel.
func TestDigestHangingDevicesDelayNobodyElse(t *testing.T) {
	at := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	w := newWorld(t, at.Add(-time.Hour))
	pat := w.person("pat")
	w.post(pat)
	a, b := w.person("ann"), w.person("bob")
	hog, sam := min(a, b), max(a, b) // the run takes a minute's people by id
	w.connect(hog, pat)
	w.connect(sam, pat)
	for i := range 10 {
		tok := fmt.Sprintf("hog-%d", i)
		w.digestAt(hog, tok, 8*60, "UTC")
		w.relay.hang.Store(tok, true)
	}
	w.digestAt(sam, "sam", 8*60, "UTC")
	const timeout = 200 * time.Millisecond
	l := w.loop(Config{Timeout: timeout, Backoff: 5 * time.Millisecond, Attempts: 3, Workers: 1})
	start := time.Now()
	done := make(chan Run)
	go func() { done <- w.runAt(l, at) }()
	for len(w.relay.byToken()["sam"]) == 0 {
		if time.Since(start) > 30*time.Second {
			t.Fatal("sam got no push")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Before: 10 devices x 3 tries x 200 ms, one after another: over 6 s.
	if d := time.Since(start); d > 2*timeout+time.Second {
		t.Errorf("sam's push came %v after the run began; hog's budget is %v", d, 2*timeout)
	}
	r := <-done
	if r.Sent != 1 || r.Failed != 1 {
		t.Errorf("run %+v, want sam sent and hog failed", r)
	}
	got := w.relay.byToken()
	for i := range 10 {
		if len(got[fmt.Sprintf("hog-%d", i)]) == 0 {
			t.Errorf("hog's device %d was never tried", i)
		}
	}
}

// TestDigestGoneDeviceIsRemoved: a 410 for a token removes that device,
// and the person's other device still gets the push.
func TestDigestGoneDeviceIsRemoved(t *testing.T) {
	at := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	w := newWorld(t, at.Add(-time.Hour))
	pat, ann := w.person("pat"), w.person("ann")
	w.connect(ann, pat)
	w.post(pat)
	w.digestAt(ann, "tok-old", 8*60, "UTC")
	if err := w.s.Devices().Put(context.Background(), ann, "tok-new", nah.PlatformAndroid); err != nil {
		t.Fatal(err)
	}
	w.relay.gone.Store("tok-old", true)
	l := w.loop(Config{RelayToken: "relay-secret"})
	r := w.runAt(l, at)
	if r.Sent != 1 {
		t.Errorf("%+v", r)
	}
	ds, _ := w.s.Devices().List(context.Background(), ann)
	if len(ds) != 1 || ds[0].Token != "tok-new" {
		t.Errorf("devices after a 410: %v", ds)
	}
	g := w.relay.byToken()["tok-new"]
	if len(g) != 1 || g[0].auth != "Bearer relay-secret" || g[0].Platform != "android" || g[0].Count != 1 ||
		!slices.Equal(g[0].Authors, []string{"pat"}) || g[0].Body != "1 new moment from pat" {
		t.Errorf("the push: %+v", g)
	}
}

// TestDigestOpensOnlyNewAuthorsFiles: on a fresh store (no file open, no
// head cached), people with nothing new cost no file; those with
// something new open the files of the connections who posted, and only
// those.
func TestDigestOpensOnlyNewAuthorsFiles(t *testing.T) {
	at := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	w := newWorld(t, at.Add(-48*time.Hour))
	var ids []string
	for i := range 12 {
		ids = append(ids, w.person(fmt.Sprintf("p%02d", i)))
	}
	// Two circles of six: everyone posted two days ago; in the first
	// circle, two people posted again an hour before the digests.
	for c := range 2 {
		for i := c * 6; i < c*6+6; i++ {
			w.post(ids[i])
			w.connect(ids[i], ids[i+1:c*6+6]...)
			w.digestAt(ids[i], "tok-"+ids[i], 8*60, "UTC")
		}
	}
	for _, id := range ids {
		if err := w.s.MarkDigests(context.Background(), []store.DigestMark{{Person: id, Slot: at.Add(-24 * time.Hour).UnixMilli(), Done: true}}); err != nil {
			t.Fatal(err)
		}
	}
	w.clock.Set(at.Add(-time.Hour))
	w.post(ids[0])
	w.post(ids[1])
	w.reopen()
	if n := w.s.Stats().OpenFiles; n != 0 {
		t.Fatalf("%d files open after a reopen", n)
	}
	l := w.loop(Config{})
	r := w.runAt(l, at)
	if r.Due != 12 || r.WithNew != 6 || r.Sent != 6 || r.Skipped != 6 {
		t.Errorf("%+v", r)
	}
	if n := w.s.Stats().OpenFiles; n != 2 {
		t.Errorf("%d files opened, want the two posters'", n)
	}
}

// TestDigestWithoutRelay: with no relay, digests are counted and marked,
// not sent, and the status says there is no relay.
func TestDigestWithoutRelay(t *testing.T) {
	at := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	w := newWorld(t, at.Add(-time.Hour))
	pat, ann := w.person("pat"), w.person("ann")
	w.connect(ann, pat)
	w.post(pat)
	w.digestAt(ann, "tok-ann", 8*60, "UTC")
	l := w.loop(Config{RelayURL: "none"})
	if r := w.runAt(l, at); r.Due != 1 || r.WithNew != 1 || r.Skipped != 1 || r.Sent != 0 {
		t.Errorf("%+v", r)
	}
	if r := w.runAt(l, at.Add(time.Minute)); r.Due != 0 {
		t.Errorf("owed again: %+v", r)
	}
	if st := l.Status(); st.RelayConfigured || st.Last.WithNew != 0 || w.relay.count() != 0 {
		t.Errorf("status %+v, relay got %d", st, w.relay.count())
	}
}
