package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nah-app/nah"
)

// oldMediaID is the photo's id in oldExport.
var oldMediaID = nah.MomentIDFrom(1_700_000_000_000, strings.NewReader("0123456789"))

// oldExport is an export whose person.db our migrations made up to
// version built, then changed by stmts (a user_version they set wins):
// two moments, the second's time 5 s before its id's (as an import before
// person migration 5 left it), and a photo.
func oldExport(t *testing.T, built int, stmts ...string) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), nah.PersonFileName)
	db, err := openDB(p, false, 1, personCacheKiB, SyncFull, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range personMigrations[:built] {
		if _, err := db.Exec(m.sql); err != nil {
			t.Fatal(err)
		}
	}
	at := int64(1_700_000_000_000)
	photo := []byte("a photo from an older release")
	sum := sha256.Sum256(photo)
	setup := []string{
		"PRAGMA user_version = " + strconv.Itoa(built),
		`INSERT INTO moments(id, created_at, body) VALUES ('` + nah.NewMomentID(at) + `', ` + strconv.FormatInt(at, 10) + `, x'6f6e65')`,
		`INSERT INTO moments(id, created_at, body) VALUES ('` + nah.NewMomentID(at+60_000) + `', ` + strconv.FormatInt(at+55_000, 10) + `, x'74776f')`,
		`INSERT INTO media(id, size, sha256, content_type, created_at) VALUES ('` + oldMediaID + `', ` + strconv.Itoa(len(photo)) + `, '` + hex.EncodeToString(sum[:]) + `', 'image/jpeg', ` + strconv.FormatInt(at, 10) + `)`,
	}
	for _, q := range append(setup, stmts...) {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	dbSum := sha256.Sum256(b)
	var m Manifest
	m.Format, m.FormatVersion = ExportFormat, exportFormatVersion
	m.Person.ID, m.Person.Handle, m.Person.CreatedAt = nah.NewPersonID(), "ann", nah.FormatTime(at)
	m.ServerVersion, m.SchemaVersion, m.MediaCount = "v0.1.0", built, 1
	m.Files = []ManifestFile{{Name: nah.PersonFileName, Size: int64(len(b)), SHA256: hex.EncodeToString(dbSum[:])}}
	manifest, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return makeTar(t, reg(nah.PersonFileName, b), reg("media/"+oldMediaID, photo), reg("manifest.json", manifest))
}

// TestImportMigratesOlderExports: an export whose person.db an older
// release made (schema 3, before idempotency keys and moments in their
// ids' order) is brought to this binary's schema on import, its moment
// whose time is not its id's tied to it as the server's own files were,
// and its photo kept; a file that is not what its declared version was,
// or claims a version this binary cannot step from or does not know, is
// refused, and the data directory is left as it was.
func TestImportMigratesOlderExports(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := MustOpen(t, Config{Dir: dir})

	next := strconv.Itoa(len(personMigrations) + 1)
	before := tree(t, dir)
	for _, c := range []struct {
		name, message string
		tar           []byte
	}{
		{"a version newer than this binary", "person.db's schema version is " + next + " and this server knows up to",
			oldExport(t, 3, "PRAGMA user_version = "+next)},
		{"version 0", "schema version is 0: not a person file", oldExport(t, 3, "PRAGMA user_version = 0")},
		{"a negative version", "schema version is -1: not a person file", oldExport(t, 3, "PRAGMA user_version = -1")},
		// Each of these would run its own statements on ours, or have ours
		// drop what the check after the migration would see.
		{"a trigger on what migration 5 updates", `trigger "t" is`,
			oldExport(t, 3, "CREATE TRIGGER t AFTER UPDATE ON moments BEGIN DELETE FROM media; END")},
		{"migration 5's index on something else", `index "moments_time" is`,
			oldExport(t, 4, "DROP INDEX moments_time", "CREATE INDEX moments_time ON moments(body)")},
		{"version 1 holding version 2's table", `table "media" is`, oldExport(t, 3, "PRAGMA user_version = 1")},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.ImportPerson(ctx, bytes.NewReader(c.tar), ImportOptions{})
			if nah.ErrorCode(err) != nah.Invalid || !strings.Contains(err.Error(), c.message) {
				t.Errorf("error %v (%s), want an invalid export saying %q", err, nah.ErrorCode(err), c.message)
			}
			if after := tree(t, dir); !slices.Equal(before, after) {
				t.Errorf("the data directory changed:\nbefore %v\nafter  %v", before, after)
			}
		})
	}

	res, err := s.ImportPerson(ctx, bytes.NewReader(oldExport(t, 3)), ImportOptions{})
	if err != nil {
		t.Fatalf("importing a schema 3 export: %v", err)
	}
	got, err := s.Moments(ctx, res.Person.ID, nil, 10, nil)
	if err != nil || len(got) != 2 {
		t.Fatalf("%d moments, %v; want 2", len(got), err)
	}
	for _, m := range got {
		if at, _ := nah.MomentTime(m.ID); m.CreatedAt != at {
			t.Errorf("moment %s at %d, not its id's %d", m.ID, m.CreatedAt, at)
		}
	}
	f, _, err := s.OpenMedia(ctx, res.Person.ID, oldMediaID)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, _ := io.ReadAll(f); string(b) != "a photo from an older release" {
		t.Errorf("the photo reads %q", b)
	}
}
