package app

import (
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/ui"
)

// The space the backups take (backup.Disk) on the Backups page, in
// /healthz and in the metrics. All three read the last sample, taken in
// the background: none of them lists the target.

// backupDisk is the last sample as the console words it; nil when
// nothing measures (replication off).
func (a *App) backupDisk() *ui.BackupDisk {
	b := a.cfg.Backups
	if b == nil || b.Disk == nil {
		return nil
	}
	r := b.Disk.Report()
	d := &ui.BackupDisk{
		Measured: r.Last.At, Err: r.Err, Partial: r.Last.Partial,
		ReplicaBytes: r.Last.ReplicaBytes, SweepBytes: r.Last.SweepBytes, StateBytes: r.Last.StateBytes, DataBytes: r.Last.DataBytes,
		ReplicaFiles: r.Last.ReplicaFiles, DataFiles: r.Last.DataFiles,
		Span: r.Span(), ReplicaPerDay: r.ReplicaPerDay, HistoryPerDay: r.HistoryPerDay, DataPerDay: r.DataPerDay,
		Budget: r.Budget, OverBudget: r.OverBudget, Outgrowing: r.Outgrowing,
	}
	return d
}

// diskHealth is /healthz's replication.disk: present once measured.
type diskHealth struct {
	MeasuredAt   string `json:"measured_at"`
	ReplicaBytes int64  `json:"replica_bytes"`
	ReplicaFiles int    `json:"replica_files"`
	SweepBytes   int64  `json:"sweep_bytes"`
	StateBytes   int64  `json:"state_bytes"`
	DataBytes    int64  `json:"data_bytes"`
	Partial      bool   `json:"partial,omitempty"`
	// The growth per day, absent until an hour of samples.
	TrendHours         float64  `json:"trend_hours,omitempty"`
	ReplicaBytesPerDay *int64   `json:"replica_bytes_per_day,omitempty"`
	HistoryBytesPerDay *int64   `json:"history_bytes_per_day,omitempty"`
	DataBytesPerDay    *int64   `json:"data_bytes_per_day,omitempty"`
	BudgetBytes        int64    `json:"budget_bytes,omitempty"`
	OverBudget         bool     `json:"over_budget"`
	Outgrowing         bool     `json:"outgrowing_data"`
	Warnings           []string `json:"warnings,omitempty"`
	Error              string   `json:"error,omitempty"`
}

func (a *App) diskHealth() *diskHealth {
	d := a.backupDisk()
	if d == nil || d.Measured.IsZero() {
		return nil
	}
	h := &diskHealth{
		MeasuredAt:   d.Measured.UTC().Format(nah.TimeFormat),
		ReplicaBytes: d.ReplicaBytes, ReplicaFiles: d.ReplicaFiles, SweepBytes: d.SweepBytes,
		StateBytes: d.StateBytes, DataBytes: d.DataBytes, Partial: d.Partial,
		BudgetBytes: d.Budget, OverBudget: d.OverBudget, Outgrowing: d.Outgrowing,
		Warnings: d.Warnings(),
	}
	if d.Span > 0 {
		h.TrendHours = (d.Span.Round(time.Minute)).Hours()
		h.ReplicaBytesPerDay, h.HistoryBytesPerDay, h.DataBytesPerDay = &d.ReplicaPerDay, &d.HistoryPerDay, &d.DataPerDay
	}
	if d.Err != "" {
		h.Error = publicError(d.Err)
	}
	return h
}

// diskGauges are the space metrics, once measured.
func (a *App) diskGauges() []gauge {
	d := a.backupDisk()
	if d == nil || d.Measured.IsZero() {
		return nil
	}
	bit := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gs := []gauge{
		{"nah_replica_bytes", "Bytes on the replica target (Litestream's histories, the media mirror and the nightly copies), at the last measurement.", float64(d.ReplicaBytes)},
		{"nah_replica_files", "Files (keys) on the replica target, at the last measurement.", float64(d.ReplicaFiles)},
		{"nah_replica_sweep_bytes", "Bytes of the nightly copies on the replica target (part of nah_replica_bytes).", float64(d.SweepBytes)},
		{"nah_replica_state_bytes", "Bytes of replication's local state under the data directory (replication/).", float64(d.StateBytes)},
		{"nah_data_bytes", "Bytes of the live data: databases and media, replication's state left out.", float64(d.DataBytes)},
		{"nah_replica_measured_age_seconds", "Seconds since the sizes were last measured (every few minutes in the background).", time.Since(d.Measured).Seconds()},
		{"nah_replica_over_budget", "1 while the replica holds more than NAH_REPLICA_BUDGET, else 0 (always 0 without a budget).", bit(d.OverBudget)},
		{"nah_replica_outgrowing_data", "1 while the replica, nightly copies left out, grew over the last day by more than the live data did (and by 1 MiB at least), else 0.", bit(d.Outgrowing)},
	}
	if d.Budget > 0 {
		gs = append(gs, gauge{"nah_replica_budget_bytes", "NAH_REPLICA_BUDGET in bytes.", float64(d.Budget)})
	}
	if d.Span > 0 {
		gs = append(gs,
			gauge{"nah_replica_growth_bytes_per_day", "Growth of the replica per day, over the last day (or the time measured, from an hour).", float64(d.ReplicaPerDay)},
			gauge{"nah_data_growth_bytes_per_day", "Growth of the live data per day, over the same span.", float64(d.DataPerDay)},
		)
	}
	return gs
}
