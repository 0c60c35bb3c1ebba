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
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/nah-app/nah"
)

// An import ("move") recreates a person from their export,
// another server's tar (lifecycle_export.go). Everything in the tar is untrusted: it
// is copied into a temporary folder under the data directory, checked whole
// (entries, sizes, checksums, schema, SQLite's integrity check), and only
// then does anything reach the directory or people/. person.db is read as
// an untrusted file (lifecycle_untrusted.go): exactly our schema, every value bounded
// in SQL before Go reads it. The moments are copied row by row into a fresh
// person file rather than the file being moved in, and the quota counts
// what that copy writes, not what the tar claims.

// ImportLinkTTL is how long the one-time link of an imported person works.
const ImportLinkTTL = 24 * time.Hour

// DefaultImportMaxBytes is ImportOptions.MaxBytes when zero: the most
// person.db may hold. Five posts a day for ten years of 4 KB bodies is
// about 75 MB; 1 GiB leaves room for far chattier people and is still a
// size that a data directory's disk should never be surprised by.
const DefaultImportMaxBytes = 1 << 30

// manifestMaxBytes bounds manifest.json: a few hundred bytes plus ~70 per
// connection, and a person has at most a few hundred connections.
const manifestMaxBytes = 1 << 20

// ImportOptions tunes ImportPerson.
type ImportOptions struct {
	// Handle, when set, replaces the export's handle (when that one is
	// taken here).
	Handle string
	// MaxBytes bounds person.db; DefaultImportMaxBytes when zero.
	MaxBytes int64
	// MaxMediaBytes bounds each media file (nah.DefaultMaxMediaBytes when
	// zero), and QuotaBytes the database and media together
	// (nah.DefaultQuotaBytes): the limits an upload here would meet.
	MaxMediaBytes int64
	QuotaBytes    int64
	// MaxMomentBytes bounds each moment's body, as posting does;
	// nah.DefaultMaxMomentBytes when zero. A larger one is refused: it
	// would be read whole into memory here, and by every head and page
	// that holds it afterwards.
	MaxMomentBytes int
}

// ImportResult is what an import made.
type ImportResult struct {
	Person nah.Person
	// Link is the token of a one-time reset link (LinkReset, valid
	// ImportLinkTTL): the imported person has no password until they use it.
	Link    string
	Moments int
	// Connections are the handles of the person's former connections that
	// have an account here. Connections are mutual consent: they are not
	// recreated, only named.
	Connections []string
}

// An import's temporary folder (importTmpPattern) holds a lock file
// (tryLock) for as long as the import runs; the kernel drops it when the
// process dies, kill -9 included, so an unlocked folder is a dead one's,
// whatever its age. It is made and locked as importNewPattern, then
// renamed; an unlocked importNewPattern entry is judged once importNewAge
// old. Done, it is renamed importDeadPattern and then removed.
const (
	importTmpPattern  = "import-tmp-"
	importNewPattern  = "import-new-"
	importDeadPattern = "import-dead-"
	importLockName    = ".lock"
	importNewAge      = time.Second
)

// staleImportAge is when a temporary folder without a lock file (made by a
// version before the lock) is surely left by a crash: an import in the
// console gives up after 30 minutes, and one from the command line reads a
// local file.
const staleImportAge = 24 * time.Hour

// removeStaleImports removes what imports cut off by a crash left in dir:
// temporary folders whose import no longer holds their lock. A locked one
// is an import running, maybe in another process (`nah person import`
// beside a server), and is left alone.
func removeStaleImports(dir string, now time.Time, log *slog.Logger) {
	ms, _ := filepath.Glob(filepath.Join(dir, importTmpPattern+"*"))
	news, _ := filepath.Glob(filepath.Join(dir, importNewPattern+"*"))
	deads, _ := filepath.Glob(filepath.Join(dir, importDeadPattern+"*"))
	for _, m := range append(append(ms, news...), deads...) {
		if !strings.HasPrefix(filepath.Base(m), importDeadPattern) && !deadImport(m, now) {
			continue
		}
		if err := os.RemoveAll(m); err != nil {
			log.Warn("cannot remove what an interrupted import left", "path", m, "err", err)
		} else {
			log.Info("removed what an interrupted import left", "path", m)
		}
	}
}

