package store

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// An import's temporary folder (importTmpPattern) holds a lock file
// (tryLock) for as long as the import runs; the kernel drops it when the
// process dies, kill -9 included, so an unlocked folder is a dead one's,
// whatever its age. It is made and locked as importNewPattern, then
// renamed; an unlocked importNewPattern entry is judged once importNewAge
// old. Done, it is renamed importDeadPattern and then removed.
const (
	importTmpPattern  = "import-tmp-"
	importNewPattern  = "import-new-"
	importDeadPattern = "import-dead-"
	importLockName    = ".lock"
	importNewAge      = time.Second
)

// staleImportAge is when a temporary folder without a lock file (made by a
// version before the lock) is surely left by a crash: an import in the
// console gives up after 30 minutes, and one from the command line reads a
// local file.
const staleImportAge = 24 * time.Hour

// removeStaleImports removes what imports cut off by a crash left in dir:
// temporary folders whose import no longer holds their lock. A locked one
// is an import running, maybe in another process (`nah person import`
// beside a server), and is left alone.
func removeStaleImports(dir string, now time.Time, log *slog.Logger) {
	ms, _ := filepath.Glob(filepath.Join(dir, importTmpPattern+"*"))
	news, _ := filepath.Glob(filepath.Join(dir, importNewPattern+"*"))
	deads, _ := filepath.Glob(filepath.Join(dir, importDeadPattern+"*"))
	for _, m := range append(append(ms, news...), deads...) {
		if !strings.HasPrefix(filepath.Base(m), importDeadPattern) && !deadImport(m, now) {
			continue
		}
		if err := os.RemoveAll(m); err != nil {
			log.Warn("cannot remove what an interrupted import left", "path", m, "err", err)
		} else {
			log.Info("removed what an interrupted import left", "path", m)
		}
	}
}

// deadImport reports whether the import entry at m (importTmpPattern or
// importNewPattern) is no running import's. A young importNewPattern entry
// is first left to be importNewAge old (by the file system's clock: now
// may be a test's), so that no check of its lock races with its making.
func deadImport(m string, now time.Time) bool {
	info, err := os.Lstat(m)
	if err != nil {
		return false
	}
	isNew := strings.HasPrefix(filepath.Base(m), importNewPattern)
	if age := time.Since(info.ModTime()); isNew && age < importNewAge {
		time.Sleep(importNewAge - age)
		if info, err = os.Lstat(m); err != nil {
			return false // renamed or removed by its import meanwhile
		}
	}
	lock := m // a marker being made locks itself
	if info.IsDir() {
		lock = filepath.Join(m, importLockName)
	}
	f, err := os.Open(lock)
	switch {
	case err == nil:
		defer f.Close()
		return tryLock(f) == nil
	case !os.IsNotExist(err):
		return false
	case isNew:
		return true // killed before its lock file was made
	}
	// A folder is renamed only once locked: one without a lock file is an
	// earlier version's, removed after a day as then.
	return now.Sub(info.ModTime()) >= staleImportAge
}

// makeImportTmp makes an import's temporary folder in dir, locked until
// the returned file is closed (importTmpPattern).
func makeImportTmp(dir string) (tmp string, lock *os.File, err error) {
	made, err := os.MkdirTemp(dir, importNewPattern)
	if err != nil {
		return "", nil, err
	}
	if lock, err = os.OpenFile(filepath.Join(made, importLockName), os.O_RDWR|os.O_CREATE|os.O_EXCL, privateFile); err == nil {
		if err = tryLock(lock); err != nil {
			lock.Close()
		}
	}
	if err != nil {
		os.RemoveAll(made)
		return "", nil, err
	}
	tmp = filepath.Join(dir, importTmpPattern+strings.TrimPrefix(filepath.Base(made), importNewPattern))
	if err := os.Rename(made, tmp); err != nil {
		lock.Close()
		os.RemoveAll(made)
		return "", nil, err
	}
	return tmp, lock, nil
}

// removeImportTmp removes an import's temporary folder and then drops its
// lock (importDeadPattern).
func removeImportTmp(tmp string, lock *os.File) {
	dead := filepath.Join(filepath.Dir(tmp), importDeadPattern+strings.TrimPrefix(filepath.Base(tmp), importTmpPattern))
	if os.Rename(tmp, dead) == nil {
		tmp = dead
	}
	os.RemoveAll(tmp)
	lock.Close()
}
