package store

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	sqlite "modernc.org/sqlite"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/internal/integrity"
)

// A person's export is a tar, its manifest last so that its checksum is
// computed in the one read of person.db (an import extracts all before it
// trusts any, so it loses nothing):
//
//	person.db      a consistent copy of the person file
//	media/<id>     each media file with a row in that copy, by id
//	manifest.json  who, when, which schema, their connections, person.db's
//	               size and sha256, and how many media files
//
// Format 2 names no media file in the manifest: each is checked on import
// against its row (size and sha256), so the manifest and the export's
// memory stay the same size for any number of media. Format 1 listed
// every file, and passed the 1 MiB manifest limit at about 7,000 media.

// ExportFormat is Manifest.Format: what tells a nah export from any tar.
const ExportFormat = "nah-export"

// exportFormatVersion is Manifest.FormatVersion, raised when the layout
// of the tar changes in a way an older import could not read. Imports
// read every version up to it.
const exportFormatVersion = 2

// exportCopyBuffer is the one buffer an export streams through.
const exportCopyBuffer = 32 << 10

// Manifest is manifest.json of an export. Times are in nah.TimeFormat, as
// everywhere in the API.
type Manifest struct {
	Format        string `json:"format"`
	FormatVersion int    `json:"format_version"`
	Person        struct {
		ID        string `json:"id"`
		Handle    string `json:"handle"`
		CreatedAt string `json:"created_at"`
	} `json:"person"`
	ExportedAt    string `json:"exported_at"`
	ServerVersion string `json:"server_version"`
	// SchemaVersion is person.db's PRAGMA user_version.
	SchemaVersion int                  `json:"schema_version"`
	Connections   []ManifestConnection `json:"connections"`
	// Files lists person.db (format 2), or every other entry of the tar
	// in its order (format 1).
	Files []ManifestFile `json:"files"`
	// MediaCount is how many media/<id> entries the tar holds (format 2).
	MediaCount int `json:"media_count"`
}

// ManifestConnection is one of the person's connections at export time.
type ManifestConnection struct {
	Handle      string `json:"handle"`
	ConnectedAt string `json:"connected_at"`
}

// ManifestFile is one entry of the tar besides the manifest.
type ManifestFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Export is a person's export made ready to stream: the copy of their
// database is taken and every fact of the manifest known, so whatever can
// fail before the first byte has failed already. WriteTo streams it once;
// Close releases the copy. A crash while the tar streams leaves the copy's
// folder, which the person's next export removes once it is an hour old.
type Export struct {
	Person nah.Person
	At     time.Time

	manifest Manifest
	snap     *os.File
	size     int64
	// linkDir holds the copy (person.db) and a hard link of each media
	// file of its rows, made as the copy was taken: a delete during the
	// download unlinks only the person's own name of the file, so the tar
	// still holds exactly what the copy's rows say. copyDB reads those
	// rows again, one at a time, as the tar is written.
	linkDir string
	copyDB  *sql.DB
	media   int
}

// backuper is what modernc's connection offers for SQLite's online backup
// API (sqlite3_backup_*).
type backuper interface {
	NewBackup(dstURI string) (*sqlite.Backup, error)
}

