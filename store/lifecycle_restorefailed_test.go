package store

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// TestRestoreFailedMarker: a person whose file nah restore could not
// restore is listed as needing attention from the start, with the
// restore's sentence, not as missing: they get storage_unavailable, bob's
// feed goes on without them and nothing writes to the placeholder. A
// sound file put in its place heals them and takes the marker away.
func TestRestoreFailedMarker(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := MustOpen(t, Config{Dir: dir, HeadCacheBytes: -1})
	ann, bob := mustPerson(t, s, "ann"), mustPerson(t, s, "bob")
	if err := s.ImportConnections(ctx, [][2]string{{ann.ID, bob.ID}}, 1); err != nil {
		t.Fatal(err)
	}
	var bobs []string
	for i := range 3 {
		if _, err := s.CreateMoment(ctx, ann.ID, []byte{'a', byte(i)}); err != nil {
			t.Fatal(err)
		}
		m, err := s.CreateMoment(ctx, bob.ID, []byte{'b', byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		bobs = append([]string{m.ID}, bobs...)
		time.Sleep(2 * time.Millisecond) // the feed orders by time: two in one millisecond sort by their random ids
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "people", ann.ID, "person.db")
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	why := "the history does not restore to a sound database (integrity check: wrong # of entries in index moments_time)"
	if err := MarkRestoreFailed(dir, ann.ID, why); err != nil {
		t.Fatal(err)
	}
	if err := MarkRestoreFailed(dir, nah.NewPersonID(), "someone the directory does not know"); err != nil {
		t.Fatal(err)
	}

	s = MustOpen(t, Config{Dir: dir, HeadCacheBytes: -1})
	listed := func(when string) {
		t.Helper()
		ps := s.FileProblems()
		if len(ps) != 1 || ps[0].PersonID != ann.ID || !strings.Contains(ps[0].Problem, "nah restore could not restore it") || !strings.Contains(ps[0].Problem, why) || s.Stats().UnreadableFiles != 1 {
			t.Fatalf("%s: problems %+v, want ann's with the restore's sentence", when, ps)
		}
	}
	listed("at start")
	_, err = s.MomentCount(ctx, ann.ID)
	wantStorageUnavailable(t, "ann's moment count", err)
	_, err = s.CreateMoment(ctx, ann.ID, []byte("hi"))
	wantStorageUnavailable(t, "ann's post", err)
	if got, err := feedIDs(t, s, bob.ID, true, 30); err != nil || !slices.Equal(got, bobs) {
		t.Fatalf("bob's feed: %v %v, want his own %v", got, err, bobs)
	}
	listed("after use")
	if b, _ := os.ReadFile(path); string(b) != placeholder {
		t.Errorf("the placeholder was written to: %q", b)
	}

	if err := os.WriteFile(path+".new", good, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	if n, err := s.MomentCount(ctx, ann.ID); err != nil || n != 3 {
		t.Fatalf("after the repair: %d moments, %v", n, err)
	}
	if ps := s.FileProblems(); len(ps) != 0 || RestoreFailed(dir, ann.ID) {
		t.Errorf("after the repair: problems %+v, marker left %v", ps, RestoreFailed(dir, ann.ID))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = MustOpen(t, Config{Dir: dir, HeadCacheBytes: -1})
	if ps := s.FileProblems(); len(ps) != 0 {
		t.Errorf("after a restart: problems %+v", ps)
	}
}
