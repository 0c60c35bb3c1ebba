package ui

import (
	"testing"
	"time"
)

// TestBackupDiskWords: counts with a comma every three digits, and the
// summary's cases a page rarely shows in the other tests: a listing cut
// short (lower bounds, no growth) and a backup that shrank.
func TestBackupDiskWords(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 3400: "3,400", 250000: "250,000", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := Count(n); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
	at := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		d    BackupDisk
		want string
	}{
		{BackupDisk{Measured: at, Partial: true, ReplicaBytes: 3 << 30, ReplicaFiles: 250000, DataBytes: 1 << 30, StateBytes: 1 << 20},
			"The backup holds at least 3.0 GiB in at least 250,000 files; your data holds at least 1.0 GiB. Replication's own records beside the data take at least 1.0 MiB. There are too many files to count them all every few minutes, so no growth is worked out."},
		{BackupDisk{Measured: at, ReplicaBytes: 1 << 30, ReplicaFiles: 3400, SweepBytes: 300 << 20, DataBytes: 800 << 20, StateBytes: 2 << 20, Span: 24 * time.Hour, ReplicaPerDay: -(5 << 20), DataPerDay: 5 << 20, Budget: 2 << 30},
			"The backup holds 1.0 GiB in 3,400 files (300.0 MiB of it nightly copies), shrinking 5.0 MiB a day; your data holds 800.0 MiB and grows 5.0 MiB a day. Replication's own records beside the data take 2.0 MiB. The budget is 2.0 GiB."},
		{BackupDisk{Measured: at, ReplicaBytes: 1 << 30, ReplicaFiles: 1, DataBytes: 1 << 20, Span: 90 * time.Minute, ReplicaPerDay: 100 << 20, Budget: 2 << 30},
			"The backup holds 1.0 GiB in 1 file, growing 100.0 MiB a day (measured over 90 minutes); your data holds 1.0 MiB and is not growing. Replication's own records beside the data take 0 B. The budget is 2.0 GiB: at this pace it reaches it in about 10 days."},
	} {
		if got := c.d.Summary(); got != c.want {
			t.Errorf("Summary:\n got %q\nwant %q", got, c.want)
		}
	}
}
