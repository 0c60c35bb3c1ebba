package ui

import (
	"strconv"
	"time"
)

// The views of the console's Backups page (backups.templ): replication's
// health and per-file state, the last sweep, the downloads, and a person's
// restore to a time with its confirmation step.

// BackupHealth is replication at a glance, on the Backups page and the
// Overview.
type BackupHealth struct {
	Off      bool // NAH_REPLICA_URL=off
	Ok       bool
	Target   string    // where the copies go, secrets masked
	LastSync time.Time // the newest copy that reached the target (zero: none yet)
	Behind   int       // files whose newest changes are not on the target yet
	Worst    time.Duration
	// Lag is the age of the oldest change people made that the target
	// lacks, files waiting to be taken up included (zero: none).
	Lag     time.Duration
	Problem string // what is wrong, as a sentence (empty when Ok)
	Raw     string // the error as the backup tool gave it, folded away
	// SameDisk: the copies are on the data's own disk, which one failure
	// would take with them.
	SameDisk bool

	SweepPlanned   bool
	NextSweep      time.Time // zero: not planned yet
	LastSweep      time.Time // the last nightly copy that succeeded in this run
	LastSweepBytes int64
}

// Backups is the Backups page.
type Backups struct {
	Page
	Off    bool   // NAH_REPLICA_URL=off: nothing is replicated
	Target string // secrets masked
	Health BackupHealth

	// Files is one page of the files replicated this run, worst first.
	Files                          []BackupFile
	FilesTotal, PageNum, PageCount int

	Sweep     *SweepRow // nil: no sweep planned (NAH_SWEEP_EVERY off)
	Sweeping  bool
	NextSweep time.Time
	// Copies are the nightly copies on the target, newest first;
	// CopiesError says why they could not be listed. Copying is the one
	// being made now (nil: none).
	Copies      []CopyRow
	CopiesError string
	Copying     *CopyProgress

	// RestoreCommand rebuilds the whole server from the target.
	RestoreCommand string
	// Syncing is the "Sync now" running (nil: none); SyncDone says how
	// the last one ended, SyncError why it failed, shown by its button.
	Syncing   *SyncProgress
	SyncDone  string
	SyncError string

	Drill *DrillView // the restore drill (nil: none)
	// Disk is the space the backup and the data take (nil: not measured
	// in this server).
	Disk *BackupDisk
}

// BackupFile is one database's replication.
type BackupFile struct {
	Path              string
	PersonID, Handle  string // empty for the directory
	Watched           bool
	Local, Replicated uint64 // transaction positions
	Lag               time.Duration
	LastSync          time.Time
	Err               string
}

// SweepRow is the last sweep (Stamp empty: none yet in this run).
type SweepRow struct {
	Stamp    string
	Started  time.Time
	Duration time.Duration
	Files    int
	Bytes    int64
	Failed   []string
	Err      string
}

// CopyRow is one nightly copy on the target.
type CopyRow struct {
	Stamp             string
	Started           time.Time
	Files, Failed     int
	Bytes             int64
	Complete, Running bool // neither: it was cut short
}

// CopyProgress is the nightly copy being made now.
type CopyProgress struct {
	Asked       bool // asked for, about to start
	Started     time.Time
	Done, Total int // databases
	Bytes       int64
	Media       bool // the databases are copied; the media follow
}

// SyncProgress is the "Sync now" running.
type SyncProgress struct {
	Running     bool
	Done, Total int // files on the target, of those to send (0: being listed)
}

// syncDoing says how far the sync running has come, in a sentence.
func syncDoing(p SyncProgress) string {
	if p.Total == 0 {
		return "Syncing: checking the target and listing the files behind."
	}
	return "Syncing: " + strconv.Itoa(p.Done) + " of " + strconv.Itoa(p.Total) + " " + plural(p.Total, "file", "files") + " sent."
}

// copyDoing says how far the copy being made has come, in a sentence.
func copyDoing(p CopyProgress) string {
	switch {
	case p.Asked:
		return "A copy is about to start."
	case p.Media:
		return "Every database is copied (" + Bytes(p.Bytes) + "); now the photos and videos new since the last copy."
	case p.Total == 0:
		return "A copy has started: listing the files."
	}
	return "Copying file " + strconv.Itoa(min(p.Done+1, p.Total)) + " of " + strconv.Itoa(p.Total) + ", " + Bytes(p.Bytes) + " so far."
}

// RestorePerson is a person's restore to a time: the confirmation step
// (Done false) and the result (Done true).
type RestorePerson struct {
	Page
	PersonID, Handle string
	At               time.Time
	Moments          int // before the restore; after it once Done
	Done             bool
	Source           string // "history" or "sweep <stamp>"
	Took             time.Duration
	UndoUntil        time.Time // until when an undo can put the replaced file back; zero: never
	// The confirmation's: the one-time ticket its button spends; the
	// earliest time the replica's history reaches (Joined: the person's
	// sign-up); the delete grace, for which the replaced file is kept.
	Ticket   string
	Earliest time.Time
	Joined   bool
	Grace    time.Duration
	// Pending is when an earlier restore, still undoable until UndoUntil,
	// kept the file it replaced: a further restore keeps that one, so an
	// undo goes back to before it. Zero: none.
	Pending time.Time
}

// UndoRestore is the confirmation step of undoing a person's restore.
type UndoRestore struct {
	Page
	PersonID, Handle string
	Moments          int // now, as restored
	Until            time.Time
	Since            time.Time // when the file an undo puts back was kept
}

// WhenT formats a time for a table, or "never".
func WhenT(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// lastFor is "4 seconds", the span of the newest changes the copy lacks,
// or "second" when it is under two.
func lastFor(d time.Duration) string {
	if d < 2*time.Second {
		return "second"
	}
	return Duration(d)
}

// behindFor is " for 4 minutes", how long the worst file has waited, or
// nothing when none has.
func behindFor(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return " for " + Duration(d)
}
