//go:build unix

package store

import (
	"os"
	"syscall"
)

// tryLock takes an exclusive advisory lock on f without waiting, or says
// why not (EWOULDBLOCK: someone holds it). The kernel drops the lock when
// its holder closes f or dies, kill -9 included, which is what tells an
// upload in flight from one that a crash left (person_media.go).
func tryLock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
