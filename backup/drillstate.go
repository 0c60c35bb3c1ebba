package backup

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"
)

// The drill's saved state: when each file was last found equal, and the
// last report (drill.go).

// drillState is state.json: the rotation and the last results, kept
// across restarts so that a server restarted often still drills everyone
// weekly and a failure stays reported until a drill passes. Bounded by the
// number of databases.
type drillState struct {
	Checked    map[string]time.Time `json:"checked"` // when each file last restored equal
	Failing    []string             `json:"failing,omitempty"`
	Last       *DrillReport         `json:"last,omitempty"`
	LastPassed time.Time            `json:"last_passed,omitzero"`
}

func (d *Drill) statePath() string { return filepath.Join(d.Dir, "state.json") }

// load reads state.json once; under d.mu.
func (d *Drill) load() {
	if d.loaded {
		return
	}
	d.loaded = true
	d.st = drillState{}
	if b, err := os.ReadFile(d.statePath()); err == nil {
		if err := json.Unmarshal(b, &d.st); err != nil && d.Log != nil {
			d.Log.Warn("restore drill: state.json unreadable, starting the rotation afresh", "err", err)
		}
	}
	if d.st.Checked == nil {
		d.st.Checked = map[string]time.Time{}
	}
}

func (d *Drill) save() error {
	b, err := json.Marshal(d.st)
	if err != nil {
		return err
	}
	tmp := d.statePath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, d.statePath())
}

// Last is the newest drill's report (nil before the first), when a drill
// last passed, and whether one runs now or Start asked for one (so that a
// page shown just after Start waits for its result).
func (d *Drill) Last() (last *DrillReport, passed time.Time, running bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.load()
	if d.st.Last != nil {
		r := *d.st.Last
		last = &r
	}
	return last, d.st.LastPassed, d.running || d.asked
}

// Failing says whether the newest drill found a file that does not restore
// (health is degraded until a drill passes).
func (d *Drill) Failing() bool {
	last, _, _ := d.Last()
	return last != nil && !last.Passed()
}
