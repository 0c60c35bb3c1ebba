package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSummaryNamesSkipsAndFailures runs testrun on a module of its own
// whose tests pass, skip (one a subtest) and fail: the run exits 1, prints
// the failed test's output, and its summary names each skipped test with
// its reason.
func TestSummaryNamesSkipsAndFailures(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "testrun")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	mod := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.26\n",
		"m_test.go": `package m

import "testing"

func TestPasses(t *testing.T) {}
func TestNoBrowser(t *testing.T) { t.Skip("chromium not found") }
func TestBroken(t *testing.T) { t.Log("what it saw"); t.Error("broken") }
func TestTools(t *testing.T) {
	t.Run("npm", func(t *testing.T) { t.Skipf("npm not found: %s", "make axe") })
}
`,
		"none/none.go": "package none\n",
	}
	for name, text := range files {
		p := filepath.Join(mod, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-count=1", "./...")
	cmd.Dir = mod
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("testrun's output:\n%s", out)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("exit: %v, want status 1 (a test failed)", err)
	}
	_, summary, ok := strings.Cut(out, "== go test:")
	if !ok {
		t.Fatal("no summary")
	}
	for _, want := range []string{
		"what it saw",
		"broken",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the failed test's output %q is not printed", want)
		}
	}
	for _, want := range []string{
		"1 failed, 2 skipped",
		"example.com/m TestNoBrowser: m_test.go:6: chromium not found",
		"example.com/m TestTools/npm: m_test.go:9: npm not found: make axe",
		"no tests: none",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary lacks %q", want)
		}
	}
}
