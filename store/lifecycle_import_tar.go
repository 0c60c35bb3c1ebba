package store

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/nah-app/nah"
)

// manifestMaxBytes bounds manifest.json: a few hundred bytes plus ~70 per
// connection, and a person has at most a few hundred connections.
const manifestMaxBytes = 1 << 20

// readExport extracts the tar from r into dir, which must be empty,
// accepting regular files only: person.db, then any media/<id> (into
// dir/media), then manifest.json; and checks person.db against the
// manifest, and the media against its count (format 2) or its list (format
// 1). It returns the media files with their size and sha256 (tarMedia),
// which copyMedia checks against person.db's rows.
// Sizes in headers are never trusted: a header over a limit is refused,
// and copying stops at the limit and at what the header promised,
// whichever comes first.
func readExport(ctx context.Context, r io.Reader, dir string, opts ImportOptions) (*Manifest, *tarMedia, error) {
	media, err := newTarMedia(ctx, dir)
	if err != nil {
		return nil, nil, err
	}
	m, err := readEntries(ctx, r, dir, opts, media)
	if err == nil {
		err = media.done()
	}
	if err == nil {
		err = checkManifestMedia(ctx, m, media)
	}
	if err != nil {
		media.Close()
		return nil, nil, err
	}
	return m, media, nil
}

// checkManifestMedia checks the tar's media against the manifest: their
// count (format 2) or each one's size and sha256 (format 1's list).
func checkManifestMedia(ctx context.Context, m *Manifest, media *tarMedia) error {
	if m.FormatVersion >= 2 {
		if len(m.Files) != 1 || m.MediaCount != media.count {
			return badExport("the tar holds %d media files and the manifest counts %d (and lists %d files, not only person.db)", media.count, m.MediaCount, len(m.Files))
		}
		return nil
	}
	for _, f := range m.Files[1:] {
		got, ok, err := media.get(ctx, path.Base(f.Name))
		if err != nil {
			return err
		}
		if !ok || f.Name != nah.MediaDirName+"/"+path.Base(f.Name) || got.Size != f.Size || got.SHA256 != f.SHA256 {
			return badExport("%s does not match the manifest's size and sha256: the file is damaged or was changed", short(f.Name))
		}
	}
	if len(m.Files)-1 != media.count {
		return badExport("the tar holds %d media files and the manifest lists %d", media.count, len(m.Files)-1)
	}
	return nil
}

func readEntries(ctx context.Context, r io.Reader, dir string, opts ImportOptions, media *tarMedia) (*Manifest, error) {
	maxBytes := opts.MaxBytes
	tr := tar.NewReader(r)
	var (
		m       *Manifest
		dbSize  int64
		dbSum   string
		seenDB  bool
		entries int
		total   int64
		// One copy buffer for every entry: one a file was 32 KiB of
		// garbage a media, enough to make the heap's peak grow with the
		// count (TestImportMemoryIsConstant).
		buf = make([]byte, exportCopyBuffer)
	)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, badExport("reading the tar: %v", err)
		}
		entries++
		if m != nil {
			return nil, badExport("more entries after manifest.json (%s)", short(h.Name))
		}
		if h.Typeflag != tar.TypeReg {
			return nil, badExport("entry %s is not a regular file", short(h.Name))
		}
		if h.Size < 0 {
			return nil, badExport("entry %s has a negative size", short(h.Name))
		}
		id, isMedia := strings.CutPrefix(h.Name, nah.MediaDirName+"/")
		switch {
		case isMedia:
			if !seenDB || m != nil {
				return nil, badExport("%s is before person.db or after the manifest", short(h.Name))
			}
			if !nah.ValidMediaID(id) {
				return nil, badExport("unexpected entry %s (media are media/<id>)", short(h.Name))
			}
			if media.count >= nah.MaxMediaCount {
				return nil, nah.Errorf(nah.QuotaExceeded, "", "the export holds more than %d media files, the most a person may keep", nah.MaxMediaCount)
			}
			if h.Size > opts.MaxMediaBytes {
				return nil, nah.Errorf(nah.TooLarge, "too_large", "%s claims %d bytes, over the limit of %d", h.Name, h.Size, opts.MaxMediaBytes)
			}
			if total += nah.MediaCharge(h.Size); total > opts.QuotaBytes {
				return nil, nah.Errorf(nah.QuotaExceeded, "", "the export holds more than the quota of %d bytes", opts.QuotaBytes)
			}
			if media.count == 0 {
				if err := os.Mkdir(filepath.Join(dir, nah.MediaDirName), privateDir); err != nil {
					return nil, err
				}
			}
			size, sum, err := copyEntry(tr, filepath.Join(dir, nah.MediaDirName, id), h.Size, buf)
			if errors.Is(err, fs.ErrExist) {
				return nil, badExport("%s appears twice", h.Name)
			}
			if err != nil {
				return nil, err
			}
			if err := media.add(ctx, id, size, sum); err != nil {
				return nil, err
			}
		case h.Name == nah.PersonFileName:
			if seenDB || m != nil {
				return nil, badExport("person.db appears twice, or after the manifest")
			}
			seenDB = true
			if h.Size > maxBytes {
				return nil, nah.Errorf(nah.TooLarge, "too_large", "person.db claims %d bytes, over the limit of %d", h.Size, maxBytes)
			}
			dbSize, dbSum, err = copyEntry(tr, filepath.Join(dir, nah.PersonFileName), h.Size, buf)
			if err != nil {
				return nil, err
			}
			total = dbSize
		case h.Name == "manifest.json":
			if m != nil {
				return nil, badExport("manifest.json appears twice")
			}
			if h.Size > manifestMaxBytes {
				return nil, badExport("manifest.json claims %d bytes, over the limit of %d", h.Size, manifestMaxBytes)
			}
			b, err := io.ReadAll(io.LimitReader(tr, h.Size))
			if err != nil || int64(len(b)) != h.Size {
				return nil, badExport("manifest.json is truncated")
			}
			m = new(Manifest)
			if err := json.Unmarshal(b, m); err != nil {
				return nil, badExport("manifest.json: %v", err)
			}
		default:
			return nil, badExport("unexpected entry %s (an export holds person.db, media/<id> and manifest.json)", short(h.Name))
		}
	}
	if m == nil || !seenDB {
		return nil, badExport("person.db and manifest.json are both needed")
	}
	if m.Format != ExportFormat {
		return nil, badExport("the manifest's format is %s, not %q", short(m.Format), ExportFormat)
	}
	if m.FormatVersion < 1 || m.FormatVersion > exportFormatVersion {
		return nil, badExport("format version %d; this server reads versions 1 to %d", m.FormatVersion, exportFormatVersion)
	}
	if len(m.Connections) > nah.MaxConnections {
		return nil, badExport("the manifest lists %d connections; a person has at most %d", len(m.Connections), nah.MaxConnections)
	}
	for _, c := range m.Connections {
		if !nah.ValidHandle(c.Handle) || len(c.ConnectedAt) > len(nah.TimeFormat) {
			return nil, badExport("the manifest lists a connection %s that is not a valid handle", short(c.Handle))
		}
	}
	if m.SchemaVersion > len(personMigrations) {
		return nil, nah.Errorf(nah.Invalid, "export_too_new",
			"the export was made by nah %s with person schema %d, and this server reads person schema up to %d: upgrade this server first",
			short(m.ServerVersion), m.SchemaVersion, len(personMigrations))
	}
	if len(m.Files) == 0 || m.Files[0].Name != nah.PersonFileName {
		return nil, badExport("the manifest must list person.db first")
	}
	if want := m.Files[0]; want.Size != dbSize || want.SHA256 != dbSum {
		return nil, badExport("person.db does not match the manifest's size and sha256: the file is damaged or was changed")
	}
	return m, nil
}

