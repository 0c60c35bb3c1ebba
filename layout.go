package nah

import "strings"

// The data directory's layout. Paths are relative to the data directory
// and slash-separated, as replication and the replica name them: the
// directory database, and one folder per person under people/.

// DirectoryRel is the directory database's path under the data directory.
const DirectoryRel = "directory.db"

// PersonFileName is a person's file in their folder, and in an export.
const PersonFileName = "person.db"

// PersonRel is person id's file under the data directory.
func PersonRel(id string) string { return PersonDirRel(id) + "/" + PersonFileName }

// PersonOfRel is the person whose file rel is, or "" if rel is not one:
// only an id of ValidPersonID's exact shape becomes a path.
func PersonOfRel(rel string) string {
	id, ok := strings.CutPrefix(rel, PeopleRel+"/")
	if !ok {
		return ""
	}
	id, ok = strings.CutSuffix(id, "/"+PersonFileName)
	if !ok || !ValidPersonID(id) {
		return ""
	}
	return id
}

// ValidDatabaseRel says whether rel is a database path nah makes.
func ValidDatabaseRel(rel string) bool { return rel == DirectoryRel || PersonOfRel(rel) != "" }

// PeopleRel holds one folder per person, PersonDirRel(id); DeletedDirRel
// holds a deleted person's folder until the purge.
const PeopleRel = "people"

// PersonDirRel is person id's folder: their file and their media.
func PersonDirRel(id string) string { return PeopleRel + "/" + id }

// InPeopleRel says whether rel is under PeopleRel: in a person's folder,
// whatever it is (their file, media, uploads), by its first element only.
func InPeopleRel(rel string) bool { return strings.HasPrefix(rel, PeopleRel+"/") }

// DeletedDirRel is where a deleted person's folder waits for the purge.
func DeletedDirRel(id string) string { return "deleted/" + id }

// ReplacedDirRel is where the file a restore of person id to a time
// replaced waits, with links to their media then, for an undo until the
// delete grace ends: outside people/, so no export, sweep or backup lists it.
func ReplacedDirRel(id string) string { return ReplacedRel + "/" + id }

// ReplacedRel holds one ReplacedDirRel folder per person.
const ReplacedRel = "replaced"

// MediaDirName is the folder of a person's media in their folder, and in
// an export.
const MediaDirName = "media"

// MediaDirRel is person owner's media folder.
func MediaDirRel(owner string) string { return PersonDirRel(owner) + "/" + MediaDirName }

// MediaDirsPattern matches every person's media folder (filepath.Glob's
// syntax, once made local with filepath.FromSlash).
var MediaDirsPattern = MediaDirRel("*")

// MediaRel is media file media of person owner.
func MediaRel(owner, media string) string { return MediaDirRel(owner) + "/" + media }

// MediaOfRel is the owner and id of media file rel, or "", "" if rel is
// not one: only ids of their exact shapes become a path.
func MediaOfRel(rel string) (owner, media string) {
	owner, media = SplitMediaRel(rel)
	if !ValidMediaID(media) {
		return "", ""
	}
	return owner, media
}

// SplitMediaRel is the owner and last element of rel if rel is a file in
// the media folder of a person id of the exact shape, else "", "". The
// name is not checked: MediaOfRel also asks for a media id's shape.
func SplitMediaRel(rel string) (owner, name string) {
	parts := strings.Split(rel, "/")
	if len(parts) != 4 || parts[0] != PeopleRel || !ValidPersonID(parts[1]) || parts[2] != MediaDirName || parts[3] == "" {
		return "", ""
	}
	return parts[1], parts[3]
}

// UploadsDirName is the folder of a person's unfinished resumable uploads
// in their folder: never exported, backed up or swept as media.
const UploadsDirName = "uploads"

// UploadsDirsPattern matches every person's uploads folder (as
// MediaDirsPattern).
var UploadsDirsPattern = PersonDirRel("*") + "/" + UploadsDirName

// RestoreFailedRel holds one marker per person whose restore failed,
// RestoreFailedMarkerRel(id), until a sound file mends them.
const RestoreFailedRel = "restore-failed"

// RestoreFailedMarkerRel is the marker of person id's failed restore.
func RestoreFailedMarkerRel(id string) string { return RestoreFailedRel + "/" + id }

// ReplicationRel holds replication's own state: QueueRel its on-disk
// queue of files to take up, DrillRel the restore drill's scratch,
// MediaQueueRel a mark for each person whose media wait for their mirror.
const (
	ReplicationRel = "replication"
	QueueRel       = ReplicationRel + "/queue"
	DrillRel       = ReplicationRel + "/drill"
	MediaQueueRel  = ReplicationRel + "/media-queue"
)
