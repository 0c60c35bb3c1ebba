package store

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// TestHideWaitsForTheFileInUse: Hide returns only once the file a request
// still holds is closed and its WAL empty, since a delete or a restore
// moves the folder next: an open handle would write into the moved file.
func TestHideWaitsForTheFileInUse(t *testing.T) {
	s := MustOpen(t, Config{})
	ctx := context.Background()
	ann := mustPerson(t, s, "ann")
	if _, err := s.CreateMoment(ctx, ann.ID, []byte("in the WAL")); err != nil {
		t.Fatal(err)
	}
	f, err := s.files.Acquire(ctx, ann.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	hidden := make(chan struct{})
	go func() { s.files.Hide(ann.ID); close(hidden) }()
	select {
	case <-hidden:
		s.files.Release(f)
		t.Fatal("Hide returned while a request still held ann's file")
	case <-time.After(200 * time.Millisecond):
	}
	s.files.Release(f)
	select {
	case <-hidden:
	case <-time.After(5 * time.Second):
		t.Fatal("Hide did not return once the file was released")
	}
	defer s.files.Unhide(ann.ID)
	p := s.Path(nah.PersonRel(ann.ID))
	if st, err := os.Stat(p + "-wal"); err == nil && st.Size() > 0 {
		t.Fatalf("ann's file is hidden with %d bytes left in its WAL", st.Size())
	}
}
