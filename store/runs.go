package store

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
)

// A Store that stops without Close (kill -9, a power cut, an OOM kill)
// leaves newest-moment times in memory that the directory never got: its
// flush runs once a second (flushInterval). So every open Store holds a lock
// file under Dir/run/, locked (tryLock) for as long as it lives and removed
// by Close; the kernel drops the lock of a dead process. A Store that finds
// an unlocked one knows the directory may be behind the files, and reads
// everyone's newest time from their file at first use instead of trusting
// the directory's (load). Locked ones belong to live instances, whose
// posts show within StaleAfter as before.
const runDirName = "run"

// takeRun removes the lock files that no live Store holds, reporting
// whether there were any, and makes this Store's own.
func takeRun(dir string) (own *runLock, crashed bool, err error) {
	run := filepath.Join(dir, runDirName)
	if err := os.MkdirAll(run, privateDir); err != nil {
		return nil, false, err
	}
	old, _ := filepath.Glob(filepath.Join(run, "*.lock"))
	for _, p := range old {
		if removeUnlocked(p) {
			crashed = true
		}
	}
	starts, _ := filepath.Glob(filepath.Join(run, "new-*")) // a Store that died opening
	for _, p := range starts {
		removeUnlocked(p)
	}
	// Locked under a temporary name, then renamed: another Store opening
	// meanwhile never sees it unlocked.
	f, err := os.CreateTemp(run, "new-*")
	if err != nil {
		return nil, false, err
	}
	if err := tryLock(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, false, err
	}
	b := make([]byte, 8)
	rand.Read(b)
	p := filepath.Join(run, hex.EncodeToString(b)+".lock")
	if err := os.Rename(f.Name(), p); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, false, err
	}
	return &runLock{f: f, path: p}, crashed, nil
}

// runLock is a Store's own lock file.
type runLock struct {
	f    *os.File
	path string
}

// drop removes and unlocks the lock file: its Store stopped cleanly, with
// every newest time flushed.
func (l *runLock) drop() {
	os.Remove(l.path)
	l.f.Close()
}
