package app

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// untarExport reads every entry of an export, in order.
func untarExport(t *testing.T, b []byte) (names []string, files map[string][]byte) {
	t.Helper()
	files = make(map[string][]byte)
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, files
		}
		if err != nil {
			t.Fatalf("untar: %v", err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("untar %s: %v", h.Name, err)
		}
		names = append(names, h.Name)
		files[h.Name] = body
	}
}

// checkExport checks an export's entries and manifest against its
// person.db, and returns the manifest and the ids of the moments in it.
func checkExport(t *testing.T, b []byte) (store.Manifest, []string) {
	t.Helper()
	names, files := untarExport(t, b)
	if len(names) != 2 || names[0] != "person.db" || names[1] != "manifest.json" {
		t.Fatalf("entries %v, want [person.db manifest.json]", names)
	}
	var m store.Manifest
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(files["person.db"])
	if len(m.Files) != 1 || m.Files[0].Name != "person.db" || m.Files[0].SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("manifest files %+v, want person.db with sha256 %x", m.Files, sum)
	}
	p := filepath.Join(t.TempDir(), "person.db")
	if err := os.WriteFile(p, files["person.db"], 0o600); err != nil {
		t.Fatal(err)
	}
	ids, err := store.ExportedMoments(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return m, ids
}

func exportRequest(t *testing.T, ts *testServer, method, token string) *http.Request {
	req, err := http.NewRequest(method, ts.URL+"/api/v1/me/export", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

// TestExportWhileWriting exports a person over HTTP while four writers
// post to them: the tar's database passes integrity_check, holds every
// moment acknowledged before the export began, and its manifest is right.
func TestExportWhileWriting(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) { c.Version = "v1.2.3-test" })
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	ts.connect(t, ann, bob)

	var (
		mu    sync.Mutex
		acked []string
		stop  atomic.Bool
		wg    sync.WaitGroup
		fails atomic.Int64
	)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				body, _ := json.Marshal(map[string]string{"body": base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "w%d m%d", w, i))})
				req, _ := http.NewRequest("POST", ts.URL+"/api/v1/moments", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+ann.token)
				res, err := ts.Client().Do(req)
				if err != nil {
					fails.Add(1)
					return
				}
				var out struct{ ID string }
				json.NewDecoder(res.Body).Decode(&out)
				res.Body.Close()
				if res.StatusCode != 201 {
					fails.Add(1)
					return
				}
				mu.Lock()
				acked = append(acked, out.ID)
				mu.Unlock()
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	before := append([]string(nil), acked...)
	mu.Unlock()
	res, b := sendChecked(t, ts.Client(), exportRequest(t, ts, "GET", ann.token), nil)
	time.Sleep(50 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if fails.Load() > 0 {
		t.Fatalf("%d posts failed during the export", fails.Load())
	}
	if res.StatusCode != 200 {
		t.Fatalf("export: %d %s", res.StatusCode, b)
	}
	want := fmt.Sprintf(`attachment; filename="nah-ann-%s.tar"`, ts.clock.Now().UTC().Format("20060102"))
	if res.Header.Get("Content-Type") != "application/x-tar" || res.Header.Get("Content-Disposition") != want {
		t.Errorf("headers: %q %q, want application/x-tar and %s", res.Header.Get("Content-Type"), res.Header.Get("Content-Disposition"), want)
	}
	m, ids := checkExport(t, b)
	have := make(map[string]bool, len(ids))
	for _, id := range ids {
		have[id] = true
	}
	if len(before) == 0 {
		t.Fatal("no moment was acknowledged before the export")
	}
	for _, id := range before {
		if !have[id] {
			t.Fatalf("moment %s, acknowledged before the export, is not in it", id)
		}
	}
	if m.Format != store.ExportFormat || m.Person.ID != ann.id || m.Person.Handle != "ann" || m.ServerVersion != "v1.2.3-test" ||
		m.SchemaVersion < 1 || m.ExportedAt != nah.FormatTime(ts.clock.Now().UnixMilli()) || m.Person.CreatedAt == "" {
		t.Errorf("manifest %+v", m)
	}
	if len(m.Connections) != 1 || m.Connections[0].Handle != "bob" || m.Connections[0].ConnectedAt == "" {
		t.Errorf("connections %+v, want bob", m.Connections)
	}
	t.Logf("%d moments acknowledged before the export, %d in it, %d in all", len(before), len(ids), len(acked))
}

