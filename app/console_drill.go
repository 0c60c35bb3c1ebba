package app

import (
	"fmt"
	"net/http"
	"time"

	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/ui"
)

// The restore drill (backup/drill.go) in the console, /healthz and the
// metrics: its last result in a sentence, its failures by person, and a
// button that runs one now. The drill itself runs in the background.

func (a *App) drill() *backup.Drill {
	if a.cfg.Backups == nil {
		return nil
	}
	return a.cfg.Backups.Drill
}

// drillView is the last drill for the Backups page and the Overview (nil:
// no drill).
func (a *App) drillView() *ui.DrillView {
	d := a.drill()
	if d == nil {
		return nil
	}
	last, _, running := d.Last()
	v := &ui.DrillView{Running: running, Every: "only when asked (NAH_DRILL_EVERY=off)"}
	if d.Every > 0 {
		v.Every = "every " + ui.Duration(d.Every)
	}
	switch {
	case last == nil && running:
		v.Line = "The first restore drill is running."
	case last == nil:
		v.Line = "No restore drill yet."
	default:
		ago := a.now().Sub(last.Started.Add(last.Took))
		v.Line = fmt.Sprintf("Last drill %s ago: %s.", agoText(ago), last.Summary())
		if running {
			v.Line += " Another is running now."
		}
		v.Failed = !last.Passed()
		for _, f := range last.Failures {
			v.Failures = append(v.Failures, ui.DrillFailureRow{Who: f.Who, What: f.What, Evidence: f.Evidence})
		}
	}
	return v
}

// agoText is a duration as people say it: "40 seconds", "2 hours".
func agoText(d time.Duration) string {
	unit := func(n int64, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	switch {
	case d < time.Minute:
		return unit(int64(max(d, 0)/time.Second), "second")
	case d < time.Hour:
		return unit(int64(d/time.Minute), "minute")
	case d < 48*time.Hour:
		return unit(int64(d/time.Hour), "hour")
	}
	return unit(int64(d/(24*time.Hour)), "day")
}

// handleDrillNow is "Run a drill now": one drill at a time, in the
// background; the page says it started, and its section shows the result
// when the drill ends (ui.DrillSection asks again while it runs).
func (a *App) handleDrillNow(w http.ResponseWriter, r *http.Request) {
	d := a.drill()
	if d == nil {
		a.consoleError(w, r, page(r, "Backups", "backups"), backupsOff())
		return
	}
	started := d.Start()
	v, err := a.backupsView(r)
	if err != nil {
		a.consoleError(w, r, v.Page, err)
		return
	}
	if started {
		v.Flash = "A restore drill started: its result shows below when it ends (without JavaScript, reload this page)."
		if v.Drill != nil {
			v.Drill.Running = true
		}
	} else {
		v.Flash = "A restore drill is already running: one at a time."
	}
	a.render(w, r, http.StatusOK, ui.BackupsPage(v))
}

// drillHealth is /healthz's restore_drill field: "failed" from a drill
// that found a file not restoring to its live state until one passes,
// else "ok" ("" without a drill).
func (a *App) drillHealth() string {
	d := a.drill()
	if d == nil {
		return ""
	}
	if d.Failing() {
		return "failed"
	}
	return "ok"
}

// drillGauges are the drill's metrics.
func (a *App) drillGauges() []gauge {
	d := a.drill()
	if d == nil {
		return nil
	}
	last, passed, running := d.Last()
	var took, files, failures float64
	if last != nil {
		took, files, failures = last.Took.Seconds(), float64(last.Files()), float64(len(last.Failures))
		if last.Err != "" {
			failures++
		}
	}
	var ok, run float64
	if !passed.IsZero() {
		ok = float64(passed.Unix())
	}
	if running {
		run = 1
	}
	return []gauge{
		{"nah_drill_last_success_timestamp_seconds", "When the last restore drill that found every file equal ended (Unix time; 0: none yet).", ok},
		{"nah_drill_duration_seconds", "How long the last restore drill took.", took},
		{"nah_drill_files_checked", "Databases the last restore drill restored and compared.", files},
		{"nah_drill_failures", "Files the last restore drill found not restoring to their live state.", failures},
		{"nah_drill_running", "1 while a restore drill runs.", run},
	}
}
