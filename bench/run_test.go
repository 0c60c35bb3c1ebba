package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nah-app/nah/bench/fixture"
)

// TestMain lets this test binary stand in for `bench ceiling`, which
// measure starts as a child process of its own executable.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "ceiling" {
		if err := ceilingCmd(os.Args[2:]); err != nil {
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

// TestMeasureSmall runs the whole measurement, briefly, on people-small
// against a freshly built binary: the path `make bench` takes, minus time.
func TestMeasureSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a short load")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "nah")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "../cmd/nah")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	f := fixture.Fixtures["people-small"]
	src := filepath.Join(dir, "fixture")
	if _, err := fixture.Generate(context.Background(), src, f, nil); err != nil {
		t.Fatal(err)
	}
	var people []fixture.Person
	raw, _ := os.ReadFile(filepath.Join(src, fixture.PeopleFile))
	if err := json.Unmarshal(raw, &people); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if err := copyDir(filepath.Join(src, fixture.DataDir), data); err != nil {
		t.Fatal(err)
	}
	res, err := measure(context.Background(), bin, data, f, people, 300*time.Millisecond, "")
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]Latency{"feed 1": res.Feed1, "feed 50": res.Feed50, "post 16": res.Post16, "post mix 16": res.PostMix16, "ceiling": res.Ceiling50} {
		if l.Requests == 0 || l.Errors != 0 || l.P95ms <= 0 || l.P50ms > l.P95ms || l.P95ms > l.P99ms {
			t.Errorf("%s: %+v", name, l)
		}
	}
	if res.ColdStartMs <= 0 || res.StopS <= 0 || res.IdleRSSMB <= 0 || res.PeakRSSMB < res.IdleRSSMB || res.BinaryMB <= 0 || res.WALLeft != 0 || res.CeilingRatio <= 0 {
		t.Errorf("result: %+v", res)
	}
	table := markdown(res)
	th := filepath.Join(dir, "THRESHOLDS.md")
	os.WriteFile(th, []byte("# hand-written\n"), 0o644)
	for range 2 { // a second run replaces the table, it does not append
		if err := updateThresholds(th, res.Fixture, table); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(th)
	if got := string(b); got != "# hand-written\n\n<!-- BEGIN generated people-small -->\n"+table+"<!-- END generated people-small -->\n" {
		t.Fatalf("THRESHOLDS.md after two runs:\n%s", got)
	}
}

func TestPercentilesAreExact(t *testing.T) {
	var samples []time.Duration
	for i := 100; i >= 1; i-- {
		samples = append(samples, time.Duration(i)*time.Millisecond)
	}
	l := summarise(1, time.Second, samples, 0, 100)
	if l.P50ms != 50 || l.P95ms != 95 || l.P99ms != 99 || l.MaxMs != 100 || l.PerSecond != 100 {
		t.Fatalf("%+v", l)
	}
}
