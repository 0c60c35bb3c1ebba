// Testrun runs go test -json with the arguments it is given and prints what
// a person waiting on the suite needs: each package as it finishes, with its
// time; the whole output of each test that fails, when it fails; every
// minute, what is still running; and at the end every skipped test with its
// reason, so that a test skipped for a missing tool (Chromium, npm) is seen.
// It exits as go test did. make test runs it:
//
//	go run ./internal/testrun -timeout 20m ./...
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// event is one line of go test -json (go doc cmd/test2json), and of the
// build events it interleaves (go help buildjson).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string // build events
}

// keepOutput bounds the output kept of one running test: its last 1 MiB
// is printed if it fails, the rest dropped (a test that logs a lot).
const keepOutput = 1 << 20

// every is how often the packages still running are listed.
const every = time.Minute

func main() {
	args := append([]string{"test", "-json"}, os.Args[1:]...)
	cmd := exec.Command("go", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fatal(err)
	}
	fmt.Printf("== go %s\n", strings.Join(args, " "))
	r := newRun(os.Stdout, modulePrefix())
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				r.running(time.Since(start))
			}
		}
	}()
	r.read(out)
	close(done)
	werr := cmd.Wait()
	r.summary(time.Since(start))
	if werr != nil {
		var exit *exec.ExitError
		if errors.As(werr, &exit) {
			os.Exit(exit.ExitCode())
		}
		fatal(werr)
	}
	if r.failed > 0 {
		os.Exit(1) // go test says so too; never pass a failed test
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "testrun:", err)
	os.Exit(2)
}

// modulePrefix is the module's path and a slash, left off package names.
func modulePrefix() string {
	b, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b)) + "/"
}

type key struct{ pkg, test string }

type pkgResult struct {
	name    string
	action  string // pass, fail, skip
	elapsed float64
	passed  int
	skipped int
}

type skip struct{ pkg, test, why string }

type run struct {
	w      io.Writer
	prefix string

	mu      sync.Mutex
	out     map[key]*bytes.Buffer // output of tests (and packages) still running
	started map[string]bool       // packages whose tests run now
	live    map[key]bool          // tests running now
	pkgs    map[string]*pkgResult
	skips   []skip
	failed  int
	passed  int
}

func newRun(w io.Writer, prefix string) *run {
	return &run{w: w, prefix: prefix, out: map[key]*bytes.Buffer{}, started: map[string]bool{},
		live: map[key]bool{}, pkgs: map[string]*pkgResult{}}
}

func (r *run) name(pkg string) string {
	if n := strings.TrimPrefix(pkg, r.prefix); n != "" {
		return n
	}
	return pkg
}

// read handles the events on out until it ends. A line that is not an
// event (none should be) is printed as it is.
func (r *run) read(out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(r.w, sc.Text())
			continue
		}
		r.handle(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(r.w, "testrun: reading go test:", err)
	}
}

func (r *run) handle(e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := key{e.Package, e.Test}
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.w, e.Output)
	case "start":
		r.started[e.Package] = true
	case "run", "cont":
		r.live[k] = true
	case "pause": // a parallel test waiting for the others: not running
		delete(r.live, k)
	case "output":
		b := r.out[k]
		if b == nil {
			b = new(bytes.Buffer)
			r.out[k] = b
		}
		b.WriteString(e.Output)
		if b.Len() > 2*keepOutput {
			tail := slices.Clone(b.Bytes()[b.Len()-keepOutput:])
			b.Reset()
			b.WriteString("[... earlier output left out]\n")
			b.Write(tail)
		}
	case "pass", "fail", "skip":
		r.end(k, e)
	}
}

// end records a test's or a package's result; under mu.
func (r *run) end(k key, e event) {
	out := r.out[k]
	delete(r.out, k)
	delete(r.live, k)
	if k.test == "" {
		r.endPackage(k.pkg, e, out)
		return
	}
	p := r.pkg(k.pkg)
	switch e.Action {
	case "pass":
		p.passed++
		r.passed++
	case "skip":
		p.skipped++
		r.skips = append(r.skips, skip{r.name(k.pkg), k.test, reason(out)})
	case "fail":
		r.failed++
		fmt.Fprintf(r.w, "--- FAIL: %s %s (%.1f s)\n", r.name(k.pkg), k.test, e.Elapsed)
		if out != nil {
			r.w.Write(out.Bytes())
		}
	}
}

