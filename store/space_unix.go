//go:build linux || darwin || freebsd

package store

import "syscall"

// lowOnSpace reports whether the file system of dir has less than lowSpace
// bytes, or no inode, left for this process; false when it cannot tell.
func lowOnSpace(dir string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false
	}
	return uint64(st.Bavail)*uint64(st.Bsize) < lowSpace || st.Files > 0 && st.Ffree == 0
}
