package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// DiskSync is what a sync of a growing file cost on the run's disk just
// before the server started. nah at NAH_SYNC=full syncs its WAL at every
// post and PocketBase does not, so their ratio moves with it: 72 against
// 28 µs of CPU a sync took it from 1.44x to 1.0-1.3x (bench/THRESHOLDS.md,
// "What a sync costs").
type DiskSync struct {
	CPUus  float64 `json:"cpu_us"`  // the syncing thread's CPU, a sync
	WallUs float64 `json:"wall_us"` // wall time, a sync
}

// Sync probe: syncFiles files of a WAL's size class, each appended
// syncBytes (a post's three pages) and synced syncRounds times, in turn.
const (
	syncFiles  = 50
	syncRounds = 40
	syncBytes  = 12 << 10
)

// probeSync measures an fdatasync of a growing file in a temporary folder
// made in dir (on the data's file system), removed after.
func probeSync(dir string) (*DiskSync, error) {
	tmp, err := os.MkdirTemp(dir, "nah-bench-sync")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	files := make([]*os.File, syncFiles)
	for i := range files {
		if files[i], err = os.Create(filepath.Join(tmp, fmt.Sprint(i))); err != nil {
			return nil, err
		}
		defer files[i].Close()
	}
	runtime.LockOSThread() // the CPU clock below is this thread's
	defer runtime.UnlockOSThread()
	buf := make([]byte, syncBytes)
	var cpu, wall time.Duration
	for range syncRounds {
		for _, f := range files {
			if _, err := f.Write(buf); err != nil {
				return nil, err
			}
			c0, w0 := threadCPU(), time.Now()
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				return nil, err
			}
			wall += time.Since(w0)
			cpu += threadCPU() - c0
		}
	}
	n := float64(syncFiles * syncRounds)
	return &DiskSync{CPUus: float64(cpu.Microseconds()) / n, WallUs: float64(wall.Microseconds()) / n}, nil
}

// threadCPU is the calling thread's CPU time so far.
func threadCPU() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}
