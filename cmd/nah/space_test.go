package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestReplicaSpaceAcrossRestart: the served binary measures the replica,
// replication's state (the data directory's replication folder) and the
// data in the background a few seconds after start; /healthz shows it,
// and NAH_REPLICA_BUDGET past it makes the health degraded. The sample is
// kept in replication/disk.json, so the next start shows it at once and
// does not list the target again before five minutes have passed since.
func TestReplicaSpaceAcrossRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	p := start(t, dir, "NAH_REPLICA_BUDGET=1KB", "NAH_SWEEP_EVERY=off")
	_, token := p.signup(t, "ann")
	p.post(t, token, "hello")
	disk := func(p *proc) (string, map[string]any) {
		t.Helper()
		st, h, err := p.call("GET", "/healthz", "", nil)
		if err != nil || st != 200 {
			t.Fatalf("healthz: %d %v", st, err)
		}
		rep, _ := h["replication"].(map[string]any)
		d, _ := rep["disk"].(map[string]any)
		return h["status"].(string), d
	}
	var status string
	var d map[string]any
	for deadline := time.Now().Add(15 * time.Second); d == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		status, d = disk(p)
	}
	if d == nil {
		t.Fatalf("no measurement 15 s after start\n%s", p.log())
	}
	if status != "degraded" || d["over_budget"] != true || d["budget_bytes"] != 1000.0 || d["replica_bytes"].(float64) <= 1000 ||
		d["state_bytes"].(float64) <= 0 || d["data_bytes"].(float64) <= 0 {
		t.Errorf("over a 1KB budget: %s %v", status, d)
	}
	if _, err := os.Stat(filepath.Join(dir, "replication", "disk.json")); err != nil {
		t.Errorf("the sample is not kept under replication/: %v", err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-p.done; err != nil {
		t.Fatalf("stop: %v\n%s", err, p.log())
	}

	p = start(t, dir, "NAH_SWEEP_EVERY=off")
	time.Sleep(4 * time.Second) // past a first start's first measurement
	status, again := disk(p)
	if again == nil || again["measured_at"] != d["measured_at"] || again["replica_bytes"] != d["replica_bytes"] || again["over_budget"] != false || status != "ok" {
		t.Errorf("after a restart without a budget: %s %v, was %v", status, again, d)
	}
}
