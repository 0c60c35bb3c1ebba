package backup_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
)

// TestReplicationMemoryPerFile measures what watching a file costs under
// the project's SQLite settings (the store configures SQLite for the whole
// process, Litestream's connections included) and serve's GOGC of 50: the
// same 64 person files open, first unwatched, then 16 and 64 of them
// watched, each written and synced. It reports RSS, goroutines and
// descriptors per watched file; the bound is generous (the measured cost
// is ~0.4 MiB), so that only a gross regression fails the default run.
// NAH_MEASURE_FILES=N measures N files instead.
func TestReplicationMemoryPerFile(t *testing.T) {
	files := 64
	if v := os.Getenv("NAH_MEASURE_FILES"); v != "" {
		files, _ = strconv.Atoi(v)
	}
	const few = 16
	defer debug.SetGCPercent(debug.SetGCPercent(50))
	ctx := context.Background()
	dir := t.TempDir()
	tg, err := backup.ParseTarget(filepath.Join(t.TempDir(), "replica"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(ctx); err != nil {
		t.Fatal(err)
	}
	meta := filepath.Join(dir, "replication")
	os.MkdirAll(meta, 0o700)
	r, err := backup.Open(ctx, backup.Config{Target: tg, DataDir: dir, MetaDir: meta, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// The app's cache holds every file open; replication is called by hand
	// below, after the baseline, on files the app has open.
	s, err := store.Open(ctx, store.Config{Dir: dir, MaxOpenFiles: files + 8})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	defer s.Close()
	var ids []string
	for i := range files {
		p, err := s.CreatePerson(ctx, store.NewPerson{Handle: fmt.Sprintf("mem%03d", i), PasswordHash: "x"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	body := []byte(strings.Repeat("a moment of about four hundred bytes. ", 10))
	post := func(from, to int) {
		for _, id := range ids[from:to] {
			if _, err := s.CreateMoment(ctx, id, body); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 5 {
		post(0, files)
	}
	measure := func() sample {
		time.Sleep(2 * time.Second) // a couple of Litestream monitor ticks
		runtime.GC()
		debug.FreeOSMemory()
		return sample{rss: procKiB(t, "VmRSS"), goroutines: runtime.NumGoroutine(), fds: countFDs(t)}
	}
	watch := func(from, to int) {
		for _, id := range ids[from:to] {
			if err := r.Watch(ctx, s.Path(nah.PersonRel(id))); err != nil {
				t.Fatal(err)
			}
		}
		post(from, to)
		if err := r.SyncAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	base := measure()
	watch(0, few)
	atFew := measure()
	watch(few, files)
	atAll := measure()
	if w := r.Watched(); w != files {
		t.Fatalf("watched %d, want %d", w, files)
	}
	per := float64(atAll.rss-base.rss) / float64(files)
	marginal := float64(atAll.rss-atFew.rss) / float64(files-few)
	t.Logf("%d files open: RSS %d KiB unwatched, %d KiB with %d watched, %d KiB with %d watched (VmHWM %d KiB)",
		files, base.rss, atFew.rss, few, atAll.rss, files, procKiB(t, "VmHWM"))
	t.Logf("per watched file: %.0f KiB (RSS delta / %d), %.0f KiB marginal (%d -> %d), %.1f goroutines, %.1f descriptors",
		per, files, marginal, few, files, float64(atAll.goroutines-base.goroutines)/float64(files), float64(atAll.fds-base.fds)/float64(files))
	if per > 2048 {
		t.Errorf("a watched file costs %.0f KiB, over 2 MiB: backup.PerFileBytes (%d KiB) and the memory plan are wrong", per, backup.PerFileBytes>>10)
	}
}

type sample struct {
	rss             int64 // KiB
	goroutines, fds int
}

// procKiB reads a field of /proc/self/status in KiB.
func procKiB(t testing.TB, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

func countFDs(t testing.TB) int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	return len(es)
}