// deadImport reports whether the import entry at m (importTmpPattern or
// importNewPattern) is no running import's. A young importNewPattern entry
// is first left to be importNewAge old (by the file system's clock: now
// may be a test's), so that no check of its lock races with its making.
func deadImport(m string, now time.Time) bool {
	info, err := os.Lstat(m)
	if err != nil {
		return false
	}
	isNew := strings.HasPrefix(filepath.Base(m), importNewPattern)
	if age := time.Since(info.ModTime()); isNew && age < importNewAge {
		time.Sleep(importNewAge - age)
		if info, err = os.Lstat(m); err != nil {
			return false // renamed or removed by its import meanwhile
		}
	}
	lock := m // a marker being made locks itself
	if info.IsDir() {
		lock = filepath.Join(m, importLockName)
	}
	f, err := os.Open(lock)
	switch {
	case err == nil:
		defer f.Close()
		return tryLock(f) == nil
	case !os.IsNotExist(err):
		return false
	case isNew:
		return true // killed before its lock file was made
	}
	// A folder is renamed only once locked: one without a lock file is an
	// earlier version's, removed after a day as then.
	return now.Sub(info.ModTime()) >= staleImportAge
}

// makeImportTmp makes an import's temporary folder in dir, locked until
// the returned file is closed (importTmpPattern).
func makeImportTmp(dir string) (tmp string, lock *os.File, err error) {
	made, err := os.MkdirTemp(dir, importNewPattern)
	if err != nil {
		return "", nil, err
	}
	if lock, err = os.OpenFile(filepath.Join(made, importLockName), os.O_RDWR|os.O_CREATE|os.O_EXCL, privateFile); err == nil {
		if err = tryLock(lock); err != nil {
			lock.Close()
		}
	}
	if err != nil {
		os.RemoveAll(made)
		return "", nil, err
	}
	tmp = filepath.Join(dir, importTmpPattern+strings.TrimPrefix(filepath.Base(made), importNewPattern))
	if err := os.Rename(made, tmp); err != nil {
		lock.Close()
		os.RemoveAll(made)
		return "", nil, err
	}
	return tmp, lock, nil
}

// removeImportTmp removes an import's temporary folder and then drops its
// lock (importDeadPattern).
func removeImportTmp(tmp string, lock *os.File) {
	dead := filepath.Join(filepath.Dir(tmp), importDeadPattern+strings.TrimPrefix(filepath.Base(tmp), importTmpPattern))
	if os.Rename(tmp, dead) == nil {
		tmp = dead
	}
	os.RemoveAll(tmp)
	lock.Close()
}

func badExport(format string, args ...any) error {
	return nah.Errorf(nah.Invalid, "invalid_export", "not a usable nah export: "+format, args...)
}

