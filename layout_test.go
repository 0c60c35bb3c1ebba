package nah

import "testing"

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
}
