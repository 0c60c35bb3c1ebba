package app

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// exportedTar is ann's export from a server of her own: three moments.
func exportedTar(t *testing.T) []byte {
	t.Helper()
	old := newTestServer(t)
	ann := old.signup(t, "ann")
	for i := range 3 {
		old.post(t, ann, []byte{byte(i), 'm'})
	}
	res, err := old.Client().Do(exportRequest(t, old, "GET", ann.token))
	if err != nil {
		t.Fatal(err)
	}
	tarball, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("export: %d %v", res.StatusCode, err)
	}
	return tarball
}

// alteredTar returns tarball with its person.db changed by change (on a
// real SQLite file) and its manifest saying the new size and sha256: a
// hostile export that passes every check of the tar itself.
func alteredTar(t *testing.T, tarball []byte, change func(db *sql.DB) error) []byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(tarball))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(t.TempDir(), "person.db")
	if err := os.WriteFile(p, files["person.db"], 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", p)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	if err := change(db); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m store.Manifest
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	m.Files[0].Size, m.Files[0].SHA256 = int64(len(b)), hex.EncodeToString(sum[:])
	manifest, _ := json.Marshal(m)
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, e := range []struct {
		name string
		b    []byte
	}{{"person.db", b}, {"manifest.json", manifest}} {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o600, Size: int64(len(e.b))})
		tw.Write(e.b)
	}
	tw.Close()
	return out.Bytes()
}

func execSQL(stmts ...string) func(db *sql.DB) error {
	return func(db *sql.DB) error {
		for _, s := range stmts {
			if _, err := db.Exec(s); err != nil {
				return err
			}
		}
		return nil
	}
}

// momentsRows inserts n moments with valid ids and times through insert,
// an INSERT taking (id, created_at).
func momentsRows(n int, insert string) func(db *sql.DB) error {
	return func(db *sql.DB) error {
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		for i := range n {
			at := int64(1_700_000_000_000 + i*1000)
			if _, err := tx.Exec(insert, nah.NewMomentID(at), at); err != nil {
				return err
			}
		}
		return tx.Commit()
	}
}

// dirBytes is what the files under dir take.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if info, err := e.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// TestImportHostileSchema: an imported person.db whose schema is not the
// one our migrations make is refused over the console's form with a clear
// 400, whatever it is: a VIRTUAL generated body that makes 64 KiB moments
// from nothing (600 of them from a tar of ~100 KB, 39 MB under a quota of
// 20 MiB), moments as an fts5 virtual table, a trigger, an extra table, a
// view. Nothing is left: no person, no folder, and the data directory is no
// larger.
func TestImportHostileSchema(t *testing.T) {
	tarball := exportedTar(t)
	const quota = 20 << 20
	ts := newTestServer(t, func(c *serverConfig) { c.QuotaBytes = quota })
	c := signedInAdmin(t, ts)
	recreate := func(table string, more ...string) func(db *sql.DB) error {
		return execSQL(append([]string{"DROP TABLE moments", table}, more...)...)
	}
	cases := []struct {
		name   string
		change func(db *sql.DB) error
	}{
		{"generated body", func(db *sql.DB) error {
			err := recreate(`CREATE TABLE moments (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, body BLOB AS (zeroblob(65536)) VIRTUAL) WITHOUT ROWID`,
				`CREATE INDEX moments_time ON moments(created_at, id)`)(db)
			if err == nil {
				err = momentsRows(600, `INSERT INTO moments(id, created_at) VALUES (?, ?)`)(db)
			}
			return err
		}},
		{"fts5 moments", func(db *sql.DB) error {
			err := recreate(`CREATE VIRTUAL TABLE moments USING fts5(id, created_at, body)`)(db)
			if err == nil {
				err = momentsRows(3, `INSERT INTO moments(id, created_at, body) VALUES (?, ?, x'01')`)(db)
			}
			return err
		}},
		{"trigger", execSQL(`CREATE TABLE log(x BLOB)`, `CREATE TRIGGER grow AFTER INSERT ON moments BEGIN INSERT INTO log VALUES (zeroblob(65536)); END`)},
		{"extra table", execSQL(`CREATE TABLE notes(x BLOB)`, `INSERT INTO notes VALUES (x'00')`)},
		{"extra index", execSQL(`CREATE INDEX moments_body ON moments(body)`)},
		{"view", recreate(`CREATE VIEW moments AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n)
			SELECT '06f80une588vsk1m6147d3leds' AS id, i AS created_at, zeroblob(65536) AS body FROM n`)},
	}
	before := dirBytes(t, ts.dir)
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			hostile := alteredTar(t, tarball, cs.change)
			p := postImport(t, c, ts, "", hostile)
			after := dirBytes(t, ts.dir)
			t.Logf("a tar of %d bytes: %d, the data directory %d bytes larger", len(hostile), p.status, after-before)
			if p.status != 400 || !strings.Contains(p.body, "schema is not this server") {
				t.Errorf("import: %d, want 400 naming the schema\n%.2000s", p.status, p.body)
			}
			if _, _, err := ts.store.FindPersonByHandle(context.Background(), "ann"); nah.ErrorCode(err) != nah.NotFound {
				t.Fatalf("ann exists after a hostile import: %v", err)
			}
			if after > before+1<<20 {
				t.Errorf("the data directory grew by %d bytes", after-before)
			}
		})
	}
	if p := postImport(t, c, ts, "", tarball); p.status != 201 {
		t.Fatalf("the honest export after all that: %d\n%s", p.status, p.body)
	}
}

