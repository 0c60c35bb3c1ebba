package backup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/benbjohnson/litestream"

	"github.com/nah-app/nah/internal/testutil"
)

// wchar is what this process has written so far (/proc/self/io).
func wchar(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skip("no /proc/self/io:", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Skip("no wchar in /proc/self/io")
	return 0
}

// TestRestoreStopsPastItsBound: a snapshot whose header says what it
// holds (40,000 zero pages, 164 MB once written, in 1 MB without its
// trailer), restored with a bound of 8 MiB and no look at its header
// first, as if the target changed it after checkLTXFile read it: the
// restore stops a little past the bound with ErrTooLarge and leaves no
// file.
func TestRestoreStopsPastItsBound(t *testing.T) {
	root := t.TempDir()
	tg := &Target{URL: root, dir: root}
	rel := "people/x/person.db"
	if _, err := testutil.LTXBomb(filepath.Join(root, rel), 40_000, 40_000); err != nil {
		t.Fatal(err)
	}
	c, err := tg.restoreClient(rel)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "person.db")
	opt := litestream.NewRestoreOptions()
	opt.OutputPath, opt.IntegrityCheck = out, litestream.IntegrityCheckNone
	const limit = 8 << 20
	before := wchar(t)
	err = restoreWithin(context.Background(), litestream.NewReplicaWithClient(nil, c), opt, limit)
	wrote := wchar(t) - before
	t.Logf("a bound of %d bytes: %d written, %v", limit, wrote, err)
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("restore: %v, want ErrTooLarge", err)
	}
	if wrote > limit+32<<20 {
		t.Errorf("%d bytes written for a bound of %d", wrote, limit)
	}
	for _, p := range []string{out, out + ".tmp"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", p, err)
		}
	}
}
