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
	"path"
	"path/filepath"
	"time"

	sqlite "modernc.org/sqlite"

	"github.com/nah-app/nah"
)

// A person's export is a tar, its manifest last so that its checksums are
// computed in the one read of each entry (an import extracts all before it
// trusts any, so it loses nothing):
//
//	person.db      a consistent copy of the person file
//	media/<id>     each media file with a row in that copy, by id
//	manifest.json  who, when, which schema, their connections, and a
//	               sha256 of every entry before it

// ExportFormat is Manifest.Format: what tells a nah export from any tar.
const ExportFormat = "nah-export"

// exportFormatVersion is Manifest.FormatVersion, raised when the layout
// of the tar changes in a way an older import could not read.
const exportFormatVersion = 1

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
	// Files lists every other entry of the tar, in its order.
	Files []ManifestFile `json:"files"`
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
// Close releases the copy. The copy's file is unlinked as soon as it is
// open, so a crash while the tar streams leaves nothing behind.
type Export struct {
	Person nah.Person
	At     time.Time

	manifest Manifest
	snap     *os.File
	size     int64
	// media are the media files of the copy's rows, hard-linked into
	// linkDir as the copy was taken: a delete during the download unlinks
	// only the person's own name of the file, so the tar still holds
	// exactly what the copy's rows say.
	media   []ManifestFile
	linkDir string
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
			var err error
			if e.snap, m.SchemaVersion, err = backupFile(ctx, f.path); err != nil {
				return err
			}
			if e.media, e.linkDir, err = linkMedia(ctx, f.db, filepath.Dir(f.path)); err != nil {
				e.snap.Close()
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

// backupFile copies the database at p into an unlinked file beside it, open
// for reading, with its schema version. An export holds p in the cache, so
// this close never checkpoints or tells replication; the sweep's (Store.Backup)
// may be the last and empty a small WAL, which is harmless.
func backupFile(ctx context.Context, p string) (_ *os.File, schema int, err error) {
	removeStaleExports(filepath.Dir(p))
	tmp, err := os.CreateTemp(filepath.Dir(p), "export-*.db")
	if err != nil {
		return nil, 0, err
	}
	dst := tmp.Name()
	tmp.Close()
	defer func() {
		// The copy is unlinked on success too: it lives on as the open file.
		os.Remove(dst)
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

// linkMedia hard-links every media file of db's rows from dir/media into
// a new folder dir/export-*.media, and lists them (size and sha256 from
// their rows). No media: no folder.
func linkMedia(ctx context.Context, db *sql.DB, dir string) (files []ManifestFile, linkDir string, err error) {
	rows, err := db.QueryContext(ctx, `SELECT id, size, sha256 FROM media ORDER BY id`)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	for rows.Next() {
		var f ManifestFile
		if err := rows.Scan(&f.Name, &f.Size, &f.SHA256); err != nil {
			return nil, "", err
		}
		files = append(files, f)
	}
	if err := rows.Err(); err != nil || len(files) == 0 {
		return nil, "", err
	}
	if linkDir, err = os.MkdirTemp(dir, "export-*.media"); err != nil {
		return nil, "", err
	}
	for i, f := range files {
		if err := os.Link(filepath.Join(dir, nah.MediaDirName, f.Name), filepath.Join(linkDir, f.Name)); err != nil {
			os.RemoveAll(linkDir)
			return nil, "", err
		}
		files[i].Name = nah.MediaDirName + "/" + f.Name
	}
	return files, linkDir, nil
}

// Filename is the name the export is downloaded under.
func (e *Export) Filename() string { return ExportFilename(e.Person.Handle, e.At) }

// ExportFilename is the name of an export of handle made at at:
// nah-<handle>-<YYYYMMDD>.tar, the date in UTC.
func ExportFilename(handle string, at time.Time) string {
	return "nah-" + handle + "-" + at.UTC().Format("20060102") + ".tar"
}

// WriteTo streams the tar to w through one small buffer: person.db, then
// manifest.json with the checksum computed on the way.
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
	for _, f := range e.media {
		sum, err := writeMedia(tw, filepath.Join(e.linkDir, path.Base(f.Name)), f, e.At, buf)
		if err != nil {
			return cw.n, err
		}
		f.SHA256 = sum // what was sent, which the import checks against the row's
		m.Files = append(m.Files, f)
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

// writeMedia writes one media file as the tar entry f.Name and returns
// the sha256 of what it sent.
func writeMedia(tw *tar.Writer, p string, f ManifestFile, at time.Time, buf []byte) (string, error) {
	src, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer src.Close()
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.Name, Mode: 0o600, Size: f.Size, ModTime: at}); err != nil {
		return "", err
	}
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(tw, h), io.LimitReader(struct{ io.Reader }{src}, f.Size), buf)
	if err == nil && n != f.Size {
		err = fmt.Errorf("export: %s: copied %d bytes of %d", f.Name, n, f.Size)
	}
	return hex.EncodeToString(h.Sum(nil)), err
}

// Close releases the copy of the database and the links to the media.
func (e *Export) Close() error {
	if e.linkDir != "" {
		os.RemoveAll(e.linkDir)
	}
	return e.snap.Close()
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
// taken out of the tar), checks it with PRAGMA integrity_check, and
// returns the ids of its moments: for tests outside this package, which
// must not import the driver, and for an import's first look at a file.
func ExportedMoments(ctx context.Context, path string) ([]string, error) {
	db, err := openDB(path, true, 1, personCacheKiB, SyncFull, false)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var check string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&check); err != nil {
		return nil, err
	}
	if check != "ok" {
		return nil, fmt.Errorf("%s: integrity_check: %s", path, check)
	}
	rows, err := db.QueryContext(ctx, "SELECT id FROM moments ORDER BY created_at, id")
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

// removeStaleExports removes scratch copies and media links in dir that a
// crash left.
func removeStaleExports(dir string) {
	old, _ := filepath.Glob(filepath.Join(dir, "export-*.db"))
	links, _ := filepath.Glob(filepath.Join(dir, "export-*.media"))
	for _, f := range append(old, links...) {
		if fi, err := os.Stat(f); err == nil && time.Since(fi.ModTime()) > staleExport {
			os.RemoveAll(f)
		}
	}
}