// TestImportHugeValue: values of an imported person.db are bounded in SQL
// before they are read, so a moment id that is a generated 50 MB string
// (from a tar of 20 KB) or a stored 4 MB one is refused with a 400 page of
// a few KB that repeats at most a few dozen bytes of it, and the import
// holds no more memory than its place in the memory plan (importCost in
// the Go heap) plus a few MB of SQLite's: not the value's size, twice.
func TestImportHugeValue(t *testing.T) {
	tarball := exportedTar(t)
	ts := newTestServer(t)
	c := signedInAdmin(t, ts)
	cases := []struct {
		name   string
		change func(db *sql.DB) error
	}{
		{"generated id", execSQL(`DROP TABLE moments`,
			`CREATE TABLE moments (created_at INTEGER NOT NULL, body BLOB NOT NULL, id TEXT AS (printf('%.*c', 52428800, 'x')) VIRTUAL)`,
			`CREATE INDEX moments_time ON moments(created_at)`,
			`INSERT INTO moments(created_at, body) VALUES (1700000000000, x'01')`)},
		{"stored id", execSQL(`UPDATE moments SET id = printf('%.*c', 4194304, 'x') WHERE id = (SELECT max(id) FROM moments)`)},
		{"stored content type", execSQL(`INSERT INTO media VALUES ('06f80une588vsk1m6147d3leds', 1, printf('%.*c', 64, 'a'), printf('%.*c', 4194304, 'x'), 1)`)},
	}
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			hostile := alteredTar(t, tarball, cs.change)
			// The form is made before the measure: the client's copy of the
			// tar is not the server's memory.
			var form bytes.Buffer
			mw := multipart.NewWriter(&form)
			fw, _ := mw.CreateFormFile("export", "ann.tar")
			fw.Write(hostile)
			mw.Close()
			req, _ := http.NewRequest("POST", ts.URL+"/console/people/import", bytes.NewReader(form.Bytes()))
			req.Header.Set("Content-Type", mw.FormDataContentType())
			var peak atomic.Uint64
			done, sampled := make(chan struct{}), make(chan struct{})
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			go func() {
				defer close(sampled)
				var s runtime.MemStats
				for {
					runtime.ReadMemStats(&s)
					if s.HeapInuse > peak.Load() {
						peak.Store(s.HeapInuse)
					}
					select {
					case <-done:
						return
					case <-time.After(time.Millisecond):
					}
				}
			}()
			store.ResetSQLiteMemoryPeak()
			sqliteBefore, _ := store.SQLiteMemory()
			p := send(t, c, req)
			close(done)
			<-sampled
			_, sqlitePeak := store.SQLiteMemory()
			held, sqliteHeld := int64(peak.Load())-int64(before.HeapInuse), sqlitePeak-sqliteBefore
			t.Logf("a tar of %d bytes: %d, a page of %d bytes; Go heap at most %d KB above before, SQLite %d KB", len(hostile), p.status, len(p.body), held>>10, sqliteHeld>>10)
			if p.status != 400 {
				t.Errorf("import: %d, want 400\n%.2000s", p.status, p.body)
			}
			if len(p.body) > 16<<10 || strings.Contains(p.body, strings.Repeat("x", 100)) {
				t.Errorf("the 400 page is %d bytes and repeats the value", len(p.body))
			}
			// The plan: importCost for the import's Go memory; SQLite's
			// length limit for the value (64 KiB) on top of its page cache.
			if held > 2*importCost || sqliteHeld > 8<<20 {
				t.Errorf("Go heap %d KB, SQLite %d KB above before: over the import's plan", held>>10, sqliteHeld>>10)
			}
		})
	}
	if p := postImport(t, c, ts, "", tarball); p.status != 201 {
		t.Fatalf("the honest export after all that: %d\n%s", p.status, p.body)
	}
}