// ImportPerson creates an export's person from r under a new id (handle from
// opts.Handle or the export), every moment as it was, no usable password and
// a one-time reset link. A failure leaves nothing behind; a taken handle
// (handle_taken) returns the handle as the result's Person.Handle. Only this process's
// graph learns of the person; another on the same directory does at restart.
func (s *Store) ImportPerson(ctx context.Context, r io.Reader, opts ImportOptions) (ImportResult, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultImportMaxBytes
	}
	if opts.MaxMomentBytes <= 0 {
		opts.MaxMomentBytes = nah.DefaultMaxMomentBytes
	}
	if opts.MaxMediaBytes <= 0 {
		opts.MaxMediaBytes = nah.DefaultMaxMediaBytes
	}
	if opts.QuotaBytes <= 0 {
		opts.QuotaBytes = nah.DefaultQuotaBytes
	}
	if opts.Handle != "" {
		if err := nah.CheckHandle(opts.Handle); err != nil {
			return ImportResult{}, err
		}
	}
	tmp, lock, err := makeImportTmp(s.dir)
	if err != nil {
		return ImportResult{}, s.spaceErr(err)
	}
	defer removeImportTmp(tmp, lock)

	m, media, err := readExport(ctx, r, tmp, opts)
	if err != nil {
		return ImportResult{}, s.spaceErr(err)
	}
	defer media.Close()
	src := filepath.Join(tmp, nah.PersonFileName)
	handle := m.Person.Handle
	if opts.Handle != "" {
		handle = opts.Handle
	}
	if err := nah.CheckHandle(handle); err != nil {
		return ImportResult{}, badExport("the manifest's handle %s is not a valid handle", short(handle))
	}
	created, err := time.Parse(nah.TimeFormat, m.Person.CreatedAt)
	if err != nil {
		return ImportResult{}, badExport("the manifest's created_at %s is not a time", short(m.Person.CreatedAt))
	}
	if _, _, err := s.FindPersonByHandle(ctx, handle); err == nil {
		return ImportResult{Person: nah.Person{Handle: handle}}, handleTaken(handle)
	} else if nah.ErrorCode(err) != nah.NotFound {
		return ImportResult{}, err
	}
	db, err := openExportedDB(ctx, src, opts.MaxMomentBytes)
	if err != nil {
		return ImportResult{}, err
	}
	defer db.Close()
	// The quota counts what the copy writes, not what the tar claims: the
	// new file's database beside the media's charge (nah.MediaCharge).
	room := opts.QuotaBytes - media.charged

	res := ImportResult{Person: nah.Person{ID: nah.NewPersonID(), Handle: handle, CreatedAt: created.UnixMilli()}}
	id := res.Person.ID
	newest, err := s.buildImported(ctx, db, tmp, media, opts, room, &res)
	if err != nil {
		return ImportResult{}, s.spaceErr(err)
	}
	if err := s.moveImported(ctx, tmp, id, func() error {
		res.Person.NewestAt = newest
		var err error
		res.Link, err = s.insertImported(ctx, res.Person, res.Moments, m.Connections)
		return err
	}); err != nil {
		return ImportResult{}, s.spaceErr(err)
	}
	s.graph.add(id, newest, s.now().UnixMilli())
	// Replication learns of the file now that it is complete, as it does
	// of a restored person's.
	if err := s.watchPerson(ctx, id, false); err != nil {
		s.log.Warn("replication: watch an imported person", "person", id, "err", err)
	}
	s.addedMedia(id)

	for _, c := range m.Connections {
		if _, _, err := s.FindPersonByHandle(ctx, c.Handle); err == nil && c.Handle != handle {
			res.Connections = append(res.Connections, c.Handle)
		}
	}
	return res, nil
}

// builtDirName is the person's folder as an import builds it inside its
// temporary folder, which no replicator and no open-file cache knows.
const builtDirName = "person"

// buildImported makes the imported person's folder in tmp/person: a
// person file made by our own migrations, the moments and media copied
// into it, its size checked against room, closed (its WAL checkpointed
// away). It returns the newest moment's time.
func (s *Store) buildImported(ctx context.Context, src *untrustedDB, tmp string, media *tarMedia, opts ImportOptions, room int64, res *ImportResult) (newest int64, err error) {
	dir := filepath.Join(tmp, builtDirName)
	if err := os.Mkdir(dir, privateDir); err != nil {
		return 0, err
	}
	p := filepath.Join(dir, nah.PersonFileName)
	// Not replicated while it is built: it is closed, its WAL checkpointed
	// away, before anything watches it.
	dst, err := openDB(p, false, 1, personCacheKiB, s.sync, false)
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := dst.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if err := migrate(ctx, dst, p, personMigrations, nil); err != nil {
		return 0, err
	}
	latest := s.now().Add(time.Minute).UnixMilli()
	if res.Moments, newest, err = copyMoments(ctx, src, dst, opts.MaxMomentBytes, latest, room, opts.QuotaBytes); err != nil {
		return 0, err
	}
	if err := copyMedia(ctx, src, dst, media, filepath.Join(tmp, nah.MediaDirName), filepath.Join(dir, nah.MediaDirName), latest); err != nil {
		return 0, err
	}
	if written, err := fileBytes(ctx, dst); err != nil {
		return 0, err
	} else if written > room {
		return 0, overQuota(opts.QuotaBytes)
	}
	return newest, nil
}

// importPendingPrefix names the marker, at the top of the data directory,
// of an imported folder moved into people/ whose directory row may not be
// committed yet. Open removes the folder of a marker whose person has no
// row (a crash between the two), and the marker.
const importPendingPrefix = "import-pending-"

