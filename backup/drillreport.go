package backup

import (
	"fmt"
	"time"
)

// What a drill reports (drill.go).

// DrillReport is one drill's result.
type DrillReport struct {
	Started   time.Time      `json:"started"`
	Took      time.Duration  `json:"took"`
	People    int            `json:"people"`    // person files restored
	Equal     int            `json:"equal"`     // of them, sound and equal to the live file
	Directory string         `json:"directory"` // the directory's outcome: equal, failed, deferred, or "" (not checked)
	Deferred  []string       `json:"deferred,omitempty"`
	Failures  []DrillFailure `json:"failures,omitempty"`
	Sweep     string         `json:"sweep,omitempty"` // the sweep whose copies were checked
	SweepOK   int            `json:"sweep_ok"`
	Media     int            `json:"media"` // media files compared, and equal
	MediaOK   int            `json:"media_ok"`
	Err       string         `json:"err,omitempty"` // the drill could not run at all
}

// DrillFailure is one file that did not restore to its live state.
type DrillFailure struct {
	Rel      string `json:"rel"`
	Who      string `json:"who"`  // "alice (people/<id>/person.db)" or "the directory"
	What     string `json:"what"` // one sentence
	Evidence string `json:"evidence,omitempty"`
}

// Files is how many databases the drill restored.
func (r DrillReport) Files() int {
	n := r.People
	if r.Directory != "" {
		n++
	}
	return n
}

// Passed says whether the drill ran and found nothing wrong.
func (r DrillReport) Passed() bool { return r.Err == "" && len(r.Failures) == 0 }

// Summary is the drill in a line: "37 of 37 people restored and equal,
// took 4 s".
func (r DrillReport) Summary() string {
	if r.Err != "" {
		return "the drill could not run: " + r.Err
	}
	s := fmt.Sprintf("%d of %d %s restored and equal", r.Equal, r.People, plural(int64(r.People), "person", "people"))
	switch r.Directory {
	case "equal":
		s += ", the directory too"
	case "failed":
		s += ", the directory not"
	case "deferred":
		s += ", the directory written throughout (compared next time)"
	}
	if r.Sweep != "" {
		s += fmt.Sprintf(", %d sweep %s sound", r.SweepOK, plural(int64(r.SweepOK), "copy", "copies"))
	}
	if r.Media > 0 {
		s += fmt.Sprintf(", %d of %d media equal", r.MediaOK, r.Media)
	}
	if n := len(r.Deferred); n > 0 {
		s += fmt.Sprintf(", %d still being written or replicated (compared next time)", n)
	}
	if n := len(r.Failures); n > 0 {
		s += fmt.Sprintf(", %d %s", n, plural(int64(n), "failure", "failures"))
	}
	return s + ", took " + roundTook(r.Took)
}

func roundTook(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%d s", int(d.Round(time.Second).Seconds()))
}
