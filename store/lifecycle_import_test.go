package store

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// exportOf exports person id of s and returns the tar's bytes.
func exportOf(t *testing.T, s *Store, id string) []byte {
	t.Helper()
	e, err := s.ExportPerson(context.Background(), id, "v-test")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var b bytes.Buffer
	if _, err := e.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// sampleMoments makes n moments at fixed times, every third body binary.
func sampleMoments(n int) []nah.Moment {
	ms := make([]nah.Moment, n)
	for i := range ms {
		at := int64(1_700_000_000_000 + i*60_000)
		body := []byte("moment " + strings.Repeat("x", i))
		if i%3 == 0 {
			body = []byte{0, 0xff, byte(i), 0xfe, 0, '\n', 0x80}
		}
		ms[i] = nah.Moment{ID: nah.NewMomentID(at), CreatedAt: at, Body: body}
	}
	return ms
}

// TestImportRoundTrip exports a person with 50 moments (some binary) and a
// connection from one store and imports them into another: every moment
// equal, a new id, the link works once, the former connection present here
// is named, and a taken handle is a clear conflict that -handle gets round.
func TestImportRoundTrip(t *testing.T) {
	ctx := context.Background()
	old := MustOpen(t, Config{})
	ann, bob := mustPerson(t, old, "ann"), mustPerson(t, old, "bob")
	mustPerson(t, old, "cyd") // a connection that has no account on the new server
	cy, _, _ := old.FindPersonByHandle(ctx, "cyd")
	if err := old.ImportConnections(ctx, [][2]string{{ann.ID, bob.ID}, {ann.ID, cy.ID}}, 1234); err != nil {
		t.Fatal(err)
	}
	want := sampleMoments(50)
	if err := old.ImportMoments(ctx, ann.ID, want); err != nil {
		t.Fatal(err)
	}
	tarball := exportOf(t, old, ann.ID)

	s := MustOpen(t, Config{})
	mustPerson(t, s, "bob")
	res, err := s.ImportPerson(ctx, bytes.NewReader(tarball), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Person.ID == ann.ID || res.Person.Handle != "ann" || res.Person.CreatedAt != ann.CreatedAt || res.Moments != 50 {
		t.Errorf("imported %+v (%d moments), want a new id for ann created at %d", res.Person, res.Moments, ann.CreatedAt)
	}
	if !slices.Equal(res.Connections, []string{"bob"}) {
		t.Errorf("former connections here %v, want [bob]", res.Connections)
	}
	got, err := s.Moments(ctx, res.Person.ID, nil, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d moments, want %d", len(got), len(want))
	}
	byID := make(map[string]nah.Moment)
	for _, m := range got {
		byID[m.ID] = m
	}
	for _, w := range want {
		g, ok := byID[w.ID]
		if !ok || g.CreatedAt != w.CreatedAt || !bytes.Equal(g.Body, w.Body) {
			t.Fatalf("moment %s: got %+v, want %+v", w.ID, g, w)
		}
	}
	p, hash, err := s.FindPersonByHandle(ctx, "ann")
	if err != nil || p.ID != res.Person.ID {
		t.Fatalf("ann here: %+v, %v", p, err)
	}
	if CheckPassword([]byte(hash), "") || CheckPassword([]byte(hash), "password") {
		t.Error("the imported person's password hash matches a password")
	}
	if who, err := s.CheckLink(ctx, LinkReset, res.Link); err != nil || who != res.Person.ID {
		t.Errorf("link: %q, %v; want %s", who, err, res.Person.ID)
	}
	if s.graph.node(res.Person.ID) == nil || s.graph.node(res.Person.ID).newest.Load() != want[49].CreatedAt {
		t.Error("the graph does not know the imported person's newest moment")
	}

	taken, err := s.ImportPerson(ctx, bytes.NewReader(tarball), ImportOptions{})
	if nah.ErrorCode(err) != nah.Conflict || !strings.Contains(err.Error(), `the handle "ann" is taken`) || taken.Person.Handle != "ann" {
		t.Fatalf("second import: %v, handle %q; want a conflict naming ann", err, taken.Person.Handle)
	}
	res2, err := s.ImportPerson(ctx, bytes.NewReader(tarball), ImportOptions{Handle: "ann.two"})
	if err != nil || res2.Person.Handle != "ann.two" || res2.Moments != 50 || res2.Person.ID == res.Person.ID {
		t.Fatalf("import as ann.two: %+v, %v", res2, err)
	}
}

// entry is one entry of a hand-made tar.
type entry struct {
	hdr  tar.Header
	body []byte
	// short, when set, writes only that many bytes of body and leaves the
	// tar unclosed: a truncated file.
	short int
}

func reg(name string, body []byte) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: int64(len(body))}, body: body}
}

