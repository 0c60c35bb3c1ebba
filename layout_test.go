package nah

import (
	"path"
	"testing"
)

func TestLayout(t *testing.T) {
	id := NewPersonID()
	if got := PersonRel(id); got != "people/"+id+"/person.db" {
		t.Fatalf("PersonRel(%q) = %q", id, got)
	}
	if got := PersonOfRel(PersonRel(id)); got != id {
		t.Fatalf("PersonOfRel(PersonRel(%q)) = %q", id, got)
	}
	if !ValidDatabaseRel(DirectoryRel) || !ValidDatabaseRel(PersonRel(id)) {
		t.Fatalf("the directory and a person's file are databases")
	}
	upper := []byte(id)
	upper[0] -= 'a' - 'A'
	for _, rel := range []string{
		"", "person.db", "people/" + id, "people/" + id + "/person.db-wal",
		"people/" + id + "/media/person.db", "people/../person.db",
		"people/abc/person.db", "people/" + string(upper) + "/person.db",
		"people/" + id + "a/person.db", "deleted/" + id + "/person.db",
		"/people/" + id + "/person.db", "directory.db/x",
	} {
		if PersonOfRel(rel) != "" || ValidDatabaseRel(rel) {
			t.Errorf("%q taken as a database", rel)
		}
	}
	m := NewMediaID(1_780_000_000_000)
	if o, got := MediaOfRel(MediaRel(id, m)); o != id || got != m {
		t.Errorf("MediaOfRel(MediaRel(%q, %q)) = %q, %q", id, m, o, got)
	}
	for _, rel := range []string{MediaRel(id, "x"), MediaRel("abc", m), PersonRel(id), "people/" + id + "/other/" + m, MediaRel(id, m) + "/x"} {
		if o, _ := MediaOfRel(rel); o != "" {
			t.Errorf("%q taken as a media file", rel)
		}
	}
	if got := MediaDirRel(id); got != "people/"+id+"/media" {
		t.Errorf("MediaDirRel(%q) = %q", id, got)
	}
	if got := MediaRel(id, m); got != "people/"+id+"/media/"+m {
		t.Errorf("MediaRel(%q, %q) = %q", id, m, got)
	}
	for rel, want := range map[string]bool{MediaDirRel(id): true, PersonDirRel(id): false, MediaRel(id, m): false, PersonRel(id): false} {
		if ok, err := path.Match(MediaDirsPattern, rel); err != nil || ok != want {
			t.Errorf("MediaDirsPattern %q matches %q: %v (%v), want %v", MediaDirsPattern, rel, ok, err, want)
		}
	}
	if o, name := SplitMediaRel(MediaRel(id, "upload-x")); o != id || name != "upload-x" {
		t.Errorf("SplitMediaRel(MediaRel(%q, upload-x)) = %q, %q", id, o, name)
	}
	for _, rel := range []string{MediaRel("abc", m), MediaRel(id, ""), PersonRel(id), "people/" + id + "/other/" + m, MediaRel(id, m) + "/x", "deleted/" + id + "/media/" + m} {
		if o, _ := SplitMediaRel(rel); o != "" {
			t.Errorf("%q split as a media file", rel)
		}
	}
	for rel, want := range map[string]bool{PersonRel(id): true, MediaRel(id, m): true, PersonDirRel(id): true, "people/x": true,
		DirectoryRel: false, "people": false, "peoplex/" + id: false, DeletedDirRel(id): false, ReplacedDirRel(id): false, "/people/" + id: false} {
		if got := InPeopleRel(rel); got != want {
			t.Errorf("InPeopleRel(%q) = %v, want %v", rel, got, want)
		}
	}
	if got := RestoreFailedMarkerRel(id); got != "restore-failed/"+id {
		t.Errorf("RestoreFailedMarkerRel(%q) = %q", id, got)
	}
}
