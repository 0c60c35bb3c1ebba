package ui

import (
	"strconv"
	"strings"
	"time"
)

// BackupDisk is what the backups take, from the last background sample
// (backup.Disk): the Backups page's "Space" and /healthz's warnings.
type BackupDisk struct {
	Measured time.Time // zero: not measured yet
	Err      string    // why the last measurement failed, if it did
	// Partial: a listing stopped at its bound, so counts are lower bounds
	// and there is no growth.
	Partial                                  bool
	ReplicaBytes, SweepBytes, StateBytes     int64
	DataBytes                                int64
	ReplicaFiles, DataFiles                  int
	Span                                     time.Duration // of the growth; 0: none yet
	ReplicaPerDay, HistoryPerDay, DataPerDay int64
	Budget                                   int64 // 0: none
	OverBudget, Outgrowing                   bool
}

// Summary says how much the backup and the data hold and how fast they
// grow, in a few sentences.
func (d BackupDisk) Summary() string {
	if d.Measured.IsZero() {
		return "The backup's size is not measured yet: that happens in the background a few seconds after the server starts, then every few minutes."
	}
	more := ""
	if d.Partial {
		more = "at least "
	}
	var b strings.Builder
	b.WriteString("The backup holds " + more + Bytes(d.ReplicaBytes) + " in " + more + Count(d.ReplicaFiles) + " " + plural(d.ReplicaFiles, "file", "files"))
	if d.SweepBytes > 0 {
		b.WriteString(" (" + Bytes(d.SweepBytes) + " of it nightly copies)")
	}
	if d.Span > 0 {
		b.WriteString(", " + growing(d.ReplicaPerDay) + over(d.Span) + "; your data holds " + Bytes(d.DataBytes) + " and " + grows(d.DataPerDay) + ".")
	} else {
		b.WriteString("; your data holds " + more + Bytes(d.DataBytes) + ".")
	}
	b.WriteString(" Replication's own records beside the data take " + more + Bytes(d.StateBytes) + ".")
	if d.Partial {
		b.WriteString(" There are too many files to count them all every few minutes, so no growth is worked out.")
	} else if d.Span == 0 {
		b.WriteString(" How fast they grow shows after an hour of measurements.")
	}
	if d.Budget > 0 && !d.OverBudget {
		b.WriteString(" The budget is " + Bytes(d.Budget) + untilBudget(d) + ".")
	}
	return b.String()
}

// OverBudgetWords is the warning of a backup over NAH_REPLICA_BUDGET.
func (d BackupDisk) OverBudgetWords() string {
	if !d.OverBudget {
		return ""
	}
	return "The backup holds " + Bytes(d.ReplicaBytes) + ", over its budget of " + Bytes(d.Budget) + " (NAH_REPLICA_BUDGET). Make room where it is kept, or raise the budget if the disk can take it."
}

// OutgrowingWords is the warning of a backup that grew faster than the
// data over the last day.
func (d BackupDisk) OutgrowingWords() string {
	if !d.Outgrowing {
		return ""
	}
	return "Over the last day the backup grew by " + Bytes(d.HistoryPerDay) + " (nightly copies left out), more than your data did (" + signed(d.DataPerDay) + "). " +
		"History older than NAH_RETENTION is pruned; if this goes on for days, pruning is behind (the logs say why) and the backup grows until its disk is full."
}

// Warnings are the warnings in words, for /healthz.
func (d BackupDisk) Warnings() []string {
	var out []string
	for _, w := range []string{d.OverBudgetWords(), d.OutgrowingWords()} {
		if w != "" {
			out = append(out, w)
		}
	}
	return out
}

// growing is "growing 40.0 MiB a day", "shrinking …" or "not growing".
func growing(perDay int64) string {
	switch {
	case perDay > 0:
		return "growing " + Bytes(perDay) + " a day"
	case perDay < 0:
		return "shrinking " + Bytes(-perDay) + " a day"
	}
	return "not growing"
}

// grows is "grows 5.0 MiB a day", "shrinks …" or "is not growing".
func grows(perDay int64) string {
	switch {
	case perDay > 0:
		return "grows " + Bytes(perDay) + " a day"
	case perDay < 0:
		return "shrinks " + Bytes(-perDay) + " a day"
	}
	return "is not growing"
}

// signed is a size that may be negative: "5.0 MiB", "-2.0 KiB".
func signed(n int64) string {
	if n < 0 {
		return "-" + Bytes(-n)
	}
	return Bytes(n)
}

// over is " (measured over 5h)" when the growth is from less than a day.
func over(span time.Duration) string {
	if span >= 24*time.Hour {
		return ""
	}
	if span < 2*time.Hour {
		m := int(span.Round(time.Minute) / time.Minute)
		return " (measured over " + strconv.Itoa(m) + " " + plural(m, "minute", "minutes") + ")"
	}
	return " (measured over " + strconv.Itoa(int(span.Round(time.Hour)/time.Hour)) + " hours)"
}

// untilBudget is ": at this pace it reaches it in about 12 days", or
// nothing when it is not growing or that is more than a year away.
func untilBudget(d BackupDisk) string {
	if d.Span == 0 || d.ReplicaPerDay <= 0 {
		return ""
	}
	days := (d.Budget - d.ReplicaBytes) / d.ReplicaPerDay
	switch {
	case days > 365:
		return ""
	case days < 1:
		return ": at this pace it reaches it within a day"
	}
	return ": at this pace it reaches it in about " + Count(int(days)) + " " + plural(int(days), "day", "days")
}

// Count is n with a comma every three digits: 3,400.
func Count(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
