package store

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// untar reads every entry of an export, in order.
func untar(t *testing.T, r io.Reader) (names []string, files map[string][]byte) {
	t.Helper()
	files = make(map[string][]byte)
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		files[h.Name] = b
	}
}

// TestExportWhileWriting exports a person while four writers post to them:
// the copy passes integrity_check, holds every moment acknowledged before
// the export began, and the manifest's checksum and facts are right.
func TestExportWhileWriting(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, Config{})
	a, b := mustPerson(t, s, "ann"), mustPerson(t, s, "bob")
	if err := s.ImportConnections(ctx, [][2]string{{a.ID, b.ID}}, 1234); err != nil {
		t.Fatal(err)
	}

	var (
		mu    sync.Mutex
		acked []string
		stop  atomic.Bool
		wg    sync.WaitGroup
		errs  = make(chan error, 4)
	)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				m, err := s.CreateMoment(ctx, a.ID, fmt.Appendf(nil, "writer %d moment %d", w, i))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				acked = append(acked, m.ID)
				mu.Unlock()
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	before := append([]string(nil), acked...)
	mu.Unlock()
	e, err := s.ExportPerson(ctx, a.ID, "v-test")
	if err != nil {
		t.Fatal(err)
	}
	var tarball bytes.Buffer
	if _, err := e.WriteTo(&tarball); err != nil {
		t.Fatal(err)
	}
	e.Close()
	time.Sleep(50 * time.Millisecond) // writers go on after the export
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(before) == 0 {
		t.Fatal("no moment was posted before the export")
	}

	names, files := untar(t, &tarball)
	if len(names) != 2 || names[0] != "person.db" || names[1] != "manifest.json" {
		t.Fatalf("entries %v, want [person.db manifest.json]", names)
	}
	var m Manifest
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(files["person.db"])
	if len(m.Files) != 1 || m.Files[0].Name != "person.db" || m.Files[0].SHA256 != hex.EncodeToString(sum[:]) || m.Files[0].Size != int64(len(files["person.db"])) {
		t.Errorf("manifest files %+v, want person.db with sha256 %x", m.Files, sum)
	}
	if m.Format != ExportFormat || m.Person.ID != a.ID || m.Person.Handle != "ann" || m.Person.CreatedAt != nah.FormatTime(a.CreatedAt) ||
		m.ServerVersion != "v-test" || m.SchemaVersion != len(personMigrations) || m.ExportedAt == "" {
		t.Errorf("manifest %+v", m)
	}
	if len(m.Connections) != 1 || m.Connections[0] != (ManifestConnection{Handle: "bob", ConnectedAt: "1970-01-01T00:00:01.234Z"}) {
		t.Errorf("connections %+v, want bob at 1234", m.Connections)
	}

	p := filepath.Join(t.TempDir(), "person.db")
	if err := os.WriteFile(p, files["person.db"], 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := openDB(p, true, 1, personCacheKiB, SyncFull, false)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ok string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check: %q, %v", ok, err)
	}
	have := make(map[string]bool)
	rows, err := db.Query("SELECT id FROM moments")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		rows.Scan(&id)
		have[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range before {
		if !have[id] {
			t.Fatalf("moment %s, acknowledged before the export, is not in it", id)
		}
	}
	t.Logf("%d moments acknowledged before the export, %d in it, %d in all", len(before), len(have), len(acked))

	// Nothing of the copy is left in the person's folder.
	d, _ := s.personDir(a.ID)
	left, _ := filepath.Glob(filepath.Join(d, "export-*"))
	if len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestStaleExportCopiesRemoved: a scratch copy that a crash left in a
// person's folder is removed by their next export once it is an hour old;
// a fresh one (an export running now) is left alone.
func TestStaleExportCopiesRemoved(t *testing.T) {
	s := MustOpen(t, Config{})
	ctx := context.Background()
	a := mustPerson(t, s, "ann")
	dir, err := s.personDir(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	stale, fresh := filepath.Join(dir, "export-111.db"), filepath.Join(dir, "export-222.db")
	for _, f := range []string{stale, fresh} {
		if err := os.WriteFile(f, []byte("left by a crash"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(stale, old, old)
	e, err := s.ExportPerson(ctx, a.ID, "v-test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WriteTo(io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the hour-old copy is still there: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a fresh copy was removed: %v", err)
	}
}

// peakWriter writes to w and samples the Go heap's live and unswept
// objects at each write: the most it saw, as the export streams.
type peakWriter struct {
	w      io.Writer
	sample []metrics.Sample
	peak   uint64
}

func newPeakWriter(w io.Writer) *peakWriter {
	return &peakWriter{w: w, sample: []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}}
}

func (p *peakWriter) Write(b []byte) (int, error) {
	metrics.Read(p.sample)
	p.peak = max(p.peak, p.sample[0].Value.Uint64())
	return p.w.Write(b)
}

// TestExportMemoryIsConstant: the heap an export of 25,000 media holds
// while it streams is that of an export of 5,000 (format 2: no manifest
// entry per media, the rows read by a cursor), and the tar of 25,000
// imports whole, each media with its row and file. The GC runs at 10% so
// that the peak is what is held, not garbage waiting.
func TestExportMemoryIsConstant(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 30,000 media files")
	}
	ctx := t.Context()
	export := func(n int) (grown uint64, tarball string) {
		s := MustOpen(t, Config{})
		ann := mustPerson(t, s, "ann")
		seedMedia(t, s, ann.ID, n, 100)
		if _, err := s.StorageOf(ctx, ann.ID); err != nil { // the usage loaded, as it would be
			t.Fatal(err)
		}
		tarball = filepath.Join(t.TempDir(), "export.tar")
		f, err := os.Create(tarball)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		defer debug.SetGCPercent(debug.SetGCPercent(10))
		runtime.GC()
		w := newPeakWriter(f)
		metrics.Read(w.sample)
		base := w.sample[0].Value.Uint64()
		e, err := s.ExportPerson(ctx, ann.ID, "v-test")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.WriteTo(w); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		return w.peak - min(base, w.peak), tarball
	}
	small, _ := export(5_000)
	large, tarball := export(25_000)
	t.Logf("heap grown while exporting: %.1f MB for 5,000 media, %.1f MB for 25,000", float64(small)/1e6, float64(large)/1e6)
	if large > small+1<<20 {
		t.Errorf("an export of 25,000 media held %d bytes more than one of 5,000 (%d)", large-small, small)
	}

	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := MustOpen(t, Config{})
	res, err := s.ImportPerson(ctx, f, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := mediaRows(t, s, res.Person.ID); n != 25_000 {
		t.Errorf("%d media rows imported, want 25,000", n)
	}
	dir, _ := s.mediaDir(res.Person.ID)
	es, err := os.ReadDir(dir)
	if err != nil || len(es) != 25_000 {
		t.Errorf("%d media files imported (%v), want 25,000", len(es), err)
	}
	st, err := s.StorageOf(ctx, res.Person.ID)
	if err != nil || st.MediaCount != 25_000 || st.Media != 25_000*100 {
		t.Errorf("imported storage %+v %v", st, err)
	}
}
