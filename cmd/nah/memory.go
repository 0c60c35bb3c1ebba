package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/app"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
)

// The memory plan splits NAH_MEMORY_LIMIT, in this order (docs/design.md, "The memory plan"):
//   - SQLite, outside the Go heap (store.SQLiteMemoryBound); GOMEMLIMIT is the rest;
//   - the head cache, and half again for the collector at GOGC 50;
//   - a base of 40 MB: runtime, graph (6 MB for 10,000 people), caches, metrics;
//   - replication: backup.PerFileBytes a watched file, and backup.DrillBytes;
//   - connections: app.ConnectionBytes each, and the redirect listener's 64;
//   - the rest is the requests' budget (app/budget.go); past it, 503.
const (
	// defaultMemoryLimit leaves 25 MiB for requests and 65 MB of the 400 MB
	// limit for the kernel's view (stacks, socket buffers, allocator slack).
	defaultMemoryLimit = 320 << 20
	memoryBase         = 40 << 20
	minRequestBudget   = 16 << 20
)

// With NAH_MAX_OPEN_FILES=auto, the default, the open-file bound is what
// the plan leaves after every other share and the requests' reserve, in
// steps of 64: 1,024 at 320 MiB, so that on people-1k no post opens or
// closes a file, the dearest part of a post that does (bench/THRESHOLDS.md,
// "The open-file bound from the memory plan").
const (
	requestReserve = 24 << 20
	minAutoFiles   = 64
)

// plan splits MemoryLimit as above.
func (c *config) plan() error {
	heads := max(c.Store.HeadCacheBytes, 0)
	conns := int64(c.MaxConnections) * app.ConnectionBytes
	if c.HTTPAddr != "" {
		conns += app.RedirectMaxConnections * app.ConnectionBytes
	}
	var repl int64
	if c.ReplicaTarget != nil {
		repl = int64(c.ReplicaMaxFiles)*backup.PerFileBytes + backup.DrillBytes
	}
	if c.Store.MaxOpenFiles == 0 {
		// The reserve holds the largest page too (the check below).
		reserve := max(requestReserve, 2*int64(nah.FeedPageMax)*int64(c.App.MaxMomentBytes)*4/3)
		n := store.FilesWithin(c.MemoryLimit-heads*3/2-memoryBase-conns-repl-reserve) / 64 * 64
		c.Store.MaxOpenFiles = min(max(n, minAutoFiles), 100_000)
		c.setSetting("NAH_MAX_OPEN_FILES", fmt.Sprintf("auto: %d", c.Store.MaxOpenFiles))
	}
	sqlite := store.SQLiteMemoryBound(c.Store.MaxOpenFiles)
	c.GoMemoryLimit = c.MemoryLimit - sqlite
	c.App.MemoryBudget = c.GoMemoryLimit - heads*3/2 - memoryBase - conns - repl
	if c.App.MemoryBudget < minRequestBudget {
		need := sqlite + heads*3/2 + memoryBase + conns + repl + minRequestBudget
		return fmt.Errorf("too small for NAH_MAX_OPEN_FILES=%d, NAH_HEAD_CACHE_MB=%d, NAH_MAX_CONNECTIONS=%d and NAH_REPLICA_MAX_FILES=%d: want at least %dMiB, or fewer files, connections or a smaller head cache",
			c.Store.MaxOpenFiles, heads>>20, c.MaxConnections, c.ReplicaMaxFiles, (need+1<<20-1)>>20)
	}
	// The largest page, 100 moments of the largest size read from files,
	// is charged twice its bodies (app/budget.go) and must fit in the bulk
	// share, three quarters of the budget, or it would be refused forever.
	if page := 2 * int64(nah.FeedPageMax) * int64(c.App.MaxMomentBytes); page > c.App.MemoryBudget*3/4 {
		return fmt.Errorf("too small for NAH_MAX_MOMENT_BYTES=%d: a page of %d such moments needs %dMiB of the %dMiB left for requests; raise the limit or lower the moment size",
			c.App.MaxMomentBytes, nah.FeedPageMax, page>>20, (c.App.MemoryBudget*3/4)>>20)
	}
	return nil
}