// copyEntry copies the current tar entry, which claims size bytes, to a new
// file at p through buf, and returns its size and sha256. It never copies more than
// size; fewer bytes than size is a truncated export.
func copyEntry(r io.Reader, p string, size int64, buf []byte) (int64, string, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, privateFile)
	if err != nil {
		return 0, "", err
	}
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(f, h), io.LimitReader(r, size), buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, "", badExport("person.db is truncated")
		}
		return 0, "", err
	}
	if n != size {
		return 0, "", badExport("person.db is truncated: %d bytes of %d", n, size)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// tarMediaName is the scratch database, in an import's temporary folder,
// of the tar's media files with their size and sha256, which copyMedia
// checks person.db's rows against. On disk, not in a map: ~200 bytes an
// entry, 20 MB at nah.MaxMediaCount, against the import's 2 MiB in the
// memory plan (TestImportMemoryIsConstant).
const tarMediaName = "tar-media.db"

// tarMedia is the tar's media as readEntries found them: their count and
// quota charge in memory, each one's size and sha256 in a scratch table
// filled in one transaction and read once it commits (done).
type tarMedia struct {
	db      *sql.DB
	tx      *sql.Tx
	ins     *sql.Stmt
	count   int
	charged int64
}

func newTarMedia(ctx context.Context, dir string) (*tarMedia, error) {
	db, err := openDB(filepath.Join(dir, tarMediaName), false, 1, 256, SyncNormal, false)
	if err != nil {
		return nil, err
	}
	t := &tarMedia{db: db}
	_, err = db.ExecContext(ctx, `CREATE TABLE files(id TEXT PRIMARY KEY, size INTEGER NOT NULL, sha256 TEXT NOT NULL) WITHOUT ROWID`)
	if err == nil {
		t.tx, err = db.BeginTx(ctx, nil)
	}
	if err == nil {
		t.ins, err = t.tx.PrepareContext(ctx, `INSERT INTO files(id, size, sha256) VALUES (?, ?, ?)`)
	}
	if err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// add records media file id of the tar, of size bytes and sha256 sum.
func (t *tarMedia) add(ctx context.Context, id string, size int64, sum string) error {
	if _, err := t.ins.ExecContext(ctx, id, size, sum); err != nil {
		return err
	}
	t.count++
	t.charged += nah.MediaCharge(size)
	return nil
}

// done commits what add recorded, for get.
func (t *tarMedia) done() error {
	t.ins.Close()
	err := t.tx.Commit()
	t.ins, t.tx = nil, nil
	return err
}

// get returns the size and sha256 of the tar's media file id, if it has one.
func (t *tarMedia) get(ctx context.Context, id string) (f ManifestFile, ok bool, err error) {
	err = t.db.QueryRowContext(ctx, `SELECT size, sha256 FROM files WHERE id = ?`, id).Scan(&f.Size, &f.SHA256)
	if errors.Is(err, sql.ErrNoRows) {
		return f, false, nil
	}
	return f, err == nil, err
}

func (t *tarMedia) Close() error {
	if t.tx != nil {
		t.ins.Close()
		t.tx.Rollback()
	}
	return t.db.Close()
}
