package backup

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The evidence a failed drill keeps under failed/ (drill.go).

// keep moves the scratch copy of a failed file (if any, and not larger
// than drillEvidenceBytes) with a note of what failed to failed/, keeping
// the newest drillKeepEvidence, and says where.
func (d *Drill) keep(rel, copyPath, what string) string {
	dir := filepath.Join(d.Dir, "failed")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ""
	}
	base := time.Now().UTC().Format(stampFormat) + "-" + strings.NewReplacer("/", "_", ".db", "").Replace(rel)
	note := rel + ": " + what + "\n"
	if copyPath != "" {
		if st, err := os.Stat(copyPath); err == nil && st.Size() <= drillEvidenceBytes {
			if os.Rename(copyPath, filepath.Join(dir, base+".db")) == nil {
				note += "restored copy: " + base + ".db\n"
			}
		}
	}
	os.WriteFile(filepath.Join(dir, base+".txt"), []byte(note), 0o600)
	es, _ := os.ReadDir(dir)
	var notes []string
	for _, e := range es {
		if strings.HasSuffix(e.Name(), ".txt") {
			notes = append(notes, strings.TrimSuffix(e.Name(), ".txt"))
		}
	}
	sort.Strings(notes)
	for len(notes) > drillKeepEvidence {
		os.Remove(filepath.Join(dir, notes[0]+".txt"))
		os.Remove(filepath.Join(dir, notes[0]+".db"))
		notes = notes[1:]
	}
	return filepath.Join(dir, base+".txt")
}

func removeScratch(p string) {
	for _, s := range []string{"", "-wal", "-shm", "-txid", ".tmp"} {
		os.Remove(p + s)
	}
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