// ExportPerson copies person id's database and gathers the manifest (with
// serverVersion as is). The copy is one backup step over a second, read-only
// connection: one read transaction that blocks no writer, never restarted by
// a write (stepped, under steady posting it might never finish).
func (s *Store) ExportPerson(ctx context.Context, id, serverVersion string) (*Export, error) {
	p, err := s.FindPersonByID(ctx, id)
	if err != nil {
		return nil, err
	}
	cs, err := s.Connections(ctx, id)
	if err != nil {
		return nil, err
	}
	e := &Export{Person: p, At: s.now()}
	m := &e.manifest
	m.Format, m.FormatVersion = ExportFormat, exportFormatVersion
	m.Person.ID, m.Person.Handle, m.Person.CreatedAt = p.ID, p.Handle, nah.FormatTime(p.CreatedAt)
	m.ExportedAt = nah.FormatTime(e.At.UnixMilli())
	m.ServerVersion = serverVersion
	m.Connections = make([]ManifestConnection, 0, len(cs))
	for _, c := range cs {
		m.Connections = append(m.Connections, ManifestConnection{Handle: c.Handle, ConnectedAt: nah.FormatTime(c.ConnectedAt)})
	}
	// Under the person's media lock, no upload commits and no delete
	// runs: the copy's rows and the linked files agree.
	err = s.withUsage(ctx, id, func(*mediaUsage) error {
		return s.useFile(ctx, id, false, func(f *personFile) error {
			dir := filepath.Dir(f.path)
			removeStaleExports(dir)
			var err error
			if e.linkDir, err = os.MkdirTemp(dir, "export-*.media"); err != nil {
				return err
			}
			copyPath := filepath.Join(e.linkDir, nah.PersonFileName)
			if e.snap, m.SchemaVersion, err = backupFile(ctx, f.path, copyPath); err != nil {
				os.RemoveAll(e.linkDir)
				return err
			}
			if e.copyDB, err = openDB(copyPath, true, 1, personCacheKiB, SyncFull, false); err == nil {
				e.media, err = linkMedia(ctx, e.copyDB, filepath.Join(dir, nah.MediaDirName), e.linkDir)
			}
			if err != nil {
				e.Close()
			}
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	st, err := e.snap.Stat()
	if err != nil {
		e.Close()
		return nil, err
	}
	e.size = st.Size()
	return e, nil
}

// backupFile copies the database at p into dst, a new file, and returns
// it open for reading with its schema version. Its connection closes
// without a checkpoint: the sweep's copy of a closed file (Store.Backup)
// is the file's last connection, and its checkpoint would move frames no
// ship has read into the database, the queued ship then finding no WAL to
// carry on from (a take-up and a whole snapshot; TestClosedReadsKeepTheWAL).
func backupFile(ctx context.Context, p, dst string) (_ *os.File, schema int, err error) {
	tmp, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, privateFile)
	if err != nil {
		return nil, 0, err
	}
	tmp.Close()
	defer func() {
		if err != nil {
			os.Remove(dst)
		}
	}()

	db, err := openDB(p, true, 1, personCacheKiB, SyncFull, false)
	if err != nil {
		return nil, 0, err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&schema); err != nil {
		return nil, 0, err
	}
	if err := conn.Raw(noCheckpointOnCloseRaw); err != nil {
		return nil, 0, err
	}
	err = conn.Raw(func(dc any) error {
		bk, ok := dc.(backuper)
		if !ok {
			return errors.New("sqlite: the driver's connection has no backup API")
		}
		// The copy is a scratch file until it is read back: no journal,
		// no fsync, and a small page cache, since the backup writes each
		// page once.
		b, err := bk.NewBackup(dst + "?_pragma=journal_mode(OFF)&_pragma=synchronous(OFF)&_pragma=cache_size(-64)")
		if err != nil {
			return err
		}
		_, err = b.Step(-1) // every page in one step: one read transaction
		return errors.Join(err, b.Finish())
	})
	if err != nil {
		return nil, 0, fmt.Errorf("%s: backup: %w", p, err)
	}
	f, err := os.Open(dst)
	if err != nil {
		return nil, 0, err
	}
	return f, schema, nil
}

// backupUnlinked is backupFile into a file beside p, unlinked once open
// (Store.Backup's copies): a crash while it is read leaves nothing.
func backupUnlinked(ctx context.Context, p string) (*os.File, int, error) {
	removeStaleExports(filepath.Dir(p))
	tmp, err := os.CreateTemp(filepath.Dir(p), "export-*.db")
	if err != nil {
		return nil, 0, err
	}
	tmp.Close()
	f, schema, err := backupFile(ctx, p, tmp.Name())
	os.Remove(tmp.Name())
	return f, schema, err
}

// linkMedia hard-links every media file of the copy's rows (db) from
// mediaDir into linkDir, walking the rows with one cursor, and counts them.
func linkMedia(ctx context.Context, db *sql.DB, mediaDir, linkDir string) (n int, err error) {
	rows, err := db.QueryContext(ctx, `SELECT id FROM media`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var id string
	for rows.Next() {
		if err := rows.Scan(&id); err != nil {
			return 0, err
		}
		if err := os.Link(filepath.Join(mediaDir, id), filepath.Join(linkDir, id)); err != nil {
			return 0, err
		}
		n++
	}
	return n, rows.Err()
}

// Filename is the name the export is downloaded under.
func (e *Export) Filename() string { return ExportFilename(e.Person.Handle, e.At) }

// ExportFilename is the name of an export of handle made at at:
// nah-<handle>-<YYYYMMDD>.tar, the date in UTC.
func ExportFilename(handle string, at time.Time) string {
	return "nah-" + handle + "-" + at.UTC().Format("20060102") + ".tar"
}

// WriteTo streams the tar to w through one small buffer: person.db with
// its checksum computed on the way, each media file of the copy's rows as
// a cursor reads them, then manifest.json. Its memory does not grow with
// the number of media (TestExportMemoryIsConstant).
func (e *Export) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	tw := tar.NewWriter(cw)
	h := sha256.New()
	err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: nah.PersonFileName, Mode: 0o600, Size: e.size, ModTime: e.At,
	})
	if err != nil {
		return cw.n, err
	}
	// The struct hides the file's WriteTo, which would copy through a
	// buffer of its own.
	buf := make([]byte, exportCopyBuffer)
	n, err := io.CopyBuffer(io.MultiWriter(tw, h), struct{ io.Reader }{e.snap}, buf)
	if err != nil {
		return cw.n, err
	}
	if n != e.size {
		return cw.n, fmt.Errorf("export: person.db: copied %d bytes of %d", n, e.size)
	}
	m := e.manifest
	m.Files = []ManifestFile{{Name: nah.PersonFileName, Size: e.size, SHA256: hex.EncodeToString(h.Sum(nil))}}
	if m.MediaCount, err = e.writeMedia(tw, buf); err != nil {
		return cw.n, err
	}
	if m.MediaCount != e.media {
		return cw.n, fmt.Errorf("export: %d media rows in the copy, %d linked", m.MediaCount, e.media)
	}
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return cw.n, err
	}
	body = append(body, '\n')
	err = tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: "manifest.json", Mode: 0o600, Size: int64(len(body)), ModTime: e.At,
	})
	if err == nil {
		_, err = tw.Write(body)
	}
	if err == nil {
		err = tw.Close()
	}
	return cw.n, err
}