func makeTar(t *testing.T, es ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		if err := tw.WriteHeader(&e.hdr); err != nil {
			t.Fatal(err)
		}
		if e.short > 0 {
			tw.Write(e.body[:e.short])
			return b.Bytes()
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// tree lists every path under dir.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		names = append(names, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestImportHostile feeds ImportPerson tars that must be refused: paths out
// of the folder, links, devices, folders, unknown, duplicate, oversized and
// truncated entries, checksums and schema versions that do not match, not a
// tar, not SQLite. Each is refused with a clear error, and the data
// directory then holds exactly the names it held before: no temporary
// folder, no person folder, no person row.
func TestImportHostile(t *testing.T) {
	ctx := context.Background()
	old := MustOpen(t, Config{})
	ann := mustPerson(t, old, "ann")
	if err := old.ImportMoments(ctx, ann.ID, sampleMoments(5)); err != nil {
		t.Fatal(err)
	}
	_, files := untar(t, bytes.NewReader(exportOf(t, old, ann.ID)))
	db, manifest := files["person.db"], files["manifest.json"]
	var m Manifest
	if err := json.Unmarshal(manifest, &m); err != nil {
		t.Fatal(err)
	}
	remanifest := func(change func(m *Manifest)) []byte {
		c := m
		c.Files = slices.Clone(m.Files)
		change(&c)
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	notSQLite := bytes.Repeat([]byte("this is not a database. "), 200)
	sum := sha256.Sum256(notSQLite)
	notSQLiteManifest := remanifest(func(m *Manifest) {
		m.Files[0].Size, m.Files[0].SHA256 = int64(len(notSQLite)), hex.EncodeToString(sum[:])
	})
	// A good SQLite file changed by sql, with its manifest: refused only
	// after the new person's folder is made, which must go again.
	altered := func(sql string) (file, manifest []byte) {
		p := filepath.Join(t.TempDir(), "person.db")
		if err := os.WriteFile(p, db, 0o600); err != nil {
			t.Fatal(err)
		}
		w, err := openDB(p, false, 1, personCacheKiB, SyncFull, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Exec(sql); err != nil {
			t.Fatal(err)
		}
		w.Close()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		return b, remanifest(func(m *Manifest) {
			m.Files[0].Size, m.Files[0].SHA256 = int64(len(b)), hex.EncodeToString(sum[:])
		})
	}
	badID, badIDManifest := altered(`UPDATE moments SET id = 'not-an-id' WHERE id = (SELECT max(id) FROM moments)`)
	bigBody, bigBodyManifest := altered(`UPDATE moments SET body = zeroblob(65537) WHERE id = (SELECT max(id) FROM moments)`)
	future, futureManifest := altered(`UPDATE moments SET created_at = 253402300799000 WHERE id = (SELECT max(id) FROM moments)`)
	notItsTime, notItsTimeManifest := altered(`UPDATE moments SET created_at = created_at - 1000 WHERE id = (SELECT min(id) FROM moments)`)
	view, viewManifest := altered(`DROP TABLE moments; CREATE VIEW moments AS
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT '06f80une588vsk1m6147d3leds' AS id, i AS created_at, x'00' AS body FROM n`)
	// The idempotency keys' time index pointed at the moments' b-tree: the
	// schema's text is this server's, the file is not sound.
	unsound, unsoundManifest := altered(`PRAGMA writable_schema = ON;
		UPDATE sqlite_master SET rootpage = (SELECT rootpage FROM sqlite_master WHERE name = 'moments') WHERE name = 'idempotency_time'`)
	link := func(flag byte, name string) entry {
		return entry{hdr: tar.Header{Typeflag: flag, Name: name, Linkname: "/etc/passwd", Mode: 0o600}}
	}
	huge := reg("person.db", db)
	huge.hdr.Size = 10 << 30
	huge.short = len(db)
	truncated := reg("person.db", db)
	truncated.short = len(db) / 2

	mediaID := nah.NewMediaID(1)
	cases := []struct {
		name    string
		tar     []byte
		code    nah.Code
		message string // a part of the error's text
	}{
		{"dot-dot path", makeTar(t, reg("../person.db", db), reg("manifest.json", manifest)), nah.Invalid, `unexpected entry "../person.db"`},
		{"absolute path", makeTar(t, reg("/etc/person.db", db), reg("manifest.json", manifest)), nah.Invalid, `unexpected entry "/etc/person.db"`},
		{"symlink", makeTar(t, link(tar.TypeSymlink, "person.db"), reg("manifest.json", manifest)), nah.Invalid, "not a regular file"},
		{"hard link", makeTar(t, link(tar.TypeLink, "person.db"), reg("manifest.json", manifest)), nah.Invalid, "not a regular file"},
		{"device", makeTar(t, entry{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "person.db", Devmajor: 1, Devminor: 3}}), nah.Invalid, "not a regular file"},
		{"directory", makeTar(t, entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "people/", Mode: 0o700}}, reg("person.db", db), reg("manifest.json", manifest)), nah.Invalid, "not a regular file"},
		{"extra file", makeTar(t, reg("person.db", db), reg("notes.txt", []byte("hi")), reg("manifest.json", manifest)), nah.Invalid, `unexpected entry "notes.txt"`},
		{"extra file after", makeTar(t, reg("person.db", db), reg("manifest.json", manifest), reg("x", nil)), nah.Invalid, "more entries"},
		{"media path trick", makeTar(t, reg("person.db", db), reg("media/../person.db", db), reg("manifest.json", manifest)), nah.Invalid, `unexpected entry "media/../person.db"`},
		{"media twice", makeTar(t, reg("person.db", db), reg("media/"+mediaID, []byte("x")), reg("media/"+mediaID, []byte("x")), reg("manifest.json", manifest)), nah.Invalid, "appears twice"},
		{"media before person.db", makeTar(t, reg("media/"+mediaID, []byte("x")), reg("person.db", db), reg("manifest.json", manifest)), nah.Invalid, "before person.db"},
		{"media not counted in the manifest", makeTar(t, reg("person.db", db), reg("media/"+mediaID, []byte("x")), reg("manifest.json", manifest)), nah.Invalid, "the manifest counts 0"},
		{"media without a row", makeTar(t, reg("person.db", db), reg("media/"+mediaID, []byte("x")), reg("manifest.json", remanifest(func(m *Manifest) {
			m.MediaCount = 1
		}))), nah.Invalid, "1 media files for 0 rows"},
		{"media listed in a format 2 manifest", makeTar(t, reg("person.db", db), reg("media/"+mediaID, []byte("x")), reg("manifest.json", remanifest(func(m *Manifest) {
			m.Files = append(m.Files, ManifestFile{Name: "media/" + mediaID, Size: 1, SHA256: "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"})
			m.MediaCount = 1
		}))), nah.Invalid, "not only person.db"},
		{"format 1: media not in the manifest", makeTar(t, reg("person.db", db), reg("media/"+mediaID, []byte("x")), reg("manifest.json", remanifest(func(m *Manifest) {
			m.FormatVersion = 1
		}))), nah.Invalid, "the manifest lists 0"},
		{"format 1: media without a row", makeTar(t, reg("person.db", db), reg("media/"+mediaID, []byte("x")), reg("manifest.json", remanifest(func(m *Manifest) {
			m.FormatVersion = 1
			m.Files = append(m.Files, ManifestFile{Name: "media/" + mediaID, Size: 1, SHA256: "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"})
		}))), nah.Invalid, "1 media files for 0 rows"},
		{"media over the limit", makeTar(t, reg("person.db", db), reg("media/"+mediaID, make([]byte, 2<<20)), reg("manifest.json", manifest)), nah.TooLarge, "over the limit"},
		{"duplicate person.db", makeTar(t, reg("person.db", db), reg("person.db", db)), nah.Invalid, "twice"},
		{"claims 10 GB", makeTar(t, huge), nah.TooLarge, "over the limit"},
		{"truncated person.db", makeTar(t, truncated), nah.Invalid, "truncated"},
		{"no manifest", makeTar(t, reg("person.db", db)), nah.Invalid, "both needed"},
		{"wrong sha256", makeTar(t, reg("person.db", db), reg("manifest.json", remanifest(func(m *Manifest) { m.Files[0].SHA256 = strings.Repeat("0", 64) }))), nah.Invalid, "sha256"},
		{"changed person.db", makeTar(t, reg("person.db", append(slices.Clone(db[:len(db)-1]), db[len(db)-1]^1)), reg("manifest.json", manifest)), nah.Invalid, "sha256"},
		{"schema too new", makeTar(t, reg("person.db", db), reg("manifest.json", remanifest(func(m *Manifest) { m.SchemaVersion = len(personMigrations) + 1 }))), nah.Invalid, "upgrade this server"},
		{"not a nah export", makeTar(t, reg("person.db", db), reg("manifest.json", remanifest(func(m *Manifest) { m.Format = "zip" }))), nah.Invalid, "format"},
		{"format too new", makeTar(t, reg("person.db", db), reg("manifest.json", remanifest(func(m *Manifest) { m.FormatVersion = 99 }))), nah.Invalid, "format version"},
		{"manifest not JSON", makeTar(t, reg("person.db", db), reg("manifest.json", []byte("{"))), nah.Invalid, "manifest.json"},
		{"not a tar", bytes.Repeat([]byte("hello, world\n"), 100), nah.Invalid, "reading the tar"},
		{"empty", nil, nah.Invalid, "both needed"},
		{"a moment without a valid id", makeTar(t, reg("person.db", badID), reg("manifest.json", badIDManifest)), nah.Invalid, "is not a moment"},
		{"not SQLite", makeTar(t, reg("person.db", notSQLite), reg("manifest.json", notSQLiteManifest)), nah.Invalid, "not a readable SQLite database"},
		{"a body over the moment bound", makeTar(t, reg("person.db", bigBody), reg("manifest.json", bigBodyManifest)), nah.Invalid, "a body of 1 to 65536 bytes"},
		{"a moment from the future", makeTar(t, reg("person.db", future), reg("manifest.json", futureManifest)), nah.Invalid, "invalid id or time"},
		{"a moment whose time is not its id's", makeTar(t, reg("person.db", notItsTime), reg("manifest.json", notItsTimeManifest)), nah.Invalid, "not its id's"},
		{"an index that is not its table's", makeTar(t, reg("person.db", unsound), reg("manifest.json", unsoundManifest)), nah.Invalid, "fails SQLite's integrity check"},
		{"moments is an endless view", makeTar(t, reg("person.db", view), reg("manifest.json", viewManifest)), nah.Invalid, "schema is not this server's"},
	}

	dir := t.TempDir()
	s := MustOpen(t, Config{Dir: dir})
	mustPerson(t, s, "bob")
	before := tree(t, dir)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.ImportPerson(ctx, bytes.NewReader(c.tar), ImportOptions{MaxBytes: 1 << 20, MaxMediaBytes: 1 << 20})
			if err == nil {
				t.Fatal("imported")
			}
			if nah.ErrorCode(err) != c.code || !strings.Contains(err.Error(), c.message) {
				t.Errorf("error %q (%s), want %s containing %q", err, nah.ErrorCode(err), c.code, c.message)
			}
			if after := tree(t, dir); !slices.Equal(before, after) {
				t.Errorf("the data directory changed:\nbefore %v\nafter  %v", before, after)
			}
			if _, _, err := s.FindPersonByHandle(ctx, "ann"); nah.ErrorCode(err) != nah.NotFound {
				t.Errorf("ann exists after a refused import: %v", err)
			}
		})
	}
	// The good tar goes in after all that.
	if _, err := s.ImportPerson(ctx, bytes.NewReader(makeTar(t, reg("person.db", db), reg("manifest.json", manifest))), ImportOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestStaleImportsRemoved: Open removes the temporary folder of an import
// whose process died (its lock file unlocked), whatever its age, and leaves
// one whose lock is held: an import running in another process. A folder
// without a lock file (an earlier version's) goes after a day, as it did.
func TestStaleImportsRemoved(t *testing.T) {
	dir := t.TempDir()
	running, runningLock, err := makeImportTmp(dir)
	if err != nil {
		t.Fatal(err)
	}
	dead, deadLock, err := makeImportTmp(dir)
	if err != nil {
		t.Fatal(err)
	}
	deadLock.Close() // as the kernel does for a process killed
	defer runningLock.Close()
	// Killed before their rename: a folder without its lock file yet, a
	// marker being made; and one being made by a live process, locked.
	deadNew, deadMarker := filepath.Join(dir, importNewPattern+"1"), filepath.Join(dir, importNewPattern+"2")
	if err := os.Mkdir(deadNew, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(deadMarker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	liveMarker, err := os.CreateTemp(dir, importNewPattern+"*")
	if err != nil {
		t.Fatal(err)
	}
	defer liveMarker.Close()
	if err := tryLock(liveMarker); err != nil {
		t.Fatal(err)
	}
	MustOpen(t, Config{Dir: dir})
	for _, p := range []string{dead, deadNew, deadMarker} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s of a dead import is still there: %v", filepath.Base(p), err)
		}
	}
	for _, p := range []string{running, liveMarker.Name()} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s of a running import is gone: %v", filepath.Base(p), err)
		}
	}
}