// moveImported renames tmp/person into people/<id> and runs insert, which
// commits the person's directory row. A marker file names the folder
// while the two are apart, locked as the temporary folder is, so that
// another process opening the data directory meanwhile leaves it alone;
// on a failed insert the folder goes again.
func (s *Store) moveImported(ctx context.Context, tmp, id string, insert func() error) error {
	dir, err := s.personDir(id)
	if err != nil {
		return err
	}
	marker := filepath.Join(s.dir, importPendingPrefix+id)
	f, err := os.CreateTemp(s.dir, importNewPattern+"*")
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tryLock(f); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), marker); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := syncDir(s.dir); err != nil {
		os.Remove(marker)
		return err
	}
	if err := os.Rename(filepath.Join(tmp, builtDirName), dir); err != nil {
		os.Remove(marker)
		return err
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		os.RemoveAll(dir)
		os.Remove(marker)
		return err
	}
	if err := insert(); err != nil {
		os.RemoveAll(dir)
		os.Remove(marker)
		return err
	}
	os.Remove(marker)
	return nil
}

// removePendingImports finishes what a crash during moveImported left:
// the folder of a marker whose person has no directory row is removed. A
// marker still locked is an import of another process under way.
func (s *Store) removePendingImports(ctx context.Context) {
	ms, _ := filepath.Glob(filepath.Join(s.dir, importPendingPrefix+"*"))
	for _, m := range ms {
		f, err := os.Open(m)
		if err != nil {
			continue
		}
		if tryLock(f) != nil {
			f.Close()
			continue
		}
		defer f.Close()
		id := strings.TrimPrefix(filepath.Base(m), importPendingPrefix)
		var n int
		if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM people WHERE id = ?`, id).Scan(&n); err != nil {
			continue // the next start tries again
		}
		if d, err := s.personDir(id); err == nil && n == 0 {
			if err := os.RemoveAll(d); err != nil {
				s.log.Warn("cannot remove what an interrupted import left", "path", d, "err", err)
				continue
			}
			s.log.Info("removed what an interrupted import left", "path", d)
		}
		os.Remove(m)
	}
}

func handleTaken(handle string) error {
	return nah.Errorf(nah.Conflict, "handle_taken", "the handle %q is taken on this server: import under another handle", handle)
}

// insertImported writes the person's directory row, their former
// connections and their reset link in one transaction, so that either all
// exist or none.
func (s *Store) insertImported(ctx context.Context, p nah.Person, moments int, former []ManifestConnection) (string, error) {
	token := newSecret(32)
	now := s.now()
	// bcrypt of nothing, and an empty string matches no password: the
	// password is set through the link.
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO people(id, handle, password_hash, created_at, newest_at, moments) VALUES (?, ?, '', ?, ?, ?)`,
			p.ID, p.Handle, p.CreatedAt, p.NewestAt, moments)
		if isUniqueViolation(err) {
			return handleTaken(p.Handle)
		}
		if err != nil {
			return err
		}
		for _, c := range former {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO former_connections(person_id, handle, connected_at) VALUES (?, ?, ?)`,
				p.ID, c.Handle, c.ConnectedAt); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO links(token_hash, kind, person_id, created_at, expires_at) VALUES (?, ?, ?, ?, ?)`,
			hashSecret(token), LinkReset, p.ID, now.UnixMilli(), now.Add(ImportLinkTTL).UnixMilli())
		return err
	})
	return token, err
}

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

// openExportedDB opens the copied person.db as an untrusted file
// (lifecycle_untrusted.go) and checks it: SQLite at all, its own schema version (the
// manifest's is not trusted), exactly our schema at that version, brought
// to this binary's (migrateExported), and PRAGMA integrity_check. maxBody
// is the largest value read from it.
func openExportedDB(ctx context.Context, p string, maxBody int) (*untrustedDB, error) {
	u, err := openUntrusted(ctx, p, maxBody)
	if err != nil {
		return nil, err
	}
	if err := migrateExported(ctx, u, p, maxBody); err != nil {
		u.Close()
		return nil, err
	}
	// Sizes and values before the integrity check, which reads every row
	// of a table with an index whole, the length limit notwithstanding.
	if err := checkValues(ctx, u, maxBody); err != nil {
		u.Close()
		return nil, err
	}
	if err := checkSizes(ctx, u, maxBody); err != nil {
		u.Close()
		return nil, err
	}
	if err := checkMLS(ctx, u); err != nil {
		u.Close()
		return nil, err
	}
	var check string
	if err := u.QueryRowContext(ctx, "PRAGMA integrity_check(1)").Scan(&check); err != nil {
		u.Close()
		return nil, badExport("person.db is not a readable SQLite database: %v", err)
	}
	if check != "ok" {
		u.Close()
		return nil, badExport("person.db fails SQLite's integrity check: %s", short(check))
	}
	return u, nil
}

