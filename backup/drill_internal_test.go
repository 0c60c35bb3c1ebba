package backup

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDrillSampleChecksTheOldestFirst: with more people than one drill
// restores (200, drilled every 6 h: 50 a drill), the sample is the
// people checked longest ago, so that nobody waits past a week.
func TestDrillSampleChecksTheOldestFirst(t *testing.T) {
	d := &Drill{Every: 6 * time.Hour}
	now := time.Now()
	all := []string{DirectoryRel}
	checked := map[string]time.Time{}
	for i := range 200 {
		rel := fmt.Sprintf("people/p%03d/person.db", i)
		all = append(all, rel)
		checked[rel] = now.Add(-time.Duration(i) * 30 * time.Minute) // p199 checked longest ago, 99.5 h
	}
	got := d.sample(all, checked, nil, now)
	if len(got) != 1+drillMinSample || got[0] != DirectoryRel {
		t.Fatalf("sample of %d: %d files, first %q; want the directory and %d people", len(all), len(got), got[0], drillMinSample)
	}
	for i, rel := range got[1:] {
		if want := fmt.Sprintf("people/p%03d/person.db", 199-i); rel != want {
			t.Fatalf("sample's person %d is %s (checked %v ago), want %s, checked longest ago", i, rel, now.Sub(checked[rel]), want)
		}
	}
}

// TestDrillKeepsTheNoteJustWritten: with failed/ full of older evidence,
// a new failure's note is kept and the oldest goes.
func TestDrillKeepsTheNoteJustWritten(t *testing.T) {
	d := &Drill{Dir: t.TempDir()}
	failed := filepath.Join(d.Dir, "failed")
	if err := os.MkdirAll(failed, 0o700); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-24 * time.Hour)
	for i := range drillKeepEvidence {
		name := old.Add(time.Duration(i)*time.Minute).UTC().Format(stampFormat) + "-people_old_person.txt"
		if err := os.WriteFile(filepath.Join(failed, name), []byte("old\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	note := d.keep("people/new/person.db", "", "does not restore")
	if b, err := os.ReadFile(note); err != nil || !strings.Contains(string(b), "does not restore") {
		t.Fatalf("the note just written (%s): %q, %v", note, b, err)
	}
	es, _ := os.ReadDir(failed)
	if len(es) != drillKeepEvidence {
		t.Errorf("%d notes kept, want %d", len(es), drillKeepEvidence)
	}
	if _, err := os.Stat(filepath.Join(failed, old.UTC().Format(stampFormat)+"-people_old_person.txt")); err == nil {
		t.Error("the oldest note was kept")
	}
}
