package store

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
)

// heapReader samples the heap at every read: an import that gathers
// something per media entry holds the most when the tar's end is read.
type heapReader struct {
	r io.Reader
	h *heapPeak
}

func (r heapReader) Read(p []byte) (int, error) {
	r.h.take()
	return r.r.Read(p)
}

// TestImportMemoryIsConstant: the heap an import of a tar of 25,000 media
// holds is that of a tar of 5,000: what it checks the rows against is kept
// on disk, not in a map of every media (about 200 bytes an entry, 20 MB at
// nah.MaxMediaCount, against the import's 2 MiB in the memory plan). The
// tars are read from files and the GC runs at 10%, so that the peak is
// what is held.
func TestImportMemoryIsConstant(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 60,000 media files")
	}
	ctx := t.Context()
	imported := func(n int) uint64 {
		old := MustOpen(t, Config{})
		ann := mustPerson(t, old, "ann")
		seedMedia(t, old, ann.ID, n, 1)
		tarball := filepath.Join(t.TempDir(), "export.tar")
		f, err := os.Create(tarball)
		if err != nil {
			t.Fatal(err)
		}
		e, err := old.ExportPerson(ctx, ann.ID, "v-test")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.WriteTo(f); err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(e.Close(), f.Close()); err != nil {
			t.Fatal(err)
		}
		if f, err = os.Open(tarball); err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		s := MustOpen(t, Config{})
		defer debug.SetGCPercent(debug.SetGCPercent(10))
		runtime.GC()
		h := newHeapPeak(false)
		base := h.peak
		res, err := s.ImportPerson(ctx, heapReader{f, h}, ImportOptions{})
		h.take()
		if err != nil {
			t.Fatal(err)
		}
		if got := mediaRows(t, s, res.Person.ID); got != n {
			t.Fatalf("%d media rows imported, want %d", got, n)
		}
		return h.peak - min(base, h.peak)
	}
	small := imported(5_000)
	large := imported(25_000)
	t.Logf("heap grown while importing: %.2f MB for 5,000 media, %.2f MB for 25,000", mb(small), mb(large))
	if large > small+1<<20 {
		t.Errorf("an import of 25,000 media held %d bytes more than one of 5,000 (%d)", large-small, small)
	}
}
