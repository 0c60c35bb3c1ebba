package app

import (
	"regexp"
	"strings"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
)

// Replication seen from outside the console: /healthz's replication field
// (public, so its errors name no person and no path) and the metrics of
// replication, retention, the nightly copy and the media mirror.

// publicError is the text of a replication or disk error as /healthz
// (public) may show it: without a person's id (their folder is people/…)
// or an absolute path (the data directory's, a local replica's).
func publicError(s string) string {
	return absPath.ReplaceAllString(hidePeople(s), "${1}…")
}

// absPath matches an absolute path and what comes before it.
var absPath = regexp.MustCompile(`(^|[\s"'(=])/[^\s:"')]+`)

// hidePeople writes every person's folder in s as people/…: whatever
// name follows nah.PeopleRel, a whole id or a cut or garbled one (an
// error may cut a path short), up to the next character no id has.
func hidePeople(s string) string {
	prefix := nah.PeopleRel + "/"
	var b strings.Builder
	for {
		i := strings.Index(s, prefix)
		if i < 0 {
			break
		}
		b.WriteString(s[:i+len(prefix)])
		s = s[i+len(prefix):]
		n := strings.IndexFunc(s, func(r rune) bool { return !idRune(r) })
		if n < 0 {
			n = len(s)
		}
		if n > 0 {
			b.WriteString("…")
			s = s[n:]
		}
	}
	b.WriteString(s)
	return b.String()
}

// idRune: a letter, digit, - or _, the characters of any id's alphabet.
func idRune(r rune) bool {
	return r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
}

// replicationHealth is /healthz's replication field (nil when off).
type replicationHealth struct {
	Status          string  `json:"status"`       // ok or behind
	FilesBehind     int     `json:"files_behind"` // queued ones included, once
	FilesQueued     int     `json:"files_queued"`
	WorstLagSeconds float64 `json:"worst_lag_seconds"` // Health.Lag
	Error           string  `json:"error,omitempty"`
	// Disk is the space the replica and the data take (console_space.go).
	Disk *diskHealth `json:"disk,omitempty"`
}

func (a *App) replicationHealth() *replicationHealth {
	if a.cfg.Backups == nil {
		return nil
	}
	h := a.cfg.Backups.Health()
	out := &replicationHealth{Status: "ok", FilesBehind: h.Behind, FilesQueued: h.Queued, WorstLagSeconds: h.Lag.Round(time.Millisecond).Seconds(), Disk: a.diskHealth()}
	if !h.Ok {
		out.Status = "behind"
		out.Error = publicError(h.LastErr)
	}
	return out
}

// replicationGauges are the metrics of replication and the sweep, empty
// when replication is off.
func (a *App) replicationGauges() []gauge {
	b := a.cfg.Backups
	if b == nil {
		return nil
	}
	h := b.Health()
	failing := 0 // counted in place: Status sorts a copy of every file's state
	b.Repl.EachStatus(func(f backup.FileStatus) {
		if f.Err != "" {
			failing++
		}
	})
	healthy := 0.0
	if h.Ok {
		healthy = 1
	}
	gs := []gauge{
		{"nah_replica_healthy", "1 while replication is in step (nothing behind by more than a minute, the last sync now did not fail), else 0.", healthy},
		{"nah_replica_files_watched", "Databases Litestream watches now.", float64(h.Watched)},
		{"nah_replica_files_behind", "Databases whose target lacks some of their transactions.", float64(h.Behind)},
		{"nah_replica_files_failing", "Databases whose last watch or final sync to the target failed.", float64(failing)},
		{"nah_replica_worst_lag_seconds", "Seconds since the database furthest behind was last in step with the target.", h.Worst.Seconds()},
		{"nah_replica_lag_seconds", "Age of the oldest acknowledged write the target lacks, files waiting to be taken up included: the replica's lag.", h.Lag.Seconds()},
	}
	rs := b.Repl.RetentionStats()
	gs = append(gs,
		gauge{"nah_retention_overdue_files", "Databases the retention policy is due to look at and has not yet (all of them until its first listing after the start).", float64(rs.Overdue)},
		gauge{"nah_retention_overdue_seconds", "How long the database overdue longest has waited for the retention policy.", rs.OverdueFor.Seconds()},
		gauge{"nah_retention_deleted_files", "LTX files the retention policy deleted from the target, since start.", float64(rs.Deleted)},
		gauge{"nah_retention_snapshots", "Snapshots the retention policy wrote to the target, since start.", float64(rs.Snapshots)},
		gauge{"nah_retention_failures", "Looks of the retention policy at a database that failed (logged), since start.", float64(rs.Failures)},
	)
	if b.Sweep != nil {
		last, _ := b.Sweep.Last()
		gs = append(gs,
			gauge{"nah_backup_sweep_duration_seconds", "How long the last nightly copy took.", last.Duration.Seconds()},
			gauge{"nah_backup_sweep_bytes", "Bytes the last nightly copy wrote.", float64(last.Bytes)},
			gauge{"nah_backup_sweep_failures", "Databases the last nightly copy could not copy.", float64(len(last.Failed))},
		)
	}
	if b.Media != nil {
		n, oldest := b.Media.Waiting()
		gs = append(gs,
			gauge{"nah_media_mirror_waiting", "People whose new media wait to be mirrored to the target (within a minute when all is well).", float64(n)},
			gauge{"nah_media_mirror_wait_seconds", "How long the person waiting longest for their media's mirror has waited.", oldest.Seconds()},
		)
	}
	return append(gs, a.diskGauges()...)
}
