package backup

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestSpillFile: what a ship builds reads back and is kept byte for byte,
// below shipMemMax (memory only, no temporary file) and past it (spilled),
// in place of the previous newest, which is gone after; built in memory it
// is kept in the previous newest's inode (no inode made a ship).
func TestSpillFile(t *testing.T) {
	for _, size := range []int{100, shipMemMax, shipMemMax + 4097, 3 * shipMemMax} {
		dir := t.TempDir()
		want := make([]byte, size)
		for i := range want {
			want[i] = byte(rand.N(256))
		}
		out := &spillFile{name: filepath.Join(dir, "f.tmp"), buf: new(bytes.Buffer)}
		for b := want; len(b) > 0; {
			n := min(len(b), 1+rand.N(9000))
			if _, err := out.Write(b[:n]); err != nil {
				t.Fatal(err)
			}
			b = b[n:]
		}
		if spilled := out.f != nil; spilled != (size > shipMemMax) {
			t.Errorf("%d bytes: spilled %v", size, spilled)
		}
		rd, err := out.reader()
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rd)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: read back %d bytes, equal %v, %v", size, len(got), bytes.Equal(got, want), err)
		}
		name, prev := filepath.Join(dir, "f.ltx"), filepath.Join(dir, "e.ltx")
		if err := os.WriteFile(prev, bytes.Repeat([]byte{7}, size+8192), 0o600); err != nil {
			t.Fatal(err)
		}
		prevInfo, err := os.Stat(prev)
		if err != nil {
			t.Fatal(err)
		}
		if err := out.keep(name, prev); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(name); err != nil || os.SameFile(fi, prevInfo) != (size <= shipMemMax) {
			t.Errorf("%d bytes: kept in the previous newest's inode %v, want %v (%v)", size, err == nil && os.SameFile(fi, prevInfo), size <= shipMemMax, err)
		}
		out.close()
		if kept, err := os.ReadFile(name); err != nil || !bytes.Equal(kept, want) {
			t.Fatalf("%d bytes: kept %d bytes, equal %v, %v", size, len(kept), bytes.Equal(kept, want), err)
		}
		if es, _ := os.ReadDir(dir); len(es) != 1 {
			t.Errorf("%d bytes: %d files left, want the kept one", size, len(es))
		}
	}
}
