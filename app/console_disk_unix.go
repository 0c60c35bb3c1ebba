//go:build unix

package app

import (
	"os"
	"syscall"
)

// sameDisk says whether two folders are on one file system (the same
// device number), so that one disk's failure would take both. A folder
// that cannot be read says no: the page then shows that error instead.
func sameDisk(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false
	}
	da, ok := sa.Sys().(*syscall.Stat_t)
	db, ok2 := sb.Sys().(*syscall.Stat_t)
	return ok && ok2 && da.Dev == db.Dev
}