// TestStaleImportsRemovedUnlocked: folders without a lock file, made before
// the lock: the one a day old goes, the young one stays.
func TestStaleImportsRemovedUnlocked(t *testing.T) {
	dir := t.TempDir()
	old, young := filepath.Join(dir, "import-tmp-1"), filepath.Join(dir, "import-tmp-2")
	for _, d := range []string{old, young} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "person.db"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	day := time.Now().Add(-25 * time.Hour)
	if err := os.Chtimes(old, day, day); err != nil {
		t.Fatal(err)
	}
	MustOpen(t, Config{Dir: dir})
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the stale import folder is still there: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("the young import folder is gone: %v", err)
	}
}

// TestImportCopyStopsAtQuota: the copy of an import counts what it writes,
// not what the tar claims. A source whose bodies are computed (a VIRTUAL
// generated column, which the schema check refuses before this) makes
// 64 KiB moments from a file of a few KB: the copy into a person's file
// stops with QuotaExceeded within roomCheckEvery moments of the room, and
// commits nothing.
func TestImportCopyStopsAtQuota(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "person.db")
	w, err := openDB(p, false, 1, personCacheKiB, SyncFull, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Exec(`CREATE TABLE moments (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, body BLOB AS (zeroblob(65536)) VIRTUAL) WITHOUT ROWID; PRAGMA user_version = 3`); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		at := int64(1_700_000_000_000 + i*1000)
		if _, err := w.Exec(`INSERT INTO moments(id, created_at) VALUES (?, ?)`, nah.NewMomentID(at), at); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	info, _ := os.Stat(p)
	src, err := openUntrusted(ctx, p, nah.DefaultMaxMomentBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()

	s := MustOpen(t, Config{})
	ann := mustPerson(t, s, "ann")
	const room = 4 << 20
	err = s.useFile(ctx, ann.ID, true, func(f *personFile) error {
		_, _, err := copyMoments(ctx, src, f.db, nah.DefaultMaxMomentBytes, time.Now().UnixMilli(), room, room)
		return err
	})
	if nah.ErrorCode(err) != nah.QuotaExceeded {
		t.Fatalf("a copy of 1,000 moments of 64 KiB from a file of %d bytes into a room of %d: %v, want QuotaExceeded", info.Size(), room, err)
	}
	if n, err := s.MomentCount(ctx, ann.ID); err != nil || n != 0 {
		t.Errorf("%d moments committed, %v", n, err)
	}
	st, err := s.StorageOf(ctx, ann.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("source %d bytes; the copy stopped with %d bytes of database files (room %d)", info.Size(), st.Database, room)
	if st.Database > room+roomCheckEvery*(64<<10)+(1<<20) {
		t.Errorf("the person's files hold %d bytes after a refused copy into %d", st.Database, room)
	}
}

// TestPendingImportRemovedAtOpen: a crash after an import moved its folder
// into people/ and before its directory row committed leaves the folder
// and its marker; the next Open removes that folder, and leaves the folder
// of a marker whose person has a row (a crash after the commit), and that
// of a marker still locked (an import of another process under way).
func TestPendingImportRemovedAtOpen(t *testing.T) {
	dir := t.TempDir()
	s := MustOpen(t, Config{Dir: dir})
	ann := mustPerson(t, s, "ann")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	orphan := nah.NewPersonID()
	if err := os.MkdirAll(filepath.Join(dir, "people", orphan), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "people", orphan, "person.db"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{orphan, ann.ID} {
		if err := os.WriteFile(filepath.Join(dir, importPendingPrefix+id), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// An import of another process between its move and its row: its
	// marker is locked, and its folder stays.
	running := nah.NewPersonID()
	if err := os.MkdirAll(filepath.Join(dir, "people", running), 0o700); err != nil {
		t.Fatal(err)
	}
	marker, err := os.Create(filepath.Join(dir, importPendingPrefix+running))
	if err != nil {
		t.Fatal(err)
	}
	defer marker.Close()
	if err := tryLock(marker); err != nil {
		t.Fatal(err)
	}
	MustOpen(t, Config{Dir: dir})
	if _, err := os.Stat(filepath.Join(dir, "people", running)); err != nil {
		t.Errorf("the folder of a running import is gone: %v", err)
	}
	os.Remove(marker.Name())
	if _, err := os.Stat(filepath.Join(dir, "people", orphan)); !os.IsNotExist(err) {
		t.Errorf("the folder of an import without a row is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "people", ann.ID, "person.db")); err != nil {
		t.Errorf("ann's folder is gone: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, importPendingPrefix+"*")); len(left) != 0 {
		t.Errorf("markers left: %v", left)
	}
}

// TestImportTinyFilesCountAgainstTheQuota: an export of 300 media of one
// byte is 300 bytes of media but 300 × nah.MediaChargeBytes against the
// quota, as uploads here would be: refused at a quota of 1 MiB, imported
// at 4 MiB with its usage charged so.
func TestImportTinyFilesCountAgainstTheQuota(t *testing.T) {
	ctx := context.Background()
	old := MustOpen(t, Config{})
	ann := mustPerson(t, old, "ann")
	ids := seedMedia(t, old, ann.ID, 300, 1)
	tarball := exportOf(t, old, ann.ID)

	s := MustOpen(t, Config{})
	before := tree(t, s.dir)
	_, err := s.ImportPerson(ctx, bytes.NewReader(tarball), ImportOptions{QuotaBytes: 1 << 20})
	if nah.ErrorCode(err) != nah.QuotaExceeded {
		t.Fatalf("300 files of 1 byte at a quota of 1 MiB: %v, want QuotaExceeded", err)
	}
	if after := tree(t, s.dir); !slices.Equal(before, after) {
		t.Errorf("a refused import left %v", after)
	}
	res, err := s.ImportPerson(ctx, bytes.NewReader(tarball), ImportOptions{QuotaBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if n := mediaRows(t, s, res.Person.ID); n != len(ids) {
		t.Errorf("%d media imported, want %d", n, len(ids))
	}
	var charged int64
	s.withUsage(ctx, res.Person.ID, func(u *mediaUsage) error { charged = u.charged; return nil })
	if charged != int64(len(ids))*nah.MediaChargeBytes {
		t.Errorf("the imported media are charged %d bytes, want %d", charged, int64(len(ids))*nah.MediaChargeBytes)
	}
}

// TestImportMediaCountBound: a tar with one media file more than
// nah.MaxMediaCount, each of one byte (well under the default quota even
// at nah.MediaChargeBytes each), is refused with QuotaExceeded as that file
// is reached, and leaves nothing behind.
func TestImportMediaCountBound(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100,000 files")
	}
	ctx := context.Background()
	old := MustOpen(t, Config{})
	ann := mustPerson(t, old, "ann")
	_, files := untar(t, bytes.NewReader(exportOf(t, old, ann.ID)))
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		write := func(name string, body []byte) error {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: int64(len(body))}); err != nil {
				return err
			}
			_, err := tw.Write(body)
			return err
		}
		err := write("person.db", files["person.db"])
		at := int64(1_700_000_000_000)
		for i := 0; err == nil && i <= nah.MaxMediaCount; i++ {
			err = write("media/"+nah.NewMediaID(at+int64(i)), []byte{'x'})
		}
		if err == nil {
			err = write("manifest.json", files["manifest.json"])
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	s := MustOpen(t, Config{})
	before := tree(t, s.dir)
	_, err := s.ImportPerson(ctx, pr, ImportOptions{})
	pr.CloseWithError(errors.New("import returned"))
	if nah.ErrorCode(err) != nah.QuotaExceeded || !strings.Contains(err.Error(), "100000 media") {
		t.Fatalf("%d media files: %v, want QuotaExceeded for the count", nah.MaxMediaCount+1, err)
	}
	if after := tree(t, s.dir); !slices.Equal(before, after) {
		t.Errorf("a refused import left %v", after)
	}
}

// TestImportReadsFormat1: an export made before format 2, whose manifest
// lists every media file with its size and sha256 and counts none, imports
// with its media; one whose list disagrees with a file is refused.
func TestImportReadsFormat1(t *testing.T) {
	ctx := context.Background()
	old := MustOpen(t, Config{})
	ann := mustPerson(t, old, "ann")
	if err := old.ImportMoments(ctx, ann.ID, sampleMoments(3)); err != nil {
		t.Fatal(err)
	}
	ids := seedMedia(t, old, ann.ID, 40, 300)
	names, files := untar(t, bytes.NewReader(exportOf(t, old, ann.ID)))
	var m Manifest
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil {
		t.Fatal(err)
	}
	if m.FormatVersion != 2 || m.MediaCount != len(ids) || len(m.Files) != 1 {
		t.Fatalf("the export's manifest: format %d, %d media, %d files", m.FormatVersion, m.MediaCount, len(m.Files))
	}
	v1 := func(change func(f *ManifestFile)) []byte {
		c := m
		c.FormatVersion, c.MediaCount = 1, 0
		c.Files = slices.Clone(m.Files)
		var es []entry
		for _, n := range names {
			if n == "manifest.json" {
				continue
			}
			es = append(es, reg(n, files[n]))
			if n != "person.db" {
				sum := sha256.Sum256(files[n])
				f := ManifestFile{Name: n, Size: int64(len(files[n])), SHA256: hex.EncodeToString(sum[:])}
				change(&f)
				c.Files = append(c.Files, f)
			}
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return makeTar(t, append(es, reg("manifest.json", b))...)
	}
	s := MustOpen(t, Config{})
	res, err := s.ImportPerson(ctx, bytes.NewReader(v1(func(*ManifestFile) {})), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := mediaRows(t, s, res.Person.ID); n != len(ids) || res.Moments != 3 {
		t.Errorf("format 1: %d media and %d moments imported, want %d and 3", n, res.Moments, len(ids))
	}
	_, err = s.ImportPerson(ctx, bytes.NewReader(v1(func(f *ManifestFile) { f.Size++ })), ImportOptions{Handle: "ann2"})
	if nah.ErrorCode(err) != nah.Invalid || !strings.Contains(err.Error(), "does not match the manifest") {
		t.Errorf("format 1 with a wrong size listed: %v", err)
	}
}

// TestImportRefusesEmptyMedia: an import refuses a media of no bytes, as an
// upload does (ErrEmptyMedia), and leaves nothing behind.
func TestImportRefusesEmptyMedia(t *testing.T) {
	old := MustOpen(t, Config{})
	ann := mustPerson(t, old, "ann")
	seedMedia(t, old, ann.ID, 1, 0)
	tarball := exportOf(t, old, ann.ID)

	s := MustOpen(t, Config{})
	before := tree(t, s.dir)
	_, err := s.ImportPerson(context.Background(), bytes.NewReader(tarball), ImportOptions{})
	if nah.ErrorCode(err) != nah.Invalid || !strings.Contains(err.Error(), "at least 1 byte") {
		t.Errorf("an export with a media of 0 bytes: %v, want Invalid: at least 1 byte", err)
	}
	if after := tree(t, s.dir); !slices.Equal(before, after) {
		t.Errorf("a refused import left %v", after)
	}
}
