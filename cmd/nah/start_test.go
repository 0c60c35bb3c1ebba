package main

import (
	"path/filepath"
	"testing"
	"time"
)

// TestRestoreAfterStopAtOnce: the directory is handed to replication a
// moment after start (directoryWatchAfter), so that the first requests do
// not share the cores with its first snapshot; a server stopped before
// that moment still leaves a replica that `nah restore` makes whole: what
// the second start wrote to the directory (a first-admin link) included.
func TestRestoreAfterStopAtOnce(t *testing.T) {
	data, repl, out := t.TempDir(), filepath.Join(t.TempDir(), "replica"), filepath.Join(t.TempDir(), "restored")
	p := start(t, data, replicaEnv(repl)...)
	_, token := p.signup(t, "ann")
	p.post(t, token, "before the restart")
	p.stop(t)

	began := time.Now()
	p = start(t, data, replicaEnv(repl)...)
	signalled := time.Since(began) // an upper bound: the server's wait starts after exec
	p.stop(t)
	if signalled >= directoryWatchAfter {
		t.Fatalf("SIGTERM came %v after exec, not within %v: the stop did not come before the directory's watch", signalled, directoryWatchAfter)
	}
	restoreInto(t, repl, out)
	sameData(t, data, out)
}