func (r *run) pkg(pkg string) *pkgResult {
	p := r.pkgs[pkg]
	if p == nil {
		p = &pkgResult{name: r.name(pkg)}
		r.pkgs[pkg] = p
	}
	return p
}

// endPackage prints a package's line; a failed package's own output (a
// panic, a build failure, TestMain's) with it.
func (r *run) endPackage(pkg string, e event, out *bytes.Buffer) {
	delete(r.started, pkg)
	p := r.pkg(pkg)
	p.action, p.elapsed = e.Action, e.Elapsed
	switch e.Action {
	case "skip":
		return // no test files: listed in the summary
	case "fail":
		if out != nil {
			r.w.Write(out.Bytes())
		}
		fmt.Fprintf(r.w, "FAIL %-28s %6.1f s\n", p.name, p.elapsed)
	default:
		s := ""
		if p.skipped > 0 {
			s = fmt.Sprintf("  (%d skipped)", p.skipped)
		}
		fmt.Fprintf(r.w, "ok   %-28s %6.1f s%s\n", p.name, p.elapsed, s)
	}
}

// reason is why a test skipped: what it logged, without go test's own
// lines (=== RUN, --- SKIP).
func reason(out *bytes.Buffer) string {
	if out == nil {
		return "(no reason given)"
	}
	var why []string
	for line := range strings.Lines(out.String()) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "=== ") || strings.HasPrefix(line, "--- ") {
			continue
		}
		why = append(why, line)
	}
	if len(why) == 0 {
		return "(no reason given)"
	}
	return strings.Join(why, " / ")
}

// running lists the packages still running and their tests.
func (r *run) running(since time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for pkg := range r.started {
		var tests []string
		for k := range r.live {
			if k.pkg == pkg && !strings.Contains(k.test, "/") {
				tests = append(tests, k.test)
			}
		}
		sort.Strings(tests)
		s := r.name(pkg)
		if len(tests) > 0 {
			s += " (" + strings.Join(tests, ", ") + ")"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return
	}
	sort.Strings(parts)
	fmt.Fprintf(r.w, "   %s: running %s\n", since.Round(time.Second), strings.Join(parts, ", "))
}

// summary: the packages by time, the counts, and every skipped test.
func (r *run) summary(took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ran, none []*pkgResult
	for _, p := range r.pkgs {
		if p.action == "skip" {
			none = append(none, p)
		} else {
			ran = append(ran, p)
		}
	}
	sort.Slice(ran, func(i, j int) bool { return ran[i].elapsed > ran[j].elapsed })
	sort.Slice(none, func(i, j int) bool { return none[i].name < none[j].name })
	fmt.Fprintf(r.w, "\n== go test: %d passed, %d failed, %d skipped, in %d packages, took %s\n",
		r.passed, r.failed, len(r.skips), len(ran), took.Round(time.Second))
	var slow []string
	for _, p := range ran[:min(len(ran), 5)] {
		slow = append(slow, fmt.Sprintf("%s %.0f s", p.name, p.elapsed))
	}
	fmt.Fprintf(r.w, "   slowest packages: %s\n", strings.Join(slow, ", "))
	if len(none) > 0 {
		var names []string
		for _, p := range none {
			names = append(names, p.name)
		}
		fmt.Fprintf(r.w, "   no tests: %s\n", strings.Join(names, ", "))
	}
	if len(r.skips) == 0 {
		fmt.Fprintln(r.w, "   no test skipped")
		return
	}
	sort.Slice(r.skips, func(i, j int) bool {
		a, b := r.skips[i], r.skips[j]
		return a.pkg < b.pkg || a.pkg == b.pkg && a.test < b.test
	})
	fmt.Fprintf(r.w, "   skipped:\n")
	for _, s := range r.skips {
		fmt.Fprintf(r.w, "     %s %s: %s\n", s.pkg, s.test, s.why)
	}
}
