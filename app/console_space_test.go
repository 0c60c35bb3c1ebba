package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
)

// treeSize is the test's own count of the regular files under root and
// their bytes, leaving out the folder skip (empty: none).
func treeSize(t *testing.T, root, skip string) (files int, bytes int64) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && p == skip {
			return fs.SkipDir
		}
		if e.Type().IsRegular() {
			st, err := e.Info()
			if err != nil {
				return err
			}
			files, bytes = files+1, bytes+st.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files, bytes
}

// TestBackupSpace: the Backups page, /healthz and the metrics show what the
// replica, replication's local state and the live data take, from the last
// sample taken in the background, never by a request; the growth per day
// from the samples kept in replication/disk.json across a restart, over
// the last day; and the two warnings: a replica over NAH_REPLICA_BUDGET,
// and one that grew faster than the data over the last day.
func TestBackupSpace(t *testing.T) {
	rs := newReplicatedServer(t)
	a := rs.signup(t, "ann")
	for i := range 5 {
		rs.post(t, a, fmt.Appendf(nil, "moment %d", i))
	}
	mustSync(t, rs.backups)
	if _, err := rs.backups.Sweep.Run(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	meta := filepath.Join(rs.dir, "replication")
	newDisk := func(budget int64) *backup.Disk {
		d := &backup.Disk{Target: rs.backups.Repl.Target(), DataDir: rs.dir, MetaDir: meta, Budget: budget, First: time.Millisecond, Every: time.Hour}
		rs.backups.Disk = d
		return d
	}
	d := newDisk(0)
	c := signedInAdmin(t, rs.testServer)

	// Before the first sample: words, no numbers, no metric, and requests
	// measure nothing.
	for range 3 {
		if s := text(parseConsole(t, get(t, c, rs.URL+"/console/backups").body).byID("backup-disk")); !strings.HasPrefix(s, "The backup's size is not measured yet") {
			t.Fatalf("before a sample: %q", s)
		}
		if h := rs.do(t, "GET", "/healthz", "", nil); strings.Contains(string(h.raw), `"disk"`) {
			t.Fatalf("healthz before a sample: %s", h.raw)
		}
	}
	var m strings.Builder
	rs.app.writePrometheus(&m)
	if strings.Contains(m.String(), "nah_replica_bytes") {
		t.Errorf("a size metric before a sample")
	}
	if r := d.Report(); !r.Last.At.IsZero() {
		t.Fatalf("a request measured: %+v", r.Last)
	}

	// The background loop's first sample, checked against the test's own
	// walk of the three folders (nothing writes meanwhile).
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); d.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for d.Report().Last.At.IsZero() && d.Report().Err == "" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-ran
	r := d.Report()
	if r.Err != "" || r.Last.At.IsZero() {
		t.Fatalf("no sample from the loop: %+v", r)
	}
	last := r.Last
	rf, rb := treeSize(t, rs.replicaDir, "")
	_, sb := treeSize(t, filepath.Join(rs.replicaDir, "sweeps"), "")
	_, stb := treeSize(t, meta, "")
	stateJSON, err := os.ReadFile(filepath.Join(meta, "disk.json"))
	if err != nil {
		t.Fatal(err)
	}
	stb -= int64(len(stateJSON)) // written after the sample measured
	df, db := treeSize(t, rs.dir, meta)
	if last.ReplicaFiles != rf || last.ReplicaBytes != rb || last.SweepBytes != sb || last.StateBytes != stb || last.DataFiles != df || last.DataBytes != db {
		t.Errorf("sample %+v\nwant replica %d files %d B (sweeps %d B), state %d B, data %d files %d B", last, rf, rb, sb, stb, df, db)
	}
	if sb == 0 || stb == 0 || db == 0 {
		t.Fatalf("the fixture has an empty part: sweeps %d, state %d, data %d", sb, stb, db)
	}

	// A restart with a day of history in disk.json, 70 samples older than
	// two days beyond the ring's 64: the growth is from the newest sample
	// at least a day old (24h10m), not the oldest nor the newest.
	const mib = 1 << 20
	base := last
	base.At = last.At.Add(-24*time.Hour - 10*time.Minute)
	base.ReplicaBytes -= 78 * mib // 30 MiB of nightly copies: the history grew 48 MiB
	base.SweepBytes -= 30 * mib
	base.DataBytes -= 2 * mib
	older := last
	older.At = last.At.Add(-40 * time.Hour)
	older.ReplicaBytes -= 10 * mib
	older.DataBytes -= 20 * mib
	newer := last
	newer.At = last.At.Add(-12 * time.Hour)
	newer.ReplicaBytes -= mib
	var samples []backup.DiskSample
	for i := range 70 {
		s := older
		s.At = older.At.Add(-time.Duration(70-i) * time.Hour)
		samples = append(samples, s)
	}
	samples = append(samples, older, base, newer, last)
	b, _ := json.Marshal(map[string]any{"samples": samples})
	if err := os.WriteFile(filepath.Join(meta, "disk.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	d = newDisk(last.ReplicaBytes - 1)
	r = d.Report()
	span := 24*time.Hour + 10*time.Minute
	perDay := func(n int64) int64 { return int64(float64(n) * float64(24*time.Hour) / float64(span)) }
	if r.Span() != span || r.ReplicaPerDay != perDay(78*mib) || r.HistoryPerDay != perDay(48*mib) || r.DataPerDay != perDay(2*mib) || !r.Outgrowing || !r.OverBudget {
		t.Errorf("after the restart: span %v, replica %d/day, history %d/day, data %d/day, outgrowing %v, over budget %v; want %v, %d, %d, %d, true, true",
			r.Span(), r.ReplicaPerDay, r.HistoryPerDay, r.DataPerDay, r.Outgrowing, r.OverBudget, span, perDay(78*mib), perDay(48*mib), perDay(2*mib))
	}

	p := parseConsole(t, get(t, c, rs.URL+"/console/backups").body)
	summary := text(p.byID("backup-disk"))
	t.Logf("the page says: %s %s %s", text(p.byID("replica-over-budget")), text(p.byID("replica-outgrowing")), summary)
	for _, want := range []string{
		fmt.Sprintf("The backup holds %s in %d files (%s of it nightly copies), growing 77.5 MiB a day; your data holds %s and grows 2.0 MiB a day.",
			bytesWords(last.ReplicaBytes), last.ReplicaFiles, bytesWords(last.SweepBytes), bytesWords(last.DataBytes)),
		"Replication's own records beside the data take " + bytesWords(last.StateBytes) + ".",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary lacks %q:\n%s", want, summary)
		}
	}
	if w := text(p.byID("replica-outgrowing")); w != "Over the last day the backup grew by 47.7 MiB (nightly copies left out), more than your data did (2.0 MiB). History older than NAH_RETENTION is pruned; if this goes on for days, pruning is behind (the logs say why) and the backup grows until its disk is full." {
		t.Errorf("outgrowing warning: %q", w)
	}
	if w := text(p.byID("replica-over-budget")); !strings.HasPrefix(w, "The backup holds "+bytesWords(last.ReplicaBytes)+", over its budget of ") {
		t.Errorf("over-budget warning: %q", w)
	}

	h := rs.do(t, "GET", "/healthz", "", nil)
	var hz struct {
		Status      string
		Replication struct {
			Status string
			Disk   struct {
				ReplicaBytes       int64    `json:"replica_bytes"`
				StateBytes         int64    `json:"state_bytes"`
				DataBytes          int64    `json:"data_bytes"`
				HistoryBytesPerDay int64    `json:"history_bytes_per_day"`
				DataBytesPerDay    int64    `json:"data_bytes_per_day"`
				TrendHours         float64  `json:"trend_hours"`
				OverBudget         bool     `json:"over_budget"`
				Outgrowing         bool     `json:"outgrowing_data"`
				Warnings           []string `json:"warnings"`
			}
		}
	}
	if err := json.Unmarshal(h.raw, &hz); err != nil {
		t.Fatal(err)
	}
	hd := hz.Replication.Disk
	if hz.Status != "degraded" || hz.Replication.Status != "ok" || hd.ReplicaBytes != last.ReplicaBytes || hd.StateBytes != last.StateBytes || hd.DataBytes != last.DataBytes ||
		hd.HistoryBytesPerDay != perDay(48*mib) || hd.DataBytesPerDay != perDay(2*mib) || hd.TrendHours < 24.16 || hd.TrendHours > 24.17 ||
		!hd.OverBudget || !hd.Outgrowing || len(hd.Warnings) != 2 {
		t.Errorf("healthz: %s", h.raw)
	}
	m.Reset()
	rs.app.writePrometheus(&m)
	for _, want := range []string{
		fmt.Sprintf("nah_replica_bytes %g\n", float64(last.ReplicaBytes)),
		fmt.Sprintf("nah_replica_files %d\n", last.ReplicaFiles),
		fmt.Sprintf("nah_replica_state_bytes %g\n", float64(last.StateBytes)),
		fmt.Sprintf("nah_data_bytes %g\n", float64(last.DataBytes)),
		"nah_replica_over_budget 1\n", "nah_replica_outgrowing_data 1\n",
	} {
		if !strings.Contains(m.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if r := d.Report(); !r.Last.At.Equal(last.At) {
		t.Errorf("a request measured again: %v, was %v", r.Last.At, last.At)
	}

	// A budget above the replica: no warning, and the summary says it.
	newDisk(last.ReplicaBytes + 1)
	p = parseConsole(t, get(t, c, rs.URL+"/console/backups").body)
	if p.byID("replica-over-budget") != nil || !strings.Contains(text(p.byID("backup-disk")), "The budget is ") {
		t.Errorf("a replica under its budget: %q", text(p.byID("disk")))
	}
	if h := rs.do(t, "GET", "/healthz", "", nil); h.str("status") != "ok" {
		t.Errorf("healthz under the budget: %s", h.raw)
	}

	// A new sample keeps the ring bounded on disk.
	if err := rs.backups.Disk.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	var st struct{ Samples []backup.DiskSample }
	if b, err := os.ReadFile(filepath.Join(meta, "disk.json")); err != nil || json.Unmarshal(b, &st) != nil || len(st.Samples) != 64 {
		t.Errorf("disk.json after a sample: %d samples, %v", len(st.Samples), err)
	}

	// Half a day of history only: the growth is over it, said so, and no
	// warning, however fast (a new server's first snapshots).
	halfDay := last
	halfDay.At = last.At.Add(-12 * time.Hour)
	halfDay.ReplicaBytes -= 10 * mib
	b, _ = json.Marshal(map[string]any{"samples": []backup.DiskSample{halfDay, last}})
	if err := os.WriteFile(filepath.Join(meta, "disk.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	newDisk(0)
	p = parseConsole(t, get(t, c, rs.URL+"/console/backups").body)
	if s := text(p.byID("backup-disk")); p.byID("replica-outgrowing") != nil || !strings.Contains(s, ", growing 20.0 MiB a day (measured over 12 hours); your data holds ") {
		t.Errorf("half a day of history: warned %v: %q", p.byID("replica-outgrowing") != nil, s)
	}
}

// spaceWithWarnings gives rs's backups a Disk with one real sample and,
// before it, a day in which the replica (without its nightly copies) grew
// 48 MiB and the data 1 MiB, under a budget just below the replica: both
// warnings show.
func spaceWithWarnings(t *testing.T, rs *replicatedServer) {
	t.Helper()
	meta := filepath.Join(rs.dir, "replication")
	d := &backup.Disk{Target: rs.backups.Repl.Target(), DataDir: rs.dir, MetaDir: meta}
	if err := d.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	last := d.Report().Last
	dayAgo := last
	dayAgo.At = last.At.Add(-24 * time.Hour)
	dayAgo.ReplicaBytes -= 48 << 20
	dayAgo.DataBytes -= 1 << 20
	b, _ := json.Marshal(map[string]any{"samples": []backup.DiskSample{dayAgo, last}})
	if err := os.WriteFile(filepath.Join(meta, "disk.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	rs.backups.Disk = &backup.Disk{Target: d.Target, DataDir: rs.dir, MetaDir: meta, Budget: last.ReplicaBytes - 1}
}

// bytesWords is a size as the page words it.
func bytesWords(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprint(n, " B")
}

// TestPublicError: what /healthz shows of an error names no person and no
// absolute path, and keeps the rest.
func TestPublicError(t *testing.T) {
	id, other := nah.NewPersonID(), nah.NewPersonID()
	for in, want := range map[string]string{
		"sync " + nah.PersonRel(id) + ": timeout":                           "sync people/…/person.db: timeout",
		"copy " + nah.MediaRel(id, "m") + " and " + nah.PersonDirRel(other): "copy people/…/media/m and people/…",
		`open "/srv/nah/data/` + nah.PersonRel(id) + `": no space left`:     `open "…": no space left`,
		"stat /srv/replica: denied":                                         "stat …: denied",
		"directory.db: locked (people/ is fine)":                            "directory.db: locked (people/ is fine)",
		"read people/" + id[:9] + ": cut short":                             "read people/…: cut short",
		"people/" + id + "x/person.db":                                      "people/…/person.db",
	} {
		if got := publicError(in); got != want {
			t.Errorf("publicError(%q) = %q, want %q", in, got, want)
		}
	}
}