// migrateExported brings the copied person.db of an export made by an
// older release up to this binary's schema, and checks it as untrusted
// either way. Before a statement of ours writes it, its schema must be
// exactly what our migrations made at its user_version (so no trigger,
// view or generated column of its own runs on our statements) and every
// value bounded (checkSizes); after, its schema must be exactly ours. p is
// the copy in the import's temporary folder, removed with it.
func migrateExported(ctx context.Context, u *untrustedDB, p string, maxBody int) error {
	v, err := checkUntrustedSchema(ctx, u)
	if err != nil || v == len(personMigrations) {
		return err
	}
	if err := checkSizes(ctx, u, maxBody); err != nil {
		return err
	}
	if _, err := u.ExecContext(ctx, "PRAGMA query_only = 0"); err != nil {
		return err
	}
	if err := migrate(ctx, u.Conn, p, personMigrations, nil); err != nil {
		return badExport("person.db of schema version %d cannot be brought to this server's %d: %v", v, len(personMigrations), err)
	}
	if _, err := u.ExecContext(ctx, "PRAGMA query_only = 1"); err != nil {
		return err
	}
	_, err = checkUntrustedSchema(ctx, u)
	return err
}

// untrustedValueMax bounds every value of an imported person.db but a
// moment's body: ids are 26 bytes, hashes 64, content types and
// idempotency keys at most 255, a stored answer under 600 (store/person_idem.go).
const untrustedValueMax = 4 << 10

