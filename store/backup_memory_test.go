package store

import (
	"context"
	"fmt"
	"github.com/nah-app/nah"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah/backup"
)

// heapPeak keeps the most heap the samples saw. With collect, each sample
// collects first, so it is what is held: the sweep's bound of 80 bytes a
// media is finer than the garbage GOGC=10 leaves (90 under a load of 15).
type heapPeak struct {
	mu      sync.Mutex
	sample  []metrics.Sample
	peak    uint64
	collect bool
}

func newHeapPeak(collect bool) *heapPeak {
	h := &heapPeak{sample: []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}, collect: collect}
	h.take()
	return h
}

func (h *heapPeak) take() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.collect {
		runtime.GC()
	}
	metrics.Read(h.sample)
	v := h.sample[0].Value.Uint64()
	h.peak = max(h.peak, v)
	return v
}

// sampled is the store as the backups read it, sampling the heap each
// time a media file is opened or a batch of names is read: when a walk
// that held every path would hold the most.
type sampled struct {
	*Store
	h *heapPeak
}

func (s sampled) OpenMediaFile(rel string) (*os.File, error) {
	s.h.take()
	return s.Store.OpenMediaFile(rel)
}

func (s sampled) MediaOf(ctx context.Context, owner string, fn func([]string) error) error {
	return s.Store.MediaOf(ctx, owner, func(names []string) error {
		s.h.take()
		return fn(names)
	})
}

// TestBackupWalksMemoryIsConstant: the full backup's tar reads each
// person's folder a batch of names at a time, so the heap it holds for one
// person of 25,000 media is that for one of 5,000; the sweep's mirror
// holds one person's names at a time, so at 50 people of 500 media it
// holds what it holds at 10 of 500. The mirror is made beforehand by
// links (a copy is an fsync each); the sweep still copies the two media
// it lacks and removes one whose original is gone. The GC runs at 10% so
// that the backup's peak is what is held; the sweep's samples collect first.
func TestBackupWalksMemoryIsConstant(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 60,000 media files")
	}
	ctx := t.Context()
	run := func(people, each int) (archive, sweep uint64) {
		s := MustOpen(t, Config{})
		targetDir := t.TempDir()
		var ids []string
		for i := range people {
			p := mustPerson(t, s, fmt.Sprintf("p%03d", i))
			ids = append(ids, p.ID)
			names := seedMedia(t, s, p.ID, each, 100)
			mirror := filepath.Join(targetDir, "media", filepath.FromSlash(nah.MediaDirRel(p.ID)))
			if err := os.MkdirAll(mirror, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, name := range names[2:] { // the first two are not mirrored yet
				if err := os.Link(s.Path(nah.MediaRel(p.ID, name)), filepath.Join(mirror, name)); err != nil {
					t.Fatal(err)
				}
			}
		}
		gone := filepath.Join(targetDir, "media", filepath.FromSlash(nah.MediaRel(ids[0], nah.NewMediaID(1))))
		if err := os.WriteFile(gone, []byte("deleted since"), 0o600); err != nil {
			t.Fatal(err)
		}
		defer debug.SetGCPercent(debug.SetGCPercent(10))

		runtime.GC()
		h := newHeapPeak(false)
		base := h.peak
		if err := backup.WriteArchive(ctx, io.Discard, sampled{s, h}); err != nil {
			t.Fatal(err)
		}
		archive = h.peak - min(base, h.peak)

		target, err := backup.ParseTarget(targetDir, os.Getenv)
		if err != nil {
			t.Fatal(err)
		}
		h = newHeapPeak(true)
		base = h.peak
		sw := &backup.Sweeper{Target: target, Keep: 7, Source: sampled{s, h}}
		res, err := sw.Run(ctx, time.Now())
		sweep = h.peak - min(base, h.peak)
		if err != nil || len(res.Failed) > 0 || res.MediaCopied != 2*people {
			t.Fatalf("%d people of %d media: sweep %+v %v, want %d media copied", people, each, res, err, 2*people)
		}
		mirrored, err := backup.MediaFiles(ctx, target)
		if err != nil || len(mirrored) != people*each {
			t.Errorf("%d people of %d media: %d mirrored (%v), want %d", people, each, len(mirrored), err, people*each)
		}
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("%d people of %d media: a mirrored media whose original is gone is still there (%v)", people, each, err)
		}
		return archive, sweep
	}
	archiveSmall, sweepOne := run(1, 5_000)
	archiveLarge, sweepOneLarge := run(1, 25_000)
	_, sweepSmall := run(10, 500)
	_, sweepLarge := run(50, 500)
	t.Logf("heap grown: the full backup %.2f MB for one person of 5,000 media, %.2f MB of 25,000; the sweep %.2f MB for 10 people of 500, %.2f MB for 50 of 500 (%.2f and %.2f MB for one of 5,000 and 25,000)",
		mb(archiveSmall), mb(archiveLarge), mb(sweepSmall), mb(sweepLarge), mb(sweepOne), mb(sweepOneLarge))
	if archiveLarge > archiveSmall+1<<20 {
		t.Errorf("the full backup of 25,000 media held %d bytes more than one of 5,000 (%d)", archiveLarge-archiveSmall, archiveSmall)
	}
	if sweepLarge > sweepSmall+1<<20 {
		t.Errorf("the sweep of 50 people of 500 media held %d bytes more than one of 10 (%d)", sweepLarge-sweepSmall, sweepSmall)
	}
	// One person's media ids on the target are the one set that grows:
	// fixed-size keys, 46-61 bytes an id; the target's keys as strings in
	// a list and a map held 247.
	if grown := int64(sweepOneLarge) - int64(sweepOne); grown > 80*20_000 {
		t.Errorf("the sweep of one person of 25,000 media held %d bytes more than of 5,000 (%d bytes a media more, want at most 80)", grown, grown/20_000)
	}
}

func mb(n uint64) float64 { return float64(n) / 1e6 }