// writeMedia writes each media file of the copy's rows, read by one
// cursor, as the tar entry media/<id>, and counts them.
func (e *Export) writeMedia(tw *tar.Writer, buf []byte) (n int, err error) {
	rows, err := e.copyDB.Query(`SELECT id, size FROM media ORDER BY id`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var (
		id   string
		size int64
	)
	for rows.Next() {
		if err := rows.Scan(&id, &size); err != nil {
			return 0, err
		}
		if err := writeMediaFile(tw, filepath.Join(e.linkDir, id), nah.MediaDirName+"/"+id, size, e.At, buf); err != nil {
			return 0, err
		}
		n++
	}
	return n, rows.Err()
}

// writeMediaFile writes the file at p as the tar entry name of size bytes.
func writeMediaFile(tw *tar.Writer, p, name string, size int64, at time.Time, buf []byte) error {
	src, err := os.Open(p)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: size, ModTime: at}); err != nil {
		return err
	}
	n, err := io.CopyBuffer(tw, io.LimitReader(struct{ io.Reader }{src}, size), buf)
	if err == nil && n != size {
		err = fmt.Errorf("export: %s: copied %d bytes of %d", name, n, size)
	}
	return err
}

// Close releases the copy of the database and the links to the media.
func (e *Export) Close() error {
	var err error
	if e.copyDB != nil {
		err = e.copyDB.Close()
	}
	if e.snap != nil {
		err = errors.Join(err, e.snap.Close())
	}
	if e.linkDir != "" {
		os.RemoveAll(e.linkDir)
	}
	return err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ExportedMoments opens the database of an export at path (person.db,
// taken out of the tar), checks it with SQLite's integrity check, and
// returns the ids of its moments: for tests outside this package, which
// must not import the driver.
func ExportedMoments(ctx context.Context, path string) ([]string, error) {
	db, err := openDB(path, true, 1, personCacheKiB, SyncFull, false)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := integrity.Check(ctx, db, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rows, err := db.QueryContext(ctx, "SELECT id FROM moments ORDER BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// staleExport is how old a scratch copy must be before the next export of
// the same person removes it: a copy lives milliseconds and is unlinked at
// once, so one still there an hour later was left by a crash mid-copy.
const staleExport = time.Hour

// removeStaleExports removes the copies and media links in dir that a
// crash left (export-*.db: format 1's copies, made beside the file).
func removeStaleExports(dir string) {
	old, _ := filepath.Glob(filepath.Join(dir, "export-*.db"))
	links, _ := filepath.Glob(filepath.Join(dir, "export-*.media"))
	for _, f := range append(old, links...) {
		if fi, err := os.Stat(f); err == nil && time.Since(fi.ModTime()) > staleExport {
			os.RemoveAll(f)
		}
	}
}