// openFDs is how many descriptors this process (the server's) holds.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// TestFailedImportsLeaveNothing: imports that fail once the person's file
// would exist (a moment from the future, a media row whose file is not in
// the tar, more than the quota) on a server that replicates leave no
// folder in people/, no open file, no watched file and a healthy server:
// the import builds in its temporary folder and moves only a whole result
// into people/.
func TestFailedImportsLeaveNothing(t *testing.T) {
	tarball := exportedTar(t)
	rs := newReplicatedServer(t, func(c *serverConfig) { c.QuotaBytes = 1 << 20 })
	c := signedInAdmin(t, rs.testServer)
	future := alteredTar(t, tarball, execSQL(`UPDATE moments SET created_at = 253402300799000 WHERE id = (SELECT max(id) FROM moments)`))
	noFile := alteredTar(t, tarball, execSQL(`INSERT INTO media VALUES ('06f80une588vsk1m6147d3leds', 1, printf('%.*c', 64, 'a'), 'image/png', 1)`))
	big := alteredTar(t, tarball, momentsRows(30, `INSERT INTO moments(id, created_at, body) VALUES (?, ?, zeroblob(60000))`))
	people := func() []string {
		es, _ := os.ReadDir(filepath.Join(rs.dir, "people"))
		var ns []string
		for _, e := range es {
			ns = append(ns, e.Name())
		}
		return ns
	}
	before, fds := people(), openFDs(t)
	for i := range 30 {
		hostile := [][]byte{future, noFile, big}[i%3]
		if p := postImport(t, c, rs.testServer, "", hostile); p.status/100 != 4 {
			t.Fatalf("import %d: %d, want a 4xx\n%.1000s", i, p.status, p.body)
		}
	}
	time.Sleep(500 * time.Millisecond) // replication's queue runs
	after, fdsAfter := people(), openFDs(t)
	t.Logf("30 failed imports: people/ %d entries before, %d after; descriptors %d before, %d after", len(before), len(after), fds, fdsAfter)
	if len(after) != len(before) {
		t.Errorf("people/ holds %v after the failed imports, %v before", after, before)
	}
	if fdsAfter > fds+5 {
		t.Errorf("%d descriptors open after the failed imports, %d before", fdsAfter, fds)
	}
	if h := rs.do(t, "GET", "/healthz", "", nil); h.status != 200 || h.str("status") != "ok" {
		t.Errorf("healthz after the failed imports: %d %s", h.status, h.raw)
	}
	if left, _ := filepath.Glob(filepath.Join(rs.dir, "import-*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	if p := postImport(t, c, rs.testServer, "", tarball); p.status != 201 {
		t.Fatalf("the honest export after all that: %d\n%s", p.status, p.body)
	}
}
