package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah/backup"
)

// TestDrillInConsoleAndHealth: "Run a drill now" runs one drill at a time
// in the background; the Backups page and the Overview say what it found
// ("3 of 3 people restored and equal"); a person whose replica is gone is
// named on both, /healthz turns degraded and the metrics count the
// failure, until a later drill passes; a drill that cannot run at all
// turns it degraded too.
func TestDrillInConsoleAndHealth(t *testing.T) {
	rs := newReplicatedServer(t)
	d := runDrill(t, rs)

	var people []account
	for _, h := range []string{"ann", "bob", "cyd"} {
		a := rs.signup(t, h)
		rs.post(t, a, []byte("hello from "+h))
		people = append(people, a)
	}
	mustSync(t, rs.backups)
	c := signedInAdmin(t, rs.testServer)

	if p := get(t, c, rs.URL+"/console/backups"); !strings.Contains(p.body, "No restore drill yet.") || !strings.Contains(p.body, `id="drill-now"`) {
		t.Fatalf("backups page before a drill:\n%s", p.body)
	}
	drillNow := func() *backup.DrillReport {
		t.Helper()
		before, _, _ := d.Last()
		if p := postForm(t, c, rs.URL+"/console/backups/drill", nil); p.status != 200 || !strings.Contains(p.body, "A restore drill started") {
			t.Fatalf("run a drill now: %d\n%s", p.status, p.body)
		}
		var last *backup.DrillReport
		if !drillWait(30*time.Second, func() bool {
			var running bool
			last, _, running = d.Last()
			return !running && last != nil && (before == nil || last.Started.After(before.Started))
		}) {
			t.Fatal("the drill did not end")
		}
		return last
	}

	r := drillNow()
	if !r.Passed() || r.Equal != 3 {
		t.Fatalf("sound drill: %s %+v", r.Summary(), r.Failures)
	}
	const line = "ago: 3 of 3 people restored and equal, the directory too, took "
	if p := get(t, c, rs.URL+"/console/backups"); !strings.Contains(p.body, "Last drill ") || !strings.Contains(p.body, line) {
		t.Errorf("backups page after a sound drill lacks %q:\n%s", line, p.body)
	}
	if o := get(t, c, rs.URL+"/console"); !strings.Contains(o.body, line) {
		t.Errorf("overview after a sound drill lacks %q", line)
	}
	if h := rs.do(t, "GET", "/healthz", "", nil); h.str("status") != "ok" || h.str("restore_drill") != "ok" {
		t.Errorf("healthz after a sound drill: %s", h.raw)
	}
	var m strings.Builder
	rs.app.writePrometheus(&m)
	for _, want := range []string{"nah_drill_failures 0\n", "nah_drill_files_checked 4\n", "nah_drill_duration_seconds "} {
		if !strings.Contains(m.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(m.String(), "nah_drill_last_success_timestamp_seconds 0\n") {
		t.Error("no last success time after a sound drill")
	}

	// One at a time.
	prev, _, _ := d.Last()
	if !d.Start() {
		t.Fatal("Start refused with no drill running")
	}
	if d.Start() {
		t.Error("a second drill was started while one was asked for")
	}
	if !drillWait(30*time.Second, func() bool { last, _, running := d.Last(); return !running && last.Started.After(prev.Started) }) {
		t.Fatal("the drill asked for did not run")
	}

	// bob's replica goes away: the next drill names him.
	bobReplica := filepath.Join(rs.replicaDir, "people", people[1].id)
	if err := os.Rename(bobReplica, bobReplica+".away"); err != nil {
		t.Fatal(err)
	}
	r = drillNow()
	if len(r.Failures) != 1 || !strings.HasPrefix(r.Failures[0].Who, "bob ") {
		t.Fatalf("drill without bob's replica: %s %+v", r.Summary(), r.Failures)
	}
	p := get(t, c, rs.URL+"/console/backups")
	if !strings.Contains(p.body, `id="drill-status" role="alert"`) || !strings.Contains(p.body, "<strong>bob (people/"+people[1].id+"/person.db)</strong>") {
		t.Errorf("backups page does not name bob:\n%s", p.body)
	}
	if o := get(t, c, rs.URL+"/console"); !strings.Contains(o.body, "2 of 3 people restored and equal") || !strings.Contains(o.body, "bob (people/") {
		t.Errorf("overview does not name bob")
	}
	h := rs.do(t, "GET", "/healthz", "", nil)
	if h.status != 200 || h.str("status") != "degraded" || h.str("restore_drill") != "failed" || strings.Contains(string(h.raw), people[1].id) {
		t.Errorf("healthz after a failed drill: %d %s", h.status, h.raw)
	}
	m.Reset()
	rs.app.writePrometheus(&m)
	if !strings.Contains(m.String(), "nah_drill_failures 1\n") {
		t.Errorf("metrics do not count the failure")
	}

	// Back: the next drill passes and health is ok again.
	if err := os.Rename(bobReplica+".away", bobReplica); err != nil {
		t.Fatal(err)
	}
	if r := drillNow(); !r.Passed() {
		t.Fatalf("drill with bob's replica back: %s %+v", r.Summary(), r.Failures)
	}
	if h := rs.do(t, "GET", "/healthz", "", nil); h.str("status") != "ok" || h.str("restore_drill") != "ok" {
		t.Errorf("healthz after a later drill passed: %s", h.raw)
	}

	// A drill that cannot run (a file where its folder was: the tests run
	// as root, whom chmod does not stop) has not passed: health is degraded.
	if err := os.Rename(d.Dir, d.Dir+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.Dir, []byte("not a folder"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := drillNow(); r.Err == "" {
		t.Fatalf("drill without its folder ran: %s", r.Summary())
	}
	if h := rs.do(t, "GET", "/healthz", "", nil); h.str("status") != "degraded" || h.str("restore_drill") != "failed" {
		t.Errorf("healthz after a drill that could not run: %s", h.raw)
	}
}

// drillWait polls cond every 20 ms until it holds or within runs out.
func drillWait(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// runDrill gives rs a restore drill, run in the background until the test
// ends, as cmd/nah gives the server one.
func runDrill(t *testing.T, rs *replicatedServer) *backup.Drill {
	t.Helper()
	s := rs.store
	d := &backup.Drill{
		Target: rs.backups.Repl.Target(), Repl: rs.backups.Repl, DataDir: s.Path(""), Source: s, Files: s,
		Dir:     filepath.Join(s.Path(""), "replication", "drill"),
		Recheck: []time.Duration{100 * time.Millisecond},
	}
	rs.backups.Drill = d
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return d
}
