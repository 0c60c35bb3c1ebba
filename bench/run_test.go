package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	res, err := measure(context.Background(), bin, data, f, people, 300*time.Millisecond, "", "fixture")
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
	if d := res.DiskSync; d == nil || d.CPUus <= 0 || d.WallUs < d.CPUus {
		t.Errorf("the sync probe: %+v, want some CPU and at least as much wall", d)
	}
	table := markdown(res)
	if !strings.Contains(table, "a sync of a growing file on the data's disk") {
		t.Errorf("the table does not give the sync probe:\n%s", table)
	}
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

// TestPocketBaseSmall seeds people-small into PocketBase through its API
// and measures it briefly, as run -pocketbase does. PocketBase must keep
// nah's rule: a person's feed holds only their own and their connections'
// moments, newest first; another's moment is not theirs to view; nobody
// posts as someone else. It needs the binary (go -C bench/pocketbase
// build, a module of its own): NAH_BENCH_POCKETBASE=path; else it skips.
func TestPocketBaseSmall(t *testing.T) {
	bin := os.Getenv("NAH_BENCH_POCKETBASE")
	if bin == "" {
		t.Skip("NAH_BENCH_POCKETBASE is not set (bench/README.md, nah beside PocketBase)")
	}
	ctx := context.Background()
	f := fixture.Fixtures["people-small"]
	dir := t.TempDir()
	src, err := fixtureDir(ctx, dir, f)
	if err != nil {
		t.Fatal(err)
	}
	var nahPeople []fixture.Person
	raw, _ := os.ReadFile(filepath.Join(src, fixture.PeopleFile))
	if err := json.Unmarshal(raw, &nahPeople); err != nil {
		t.Fatal(err)
	}
	seed, people, err := pbSeedDir(ctx, bin, dir, f)
	if err != nil {
		t.Fatal(err)
	}

	circle := map[string]bool{people[0].ID: true}
	for _, e := range fixture.Graph(f) {
		if e[0] == 0 {
			circle[pbID(int(e[1]))] = true
		}
		if e[1] == 0 {
			circle[pbID(int(e[0]))] = true
		}
	}
	var stranger int
	for stranger = 1; circle[pbID(stranger)]; stranger++ {
	}
	friend := 0
	for i := 1; friend == 0; i++ {
		if circle[pbID(i)] {
			friend = i
		}
	}
	data := filepath.Join(dir, "copy")
	if err := copyDir(filepath.Join(seed, "pb_data"), data); err != nil {
		t.Fatal(err)
	}
	cmd, base, done, err := pbServe(ctx, bin, data)
	if err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	c := newClient(1)
	type page struct {
		Items []struct{ ID, Author, Created string }
	}
	// The seed keeps the fixture's times (an autodate field would have
	// stamped them all with the seed's minute).
	var oldest page
	if err := pbCall(ctx, c, "GET", base+"/api/collections/moments/records?perPage=1&sort=created", people[0].Token, nil, &oldest); err != nil || len(oldest.Items) != 1 {
		t.Fatalf("person 0's oldest visible moment: %v %+v", err, oldest)
	}
	if at, err := time.Parse("2006-01-02 15:04:05.000Z", oldest.Items[0].Created); err != nil || time.Since(at) < time.Duration(f.Days-3)*24*time.Hour {
		t.Fatalf("the oldest moment person 0 sees was created %s (%v), want about %d days ago", oldest.Items[0].Created, err, f.Days)
	}
	var theirs page
	if err := pbCall(ctx, c, "GET", base+"/api/collections/moments/records?perPage=1&filter=author%3D%27"+pbID(stranger)+"%27", people[stranger].Token, nil, &theirs); err != nil || len(theirs.Items) != 1 {
		t.Fatalf("the stranger's own moments: %v %+v", err, theirs)
	}
	if err := pbCall(ctx, c, "GET", base+"/api/collections/moments/records/"+theirs.Items[0].ID, people[0].Token, nil, nil); err == nil || !strings.Contains(err.Error(), ": 404 ") {
		t.Fatalf("person 0 viewed a stranger's moment: %v", err)
	}
	if err := pbCall(ctx, c, "POST", base+pbPostPath, people[0].Token, map[string]string{"author": pbID(friend), "body": "x"}, nil); err == nil {
		t.Fatal("person 0 posted as another")
	}
	var posted struct{ ID string }
	if err := pbCall(ctx, c, "POST", base+pbPostPath, people[friend].Token, map[string]string{"author": pbID(friend), "body": "new"}, &posted); err != nil {
		t.Fatal(err)
	}
	var feed page
	if err := pbCall(ctx, c, "GET", base+pbFeedPath, people[0].Token, nil, &feed); err != nil {
		t.Fatal(err)
	}
	if len(feed.Items) != 30 || feed.Items[0].ID != posted.ID {
		t.Fatalf("person 0's feed: %d moments, the first %+v, want 30 and the friend's new post %s", len(feed.Items), feed.Items[0], posted.ID)
	}
	for i, m := range feed.Items {
		if !circle[m.Author] {
			t.Fatalf("person 0's feed holds a moment of %s, not in their circle", m.Author)
		}
		if i > 0 && m.Created > feed.Items[i-1].Created {
			t.Fatalf("feed not newest first: %s after %s", m.Created, feed.Items[i-1].Created)
		}
	}
	if err := pbStop(cmd, done); err != nil {
		t.Fatal(err)
	}

	res, file, err := runPocketBase(ctx, bin, dir, filepath.Join(dir, "results"), f, nahPeople, 300*time.Millisecond, true)
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]Latency{"feed 1": res.Feed1, "feed 50": res.Feed50, "warm-up": res.PostWarmup, "post 16": res.Post16, "post mix 16": res.PostMix16, "ceiling": res.Ceiling50} {
		if l.Requests == 0 || l.Errors != 0 || l.P95ms <= 0 {
			t.Errorf("%s: %+v", name, l)
		}
	}
	if res.Server != pbServer || res.ColdStartMs <= 0 || res.PeakRSSMB <= 0 || res.PostCost == nil || res.PostCost.CPUms <= 0 {
		t.Errorf("result: %+v", res)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatal(err)
	}
}
