package backup_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/internal/testdisk"
)

// TestDirTargetReadOnly: the replica directory (another disk) turns
// read-only mid-run and writable again (targetAwayAndBack). chmod would not
// do as root, so the directory is a small tmpfs of its own, remounted.
func TestDirTargetReadOnly(t *testing.T) {
	dir := testdisk.Mount(t, "64m")
	tg, err := backup.ParseTarget(dir, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	remount := func(flags uintptr) {
		t.Helper()
		var err error
		for range 100 { // a file Litestream is writing keeps it busy for a moment
			if err = syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT|flags, "size=64m,mode=0700"); !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("remount %s: %v", dir, err)
		}
	}
	targetAwayAndBack(t, tg, func() { remount(syscall.MS_RDONLY) }, func() { remount(0) })
}
