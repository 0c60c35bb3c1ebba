package store

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMediaAddedTellsBackups: every way media land in a person's folder
// tells Config.MediaAdded whose (backup.MediaMirror queues them): an
// upload, a resumable upload's end, an import and an undone deletion; a
// failed upload and a moment do not.
func TestMediaAddedTellsBackups(t *testing.T) {
	ctx := t.Context()
	var mu sync.Mutex
	var told []string
	s := MustOpen(t, Config{DeleteGrace: time.Hour, MediaAdded: func(id string) {
		mu.Lock()
		told = append(told, id)
		mu.Unlock()
	}})
	took := func(what string, want ...string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(told, want) {
			t.Errorf("%s told %v, want %v", what, told, want)
		}
		told = nil
	}
	ann, bob := mustPerson(t, s, "ann"), mustPerson(t, s, "bob")
	if _, err := s.CreateMoment(ctx, ann.ID, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	up, err := s.StartUpload(ctx, ann.ID, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.Commit(ctx, "image/jpeg"); err == nil {
		t.Fatal("an empty upload was committed")
	}
	took("a moment and an empty upload")

	up, err = s.StartUpload(ctx, ann.ID, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	up.Write([]byte("a photo"))
	if _, err := up.Commit(ctx, "image/jpeg"); err != nil {
		t.Fatal(err)
	}
	took("an upload", ann.ID)

	r, _, err := s.Resumables().Create(ctx, bob.ID, ResumableSpec{Length: 7, ContentType: "video/mp4"}, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resumables().Write(ctx, bob.ID, r.ID, Piece{Offset: 0, Body: strings.NewReader("a video")}); err != nil {
		t.Fatal(err)
	}
	took("a resumable upload", bob.ID)

	res, err := s.ImportPerson(ctx, bytes.NewReader(exportOf(t, s, ann.ID)), ImportOptions{Handle: "ann2"})
	if err != nil {
		t.Fatal(err)
	}
	took("an import", res.Person.ID)

	if err := s.DeletePerson(ctx, bob.ID); err != nil {
		t.Fatal(err)
	}
	took("a deletion")
	if err := s.RestorePerson(ctx, bob.ID); err != nil {
		t.Fatal(err)
	}
	took("an undone deletion", bob.ID)
}