// TestExportLimits: no token is 401; a second export within the minute is
// 429 with Retry-After, and after it the next one works; with the
// exports' share of the budget taken it is 503 without using up the person's export; HEAD answers
// the headers without counting.
func TestExportLimits(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	if res, b := sendChecked(t, ts.Client(), exportRequest(t, ts, "GET", ""), nil); res.StatusCode != 401 {
		t.Errorf("no token: %d %s", res.StatusCode, b)
	}
	if res, b := sendChecked(t, ts.Client(), exportRequest(t, ts, "HEAD", ann.token), nil); res.StatusCode != 200 || len(b) != 0 ||
		res.Header.Get("Content-Type") != "application/x-tar" {
		t.Errorf("HEAD: %d %q %q", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	if res, b := sendChecked(t, ts.Client(), exportRequest(t, ts, "GET", ann.token), nil); res.StatusCode != 200 {
		t.Fatalf("first export: %d %s", res.StatusCode, b)
	}
	ts.clock.Advance(30 * time.Second)
	res, b := sendChecked(t, ts.Client(), exportRequest(t, ts, "GET", ann.token), nil)
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != "30" || !strings.Contains(string(b), "rate_limited") {
		t.Errorf("second export: %d Retry-After %q %s", res.StatusCode, res.Header.Get("Retry-After"), b)
	}
	ts.clock.Advance(31 * time.Second)
	if res, b := sendChecked(t, ts.Client(), exportRequest(t, ts, "GET", ann.token), nil); res.StatusCode != 200 {
		t.Errorf("export after the minute: %d %s", res.StatusCode, b)
	}
	ts.clock.Advance(time.Minute)
	share := ts.app.mem.limit / 4 // the exports' share, held by other people's exports
	ts.app.exportsHeld.Add(share)
	res, b = sendChecked(t, ts.Client(), exportRequest(t, ts, "GET", ann.token), nil)
	if res.StatusCode != 503 || res.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "overloaded") {
		t.Errorf("export with the exports' share taken: %d Retry-After %q %s", res.StatusCode, res.Header.Get("Retry-After"), b)
	}
	ts.app.exportsHeld.Add(-share)
	if res, b := sendChecked(t, ts.Client(), exportRequest(t, ts, "GET", ann.token), nil); res.StatusCode != 200 {
		t.Errorf("export once a slot is free (the 503 did not count): %d %s", res.StatusCode, b)
	}
	if used, held := ts.app.mem.used.Load(), ts.app.exportsHeld.Load(); used != 0 || held != 0 {
		t.Errorf("the budget holds %d bytes after the exports, their share %d", used, held)
	}
}

// TestConsoleExport: an admin downloads the same tar from a person's page;
// signed out, the route redirects to the login.
func TestConsoleExport(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	id := ts.post(t, ann, []byte("hello"))
	u := ts.URL + "/console/people/" + ann.id + "/export"
	if p := get(t, consoleClient(t), u); p.status != 303 || p.header.Get("Location") != "/console/login" {
		t.Errorf("signed out: %d %s", p.status, p.header.Get("Location"))
	}
	c := signedInAdmin(t, ts)
	if p := get(t, c, ts.URL+"/console/people/"+ann.id); !strings.Contains(p.body, `href="/console/people/`+ann.id+`/export"`) {
		t.Errorf("the person's page has no Export link")
	}
	for range 2 { // an operator is not held to the person's limit
		p := get(t, c, u)
		if p.status != 200 || p.header.Get("Content-Type") != "application/x-tar" || !strings.HasPrefix(p.header.Get("Content-Disposition"), `attachment; filename="nah-ann-`) {
			t.Fatalf("console export: %d %q %q", p.status, p.header.Get("Content-Type"), p.header.Get("Content-Disposition"))
		}
		m, ids := checkExport(t, []byte(p.body))
		if m.Person.ID != ann.id || len(ids) != 1 || ids[0] != id {
			t.Errorf("manifest person %+v, moments %v, want %s", m.Person, ids, id)
		}
	}
	if p := get(t, c, ts.URL+"/console/people/"+strings.Repeat("a", 26)+"/export"); p.status != 404 {
		t.Errorf("unknown person: %d", p.status)
	}
}

// TestExportMeasure measures the export of a person with five moments a day
// for a year, of 400 bytes each (the largest person of people-1k): its
// time, and the memory the server allocates and holds while it streams.
func TestExportMeasure(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	const n = 5 * 365
	start := time.Now().Add(-365 * 24 * time.Hour).UnixMilli()
	ms := make([]nah.Moment, n)
	for i := range ms {
		at := start + int64(i)*(24*time.Hour/5).Milliseconds()
		ms[i] = nah.Moment{ID: nah.NewMomentID(at), Author: ann.id, CreatedAt: at, Body: bytes.Repeat([]byte{byte(i)}, 400)}
	}
	if err := ts.store.ImportMoments(context.Background(), ann.id, ms); err != nil {
		t.Fatal(err)
	}

	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	go func() {
		defer close(sampled)
		var s runtime.MemStats
		for {
			runtime.ReadMemStats(&s)
			if s.HeapInuse > peak.Load() {
				peak.Store(s.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	store.ResetSQLiteMemoryPeak()
	sqliteBefore, _ := store.SQLiteMemory()
	t0 := time.Now()
	res, err := ts.Client().Do(exportRequest(t, ts, "GET", ann.token))
	if err != nil {
		t.Fatal(err)
	}
	size, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	elapsed := time.Since(t0)
	close(done)
	<-sampled
	runtime.ReadMemStats(&after)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("export: %d %v", res.StatusCode, err)
	}
	_, sqlitePeak := store.SQLiteMemory()
	allocated := after.TotalAlloc - before.TotalAlloc
	held := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("export of %d moments of 400 bytes: %d bytes of tar in %v; Go heap allocated %d KB in all (client included), in use at most %d KB above before; SQLite at most %d KB above before (%d KB before)",
		n, size, elapsed.Round(time.Millisecond), allocated>>10, held>>10, (sqlitePeak-sqliteBefore)>>10, sqliteBefore>>10)
	// Buffered whole, the tar alone would be allocated at least once.
	if allocated >= uint64(size)/2 {
		t.Errorf("the export allocated %d bytes for a tar of %d: it is not streamed", allocated, size)
	}
}

// TestExportDuringDeletesAndUploads: exports of a person made while another
// phone of theirs uploads and deletes media all the time are each whole:
// every tar imports cleanly into a new person, with exactly its media/
// entries as media rows, byte for byte. The export takes the copy of the
// database and the links to its media under the person's media lock, so
// no delete lands between the two.
func TestExportDuringDeletesAndUploads(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	var (
		mu   sync.Mutex
		live []string
	)
	for range 60 {
		live = append(live, ts.mustUpload(t, ann, randomBytes(1+mrand.IntN(4<<10))).ID)
	}
	send := func(method, path string, body []byte) (int, []byte, error) {
		req, _ := http.NewRequest(method, ts.URL+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+ann.token)
		req.Header.Set("Content-Type", "image/jpeg")
		res, err := ts.Client().Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		return res.StatusCode, raw, err
	}
	stop := make(chan struct{})
	churned := make(chan int)
	go func() {
		n := 0
		defer func() { churned <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			status, raw, err := send("POST", "/api/v1/media", randomBytes(1+mrand.IntN(4<<10)))
			if err != nil || status != 201 {
				t.Errorf("upload during exports: %d %s %v", status, raw, err)
				return
			}
			var m mediaJSON
			json.Unmarshal(raw, &m)
			mu.Lock()
			live = append(live, m.ID)
			i := mrand.IntN(len(live))
			gone := live[i]
			live = append(live[:i], live[i+1:]...)
			mu.Unlock()
			if status, raw, err := send("DELETE", "/api/v1/media/"+gone, nil); err != nil || status != 204 {
				t.Errorf("delete during exports: %d %s %v", status, raw, err)
				return
			}
			n++
		}
	}()

	other := newTestServer(t)
	const exports = 25
	var tars [][]byte
	for i := range exports {
		// One export a minute, on the tests' clocks: the importing server
		// keeps the same time, or the media would be from its future.
		ts.clock.Advance(exportWindow)
		other.clock.Advance(exportWindow)
		res, err := ts.Client().Do(exportRequest(t, ts, "GET", ann.token))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 {
			t.Errorf("export %d: %d %v %.200s", i, res.StatusCode, err, b)
			continue
		}
		tars = append(tars, b)
	}
	close(stop)
	t.Logf("%d exports during %d uploads and deletes", len(tars), <-churned)
	for i, b := range tars {
		_, files := untarExport(t, b)
		res, err := other.store.ImportPerson(t.Context(), bytes.NewReader(b), store.ImportOptions{Handle: fmt.Sprintf("ann-%d", i)})
		if err != nil {
			t.Errorf("import of export %d: %v", i, err)
			continue
		}
		entries := 0
		for name, body := range files {
			id, ok := strings.CutPrefix(name, "media/")
			if !ok {
				continue
			}
			entries++
			f, m, err := other.store.OpenMedia(t.Context(), res.Person.ID, id)
			if err != nil {
				t.Errorf("export %d: %s has no media after the import: %v", i, name, err)
				continue
			}
			got, _ := io.ReadAll(f)
			f.Close()
			if !bytes.Equal(got, body) || m.SHA256 != hexSum(body) {
				t.Errorf("export %d: %s imported with other bytes", i, name)
			}
		}
		if st, err := other.store.StorageOf(t.Context(), res.Person.ID); err != nil || st.MediaCount != entries {
			t.Errorf("export %d: %d media entries, imported as %+v %v", i, entries, st, err)
		}
	}
}
