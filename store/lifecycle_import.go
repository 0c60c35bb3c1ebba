package store

import (
	"context"
	"database/sql"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nah-app/nah"
)

// An import ("move") recreates a person from their export, another server's
// tar (lifecycle_export.go). Everything in the tar is untrusted: it is
// copied into a temporary folder under the data directory, checked whole
// (entries, sizes, checksums, schema, SQLite's integrity check), and only
// then does anything reach the directory or people/. person.db is read as
// an untrusted file (lifecycle_untrusted.go): exactly our schema, every
// value bounded in SQL before Go reads it. The moments are copied row by
// row into a fresh person file rather than the file being moved in, and the
// quota counts what that copy writes, not what the tar claims.

// ImportLinkTTL is how long the one-time link of an imported person works.
const ImportLinkTTL = 24 * time.Hour

// DefaultImportMaxBytes is ImportOptions.MaxBytes when zero: the most
// person.db may hold. Five posts a day for ten years of 4 KB bodies is
// about 75 MB; 1 GiB leaves room for far chattier people and is still a
// size that a data directory's disk should never be surprised by.
const DefaultImportMaxBytes = 1 << 30

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
