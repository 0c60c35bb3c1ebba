package nah

import "strings"

// The data directory's layout. Paths are relative to the data directory
// and slash-separated, as replication and the replica name them: the
// directory database, and one folder per person under people/.

// DirectoryRel is the directory database's path under the data directory.
const DirectoryRel = "directory.db"

// PersonRel is person id's file under the data directory.
func PersonRel(id string) string { return "people/" + id + "/person.db" }

// PersonOfRel is the person whose file rel is, or "" if rel is not one:
// only an id of ValidPersonID's exact shape becomes a path.
func PersonOfRel(rel string) string {
	id, ok := strings.CutPrefix(rel, "people/")
	if !ok {
		return ""
	}
	id, ok = strings.CutSuffix(id, "/person.db")
	if !ok || !ValidPersonID(id) {
		return ""
	}
	return id
}

// ValidDatabaseRel says whether rel is a database path nah makes.
func ValidDatabaseRel(rel string) bool { return rel == DirectoryRel || PersonOfRel(rel) != "" }