// checkSizes refuses a file with a value over its bound in any column of
// any table, the tables the import does not copy included: maxBody for a
// moment's body, untrustedValueMax for every other. octet_length reads a
// size from the record's header, so nothing is read whole before this
// passes: SQLite's integrity check reads whole every row of a table with
// an index, past SQLITE_LIMIT_LENGTH (a 300 MB idempotency answer took an
// import from 23 to 318 MB of resident memory, measured with
// TestImportHugeIdempotencyValue's file).
func checkSizes(ctx context.Context, u *untrustedDB, maxBody int) error {
	var tables []string
	rows, err := u.QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name`)
	if err != nil {
		return badExport("person.db's tables cannot be listed: %v", err)
	}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return badExport("person.db's tables cannot be listed: %v", err)
		}
		tables = append(tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return badExport("person.db's tables cannot be listed: %v", err)
	}
	quote := func(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }
	for _, t := range tables {
		var cols []string
		rows, err := u.QueryContext(ctx, `SELECT name FROM pragma_table_info(?1) ORDER BY cid`, t)
		if err != nil {
			return badExport("person.db's table %s cannot be read: %v", short(t), err)
		}
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				rows.Close()
				return badExport("person.db's table %s cannot be read: %v", short(t), err)
			}
			cols = append(cols, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return badExport("person.db's table %s cannot be read: %v", short(t), err)
		}
		if len(cols) == 0 {
			continue
		}
		var which, over []string
		for _, c := range cols {
			limit := untrustedValueMax
			if t == "moments" && c == "body" {
				limit = maxBody
			} else if l, ok := mlsColumnMax[t+"."+c]; ok {
				limit = l
			}
			test := fmt.Sprintf("octet_length(%s) > %d", quote(c), limit)
			which = append(which, fmt.Sprintf("WHEN %s THEN '%s' || ' of ' || octet_length(%s) || ' bytes, over %d'", test, strings.ReplaceAll(c, "'", "''"), quote(c), limit))
			over = append(over, test)
		}
		var what string
		err = u.QueryRowContext(ctx, `SELECT CASE `+strings.Join(which, " ")+` END FROM `+quote(t)+
			` WHERE `+strings.Join(over, " OR ")+` LIMIT 1`).Scan(&what)
		switch {
		case err == nil:
			return badExport("a value of person.db is too large: %s.%s", t, what)
		case !errors.Is(err, sql.ErrNoRows):
			return badExport("person.db's table %s cannot be read: %v", short(t), err)
		}
	}
	return nil
}

// momentBounded is the SQL test of a moment row of an untrusted file, run
// before any of its values is read: ?1 is the largest body, ?2 nah.IDLen.
// octet_length reads a value's size from its record header, not the value.
const momentBounded = `typeof(id) = 'text' AND octet_length(id) = ?2 AND typeof(created_at) = 'integer'
	AND typeof(body) = 'blob' AND octet_length(body) BETWEEN 1 AND ?1`

// mediaVersion is the schema version that has media
// (migrations/person/0002_media.sql).
const mediaVersion = 2

// checkValues refuses a file with any row that is not bounded as
// momentBounded and mediaBounded say, naming the first one, with no more
// of its id than its first 64 bytes, read only when it is that short.
func checkValues(ctx context.Context, u *untrustedDB, maxBody int) error {
	var (
		id               string
		size             sql.NullInt64
		atType, bodyType string
	)
	err := u.QueryRowContext(ctx, `SELECT CASE WHEN typeof(id) = 'text' AND octet_length(id) <= 64 THEN id
			ELSE typeof(id) || ' of ' || octet_length(id) || ' bytes' END,
		typeof(created_at), typeof(body), octet_length(body)
		FROM moments WHERE NOT (`+momentBounded+`) LIMIT 1`, maxBody, nah.IDLen).Scan(&id, &atType, &bodyType, &size)
	switch {
	case err == nil:
		return badExport("moment %s of person.db is not a moment: an id (text of %d bytes), a time (integer, not %s) and a body of 1 to %d bytes (blob, not %s of %d)",
			short(id), nah.IDLen, atType, maxBody, bodyType, size.Int64)
	case !errors.Is(err, sql.ErrNoRows):
		return badExport("person.db has no readable moments: %v", err)
	}
	if u.version < mediaVersion {
		return nil
	}
	err = u.QueryRowContext(ctx, `SELECT CASE WHEN typeof(id) = 'text' AND octet_length(id) <= 64 THEN id
		ELSE typeof(id) || ' of ' || octet_length(id) || ' bytes' END FROM media WHERE NOT (`+mediaBounded+`) LIMIT 1`, nah.IDLen).Scan(&id)
	switch {
	case err == nil:
		return badExport("media %s of person.db is not a media row (an id, a size of at least 1 byte as an upload's, a sha256, a content type of 1 to 255 bytes, a time)", short(id))
	case !errors.Is(err, sql.ErrNoRows):
		return badExport("person.db has no readable media: %v", err)
	}
	return nil
}

// roomCheckEvery is how many moments are copied between two checks of the
// new file's size against the room left in the quota: at 64 KiB a body,
// the copy passes the quota by at most 4 MiB before it stops.
const roomCheckEvery = 64

// fileBytes is the size of dst's database as its transaction q sees it,
// uncommitted pages included: what the copy has written.
func fileBytes(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (int64, error) {
	var pages, size int64
	err := q.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages)
	if err == nil {
		err = q.QueryRowContext(ctx, "PRAGMA page_size").Scan(&size)
	}
	return pages * size, err
}

func overQuota(quota int64) error {
	return nah.Errorf(nah.QuotaExceeded, "", "the export holds more than the quota of %d bytes", quota)
}

// copyMoments copies every moment of src into dst in one transaction and
// returns how many and the newest time. Every value is bounded in SQL
// before it is read, and ids are checked again here: they come from
// another machine. The copy stops with QuotaExceeded once dst's database
// passes room bytes.
func copyMoments(ctx context.Context, src *untrustedDB, dst *sql.DB, maxBody int, latest, room, quota int64) (n int, newest int64, err error) {
	var (
		id string
		at int64
	)
	rows, err := src.QueryContext(ctx, `SELECT id, created_at, body FROM moments WHERE `+momentBounded, maxBody, nah.IDLen)
	if err != nil {
		return 0, 0, badExport("person.db has no readable moments: %v", err)
	}
	defer rows.Close()
	tx, err := dst.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO moments(id, created_at, body) VALUES (?, ?, ?)`)
	if err != nil {
		return 0, 0, err
	}
	defer stmt.Close()
	var body []byte
	for rows.Next() {
		if err := rows.Scan(&id, &at, &body); err != nil {
			return 0, 0, badExport("a moment of person.db: %v", err)
		}
		t, ok := nah.MomentTime(id)
		if !ok || at <= 0 || at > latest || len(body) < 1 || len(body) > maxBody {
			return 0, 0, badExport("a moment of person.db has an invalid id or time (%s)", short(id))
		}
		// Pages are in the ids' order, which is the times' only when each
		// time is its id's (migrations/person/0005_moments_by_id.sql).
		if t != at {
			return 0, 0, badExport("moment %s of person.db has the time %d, not its id's %d", short(id), at, t)
		}
		if _, err := stmt.ExecContext(ctx, id, at, body); err != nil {
			if isUniqueViolation(err) {
				return 0, 0, badExport("person.db holds moment %s twice", short(id))
			}
			return 0, 0, err
		}
		n++
		newest = max(newest, at)
		if n%roomCheckEvery == 0 {
			if written, err := fileBytes(ctx, tx); err != nil {
				return 0, 0, err
			} else if written > room {
				return 0, 0, overQuota(quota)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, badExport("reading person.db's moments: %v", err)
	}
	if written, err := fileBytes(ctx, tx); err != nil {
		return 0, 0, err
	} else if written > room {
		return 0, 0, overQuota(quota)
	}
	return n, newest, tx.Commit()
}

// mediaBounded is the SQL test of a media row of an untrusted file, as
// momentBounded: ?1 is nah.IDLen.
const mediaBounded = `typeof(id) = 'text' AND octet_length(id) = ?1 AND typeof(size) = 'integer' AND size > 0
	AND typeof(sha256) = 'text' AND octet_length(sha256) = 64
	AND typeof(content_type) = 'text' AND octet_length(content_type) BETWEEN 1 AND 255
	AND typeof(created_at) = 'integer'`

// copyMedia copies the media rows of src into dst, one row at a time,
// moving each one's file from tmp into the person's folder dir: every row
// must have its file, with the size and sha256 it says, and every file a
// row. The rows commit after every file is moved and dir fsynced, so a row
// never points to a missing file.
func copyMedia(ctx context.Context, src *untrustedDB, dst *sql.DB, files *tarMedia, tmp, dir string, latest int64) error {
	if src.version < mediaVersion {
		if files.count != 0 {
			return badExport("the tar holds %d media files and person.db has no media", files.count)
		}
		return nil
	}
	rows, err := src.QueryContext(ctx, `SELECT id, size, sha256, content_type, created_at FROM media WHERE `+mediaBounded, nah.IDLen)
	if err != nil {
		return badExport("person.db has no readable media: %v", err)
	}
	defer rows.Close()
	tx, err := dst.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO media(id, size, sha256, content_type, created_at) VALUES (?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	n := 0
	var m nah.Media
	for rows.Next() {
		if err := rows.Scan(&m.ID, &m.Size, &m.SHA256, &m.ContentType, &m.CreatedAt); err != nil {
			return badExport("a media row of person.db: %v", err)
		}
		f, ok, err := files.get(ctx, m.ID)
		if err != nil {
			return err
		}
		if !ok || f.Size != m.Size || f.SHA256 != m.SHA256 {
			return badExport("media %s of person.db has no file of its size and sha256 in the tar", short(m.ID))
		}
		if strings.ContainsFunc(m.ContentType, func(r rune) bool { return r < ' ' || r > '~' }) || m.CreatedAt <= 0 || m.CreatedAt > latest {
			return badExport("media %s of person.db has an invalid type or time", short(m.ID))
		}
		if _, err := stmt.ExecContext(ctx, m.ID, m.Size, m.SHA256, m.ContentType, m.CreatedAt); err != nil {
			if isUniqueViolation(err) {
				return badExport("person.db holds media %s twice", short(m.ID))
			}
			return err
		}
		if n == 0 {
			if err := os.Mkdir(dir, privateDir); err != nil {
				return err
			}
		}
		if err := os.Rename(filepath.Join(tmp, m.ID), filepath.Join(dir, m.ID)); err != nil {
			return err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return badExport("reading person.db's media: %v", err)
	}
	if n != files.count {
		return badExport("the tar holds %d media files for %d rows", files.count, n)
	}
	if n == 0 {
		return nil
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	return tx.Commit()
}

// FormerConnections returns the handles of person id's connections on the
// server they were imported from that have an account here and are not
// connected to them now, by handle.
func (s *Store) FormerConnections(ctx context.Context, id string) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT f.handle FROM former_connections f
		JOIN people p ON p.handle = f.handle AND p.deleted_at IS NULL
		WHERE f.person_id = ?1 AND p.id != ?1
		AND NOT EXISTS (SELECT 1 FROM connections c WHERE c.person_id = ?1 AND c.other_id = p.id)
		ORDER BY f.handle`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var hs []string
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	return hs, rows.Err()
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
