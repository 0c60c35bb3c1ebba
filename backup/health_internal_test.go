package backup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// Health is asked on every /healthz and /metrics: what it allocates must
// not grow with the files replication has (a list and sort of 10,000 files
// each call was 8-9 % of the server's CPU under the bench's polls).
func TestHealthMemoryConstantInFiles(t *testing.T) {
	r, _ := newDirReplicator(t)
	b := &Backups{Repl: r, Behind: time.Minute}

	// The state a run holds after shipping n files, one of them failing.
	grow := func(n int) {
		r.mu.Lock()
		defer r.mu.Unlock()
		now := time.Now()
		for i := len(r.files); i < n; i++ {
			st := &fileState{TXID: 7, Replicated: 7, LastSync: now.Add(-time.Duration(i) * time.Millisecond), Since: now}
			if i == n/2 {
				st.Replicated, st.Err = 6, "target: disk full"
			}
			r.files[fmt.Sprintf("people/%026d/person.db", i)] = st
		}
	}
	perCall := func() uint64 {
		b.Health()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		const calls = 20
		for range calls {
			b.Health()
		}
		runtime.ReadMemStats(&m1)
		return (m1.TotalAlloc - m0.TotalAlloc) / calls
	}
	grow(1_000)
	small := perCall()
	grow(10_000)
	large := perCall()
	h := b.Health()
	if h.Files != 10_000 || h.Behind != 2 || h.LastErr != "target: disk full" {
		t.Fatalf("health of 10,000 files, two failing: %d files, %d behind, error %q", h.Files, h.Behind, h.LastErr)
	}
	t.Logf("Health allocates %d bytes a call at 1,000 files, %d at 10,000", small, large)
	if large > small+16<<10 {
		t.Fatalf("Health allocates %d bytes a call at 10,000 files against %d at 1,000: it grows with the files", large, small)
	}
}

// newDirReplicator is a Replicator of a fresh data directory (returned)
// to a real directory target, closed when the test ends.
func newDirReplicator(t *testing.T) (*Replicator, string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	tg, err := ParseTarget(t.TempDir(), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(ctx); err != nil {
		t.Fatal(err)
	}
	meta := filepath.Join(dir, filepath.FromSlash(nah.ReplicationRel))
	if err := os.MkdirAll(meta, 0o700); err != nil {
		t.Fatal(err)
	}
	r, err := Open(ctx, Config{Target: tg, DataDir: dir, MetaDir: meta})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(ctx) })
	return r, dir
}