// The kernel's memory limit. Under systemd (MemoryMax=, which `nah
// service` sets) or in a container (--memory), the process's cgroup has a
// limit past which the kernel kills it. NAH_MEMORY_LIMIT must sit below
// it, far enough that what the server does not count (goroutine stacks,
// socket buffers, the allocator's slack) fits in between: otherwise the
// kernel kills the server before it sheds load. The server reports both at
// start (memory_limit and cgroup_memory_max in the "nah started" line) and
// warns when NAH_MEMORY_LIMIT is over memoryShareOfCgroup of the cgroup's.

// memoryShareNum/memoryShareDen is the largest share of the cgroup's
// limit that NAH_MEMORY_LIMIT may be without a warning: 4/5, the share
// TestSlowReadersInA400MBCgroup runs under (the default 320 MiB in a
// 400 MiB cgroup, where 60 slow readers of the largest page must be shed
// with 503, not killed by the kernel), and the share `nah service` writes.
const (
	memoryShareNum = 4
	memoryShareDen = 5
)

// cgroupMemoryMax returns the memory limit of the cgroup the process runs
// in: the least of its own and its ancestors', from cgroup v2's memory.max
// or v1's memory.limit_in_bytes. ok is false when there is none or it
// cannot be read.
func cgroupMemoryMax() (limit int64, ok bool) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	return cgroupLimit(string(self), "/sys/fs/cgroup")
}

// cgroupLimit is cgroupMemoryMax with /proc/self/cgroup's text and the
// cgroup file system's mount point given.
func cgroupLimit(self, root string) (int64, bool) {
	var dir, file string
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		// v2, one hierarchy: "0::/system.slice/nah.service".
		for line := range strings.SplitSeq(self, "\n") {
			if rest, ok := strings.CutPrefix(line, "0::"); ok {
				dir, file = filepath.Join(root, rest), "memory.max"
			}
		}
	} else {
		// v1 (or hybrid): the memory controller's own hierarchy,
		// "4:memory:/system.slice/nah.service".
		for line := range strings.SplitSeq(self, "\n") {
			if f := strings.SplitN(line, ":", 3); len(f) == 3 && strings.Contains(","+f[1]+",", ",memory,") {
				dir, file = filepath.Join(root, "memory", f[2]), "memory.limit_in_bytes"
			}
		}
	}
	if dir == "" {
		return 0, false
	}
	// In a container with its own cgroup namespace the path is "/" and
	// the mount is the container's own cgroup; walking up to the mount
	// point covers both that and the host's view.
	limit := int64(0)
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, file)); err == nil {
			// v2 says "max" for none, v1 a number near 2^63.
			if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && n < 1<<62 && (limit == 0 || n < limit) {
				limit = n
			}
		}
		if len(d) <= len(root) {
			break
		}
	}
	return limit, limit > 0
}

// cgroupReport is the cgroup's limit for the log: bytes, or "none".
func cgroupReport(limit int64, ok bool) any {
	if !ok {
		return "none"
	}
	return limit
}

// checkMemoryLimit warns when NAH_MEMORY_LIMIT leaves the cgroup's limit
// too little room (see above).
func checkMemoryLimit(log *slog.Logger, memoryLimit, cgroupMax int64, ok bool) {
	if ok && memoryLimit > cgroupMax/memoryShareDen*memoryShareNum {
		log.Warn("NAH_MEMORY_LIMIT is over 4/5 of the cgroup's memory limit (systemd's MemoryMax): the kernel may kill the server before it sheds load; lower NAH_MEMORY_LIMIT or raise MemoryMax (nah service writes the two to agree)",
			"memory_limit", memoryLimit, "cgroup_memory_max", cgroupMax)
	}
}
