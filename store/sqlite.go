package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	"modernc.org/libc"
	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/nah-app/nah"
)

// SQLite memory is outside the Go heap: one connection per person file,
// lookaside 256x32 and one page-cache LRU bounded by softHeapLimit cost
// softHeapLimit + openFiles x ~75 KB, ~70 MB at 512 files (defaults: ~615 KB
// a file), ~290 MB at 3,500, the most to advise under 400 MB. mmap stays off
// (measured worse). ../shared/notes/sqlite-memory.md.
// A watched file adds ~404 KiB (backup.PerFileBytes,
// ../shared/notes/litestream-nah.md), so only recently written files are
// watched (Config.MaxWatched, 64 by default: 25 MiB).
const (
	// DefaultMaxOpenFiles is Config.MaxOpenFiles when zero.
	DefaultMaxOpenFiles = 512

	softHeapLimit  = 32 << 20
	lookasideSize  = 256
	lookasideSlots = 32
	// busyTimeout is several seconds because Litestream briefly takes each
	// file's write lock, and a second instance may write the same files.
	busyTimeout = 10000 // ms
)

// perFileBytes is the SQLite memory of one open person file beside the
// shared page cache (connection, lookaside, schema, -shm), from the
// arithmetic above.
const perFileBytes = 75 << 10

// SQLiteMemoryBound is the most memory SQLite should hold with maxOpenFiles
// person files open (0: DefaultMaxOpenFiles): the shared page cache plus
// the cost of each open file. It is outside the Go heap, so the process's
// memory plan (cmd/nah) sets it apart before it sizes the Go heap.
func SQLiteMemoryBound(maxOpenFiles int) int64 {
	if maxOpenFiles <= 0 {
		maxOpenFiles = DefaultMaxOpenFiles
	}
	return softHeapLimit + int64(maxOpenFiles+1+directoryReaders)*perFileBytes
}

var (
	configureOnce sync.Once
	configureErr  error
)

// configureSQLite applies the process-wide settings above. It must run before
// the first connection opens: sqlite3_config is refused after initialisation.
func configureSQLite() error {
	configureOnce.Do(func() {
		tls := libc.NewTLS()
		defer tls.Close()
		buf := libc.Xmalloc(tls, 16)
		defer libc.Xfree(tls, buf)
		// Memory statistics make the heap-limit pragmas work at all; without
		// them soft_heap_limit is accepted and ignored.
		if rc := sqlite3.Xsqlite3_config(tls, sqlite3.SQLITE_CONFIG_MEMSTATUS, libc.VaList(buf, int32(1))); rc != sqlite3.SQLITE_OK {
			configureErr = fmt.Errorf("sqlite: enable memory statistics: code %d", rc)
			return
		}
		if rc := sqlite3.Xsqlite3_config(tls, sqlite3.SQLITE_CONFIG_LOOKASIDE, libc.VaList(buf, int32(lookasideSize), int32(lookasideSlots))); rc != sqlite3.SQLITE_OK {
			configureErr = fmt.Errorf("sqlite: set lookaside: code %d", rc)
			return
		}
		sqlite3.Xsqlite3_soft_heap_limit64(tls, softHeapLimit)
		// Commits use fdatasync, as SQLite's own Linux builds do: as durable,
		// without writing the inode for its timestamps: more posts/s and
		// less CPU a post on people-1k (bench/THRESHOLDS.md).
		_, _ = sqlite.Fdatasync(true) // refused on macOS and Windows: fsync there
	})
	return configureErr
}

// SQLiteMemory returns the bytes SQLite holds now and at its highest, for
// health pages and tests of the memory bound.
func SQLiteMemory() (now, peak int64) {
	tls := libc.NewTLS()
	defer tls.Close()
	return sqlite3.Xsqlite3_memory_used(tls), sqlite3.Xsqlite3_memory_highwater(tls, 0)
}

// ResetSQLiteMemoryPeak starts SQLiteMemory's high-water mark afresh, for
// the measurement of one operation.
func ResetSQLiteMemoryPeak() {
	tls := libc.NewTLS()
	defer tls.Close()
	sqlite3.Xsqlite3_memory_highwater(tls, 1)
}

// Sync is SQLite's synchronous pragma (NAH_SYNC), on every connection of a
// Store; both keep every commit through a kill -9 in WAL mode. SyncFull (the
// default) syncs each commit (fdatasync) so a 201 survives a power cut:
// 185 µs a commit with fsync, SyncNormal 53 µs
// (../shared/notes/sqlite-memory.md §4). Tools outside a Store use SyncFull.
type Sync int

const (
	SyncFull Sync = iota
	SyncNormal
)

// String is the value as NAH_SYNC spells it.
func (s Sync) String() string {
	switch s {
	case SyncFull:
		return "full"
	case SyncNormal:
		return "normal"
	}
	return "Sync(" + strconv.Itoa(int(s)) + ")"
}

// pragma is the value of PRAGMA synchronous for s.
func (s Sync) pragma() string {
	if s == SyncNormal {
		return "NORMAL"
	}
	return "FULL"
}

// dsn builds the connection string; its pragmas run on every new connection,
// busy timeout first:
//   - WAL; synchronous as sync says; _txlock=immediate so writers queue;
//   - secure_delete on writers: a deleted moment leaves no copy in free space;
//   - replicated: no automatic checkpoint, which would restart the WAL over
//     frames Litestream never read (backup/wal.go).
func dsn(file string, readOnly bool, cacheKiB int, sync Sync, replicated bool) string {
	var b strings.Builder
	b.WriteString(file)
	b.WriteString("?_pragma=busy_timeout(" + strconv.Itoa(busyTimeout) + ")")
	b.WriteString("&_pragma=journal_mode(WAL)")
	b.WriteString("&_pragma=synchronous(" + sync.pragma() + ")")
	b.WriteString("&_pragma=foreign_keys(1)")
	// A per-connection cap in case a scan grows one cache; the global soft
	// heap limit is what bounds the sum.
	b.WriteString("&_pragma=cache_size(-" + strconv.Itoa(cacheKiB) + ")")
	if readOnly {
		b.WriteString("&_pragma=query_only(1)")
	} else {
		b.WriteString("&_pragma=secure_delete(1)")
		b.WriteString("&_txlock=immediate")
	}
	if replicated {
		b.WriteString("&_pragma=wal_autocheckpoint(0)")
	}
	return b.String()
}

// openDB opens file with at most conns connections, each committing as sync
// says; replicated as dsn says.
func openDB(file string, readOnly bool, conns, cacheKiB int, sync Sync, replicated bool) (*sql.DB, error) {
	if err := configureSQLite(); err != nil {
		return nil, err
	}
	if strings.ContainsAny(file, "?#") {
		return nil, fmt.Errorf("sqlite: path %q must not contain '?' or '#'", file)
	}
	if !readOnly {
		if err := createPrivate(file); err != nil {
			return nil, err
		}
	}
	db, err := sql.Open("sqlite", dsn(file, readOnly, cacheKiB, sync, replicated))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	return db, nil
}

// createPrivate makes file, empty (which SQLite takes for a new database),
// with mode privateFile if it does not exist, and takes group and other
// permissions off it if it does. SQLite would create it 0644 less the
// umask, and its -wal and -shm copy that mode. Chmod after the create makes
// the mode the same under any umask.
func createPrivate(file string) error {
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, privateFile)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if info.Mode().Perm() != privateFile {
		return f.Chmod(privateFile)
	}
	return nil
}

// migration is one numbered SQL file.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads dir of fsys: files named NNNN_what.sql, numbered from
// 1 without gaps.
func loadMigrations(fsys fs.FS, dir string) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s/%s: name must be NNNN_what.sql", dir, e.Name())
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s/%s: expected number %d", dir, m.name, i+1)
		}
	}
	return ms, nil
}

var (
	directoryMigrations = mustLoad(nah.Migrations, "migrations/directory")
	personMigrations    = mustLoad(nah.Migrations, "migrations/person")
)

func mustLoad(fsys fs.FS, dir string) []migration {
	ms, err := loadMigrations(fsys, dir)
	if err != nil {
		panic(err)
	}
	return ms
}

// ErrTooNew is wrapped by migrate when a file was written by a newer binary.
var ErrTooNew = fmt.Errorf("database is newer than this binary")

// migrator is what migrate runs on: a *sql.DB, or the one *sql.Conn of an
// untrusted file (lifecycle_untrusted.go).
type migrator interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// tooNewError is migrate's refusal of a file whose schema version is past
// what this binary knows.
type tooNewError struct {
	file           string
	version, known int
}

func (e *tooNewError) Error() string {
	return fmt.Sprintf("%s: schema version %d, this binary knows up to %d: %v", e.file, e.version, e.known, ErrTooNew)
}

func (e *tooNewError) Unwrap() error { return ErrTooNew }

// pendingFrom reads the file's schema version, the index in ms of its
// first pending step (len(ms): none), and refuses one beyond ms or below 0.
func pendingFrom(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, file string, ms []migration) (int, error) {
	var v int
	if err := q.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("%s: read schema version: %w", file, err)
	}
	if v > len(ms) {
		return 0, &tooNewError{file, v, len(ms)}
	}
	if v < 0 {
		return 0, fmt.Errorf("%s: schema version %d is none of nah's", file, v)
	}
	return v, nil
}

// migrate brings the file's PRAGMA user_version up to len(ms) in one
// transaction: every pending step and the version commit together or not
// at all, so a step that fails leaves the file as it was, readable by the
// binary that wrote it. The version is read again inside the transaction,
// so two processes opening the same file never apply a step twice. A file
// whose version is beyond ms refuses to open (*tooNewError): this binary
// cannot know what it holds. record, when set, runs in the transaction of
// a file that was migrated.
func migrate(ctx context.Context, db migrator, file string, ms []migration, record func(*sql.Tx) error) error {
	if v, err := pendingFrom(ctx, db, file, ms); err != nil || v == len(ms) {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s: migrate: %w", file, err)
	}
	defer tx.Rollback()
	from, err := pendingFrom(ctx, tx, file, ms)
	if err != nil || from == len(ms) {
		return err
	}
	for _, m := range ms[from:] {
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("%s: the upgrade of its schema from version %d to %d failed at %s and changed nothing: %w", file, from, len(ms), m.name, err)
		}
	}
	if record != nil {
		if err := record(tx); err != nil {
			return fmt.Errorf("%s: migrate: %w", file, err)
		}
	}
	if _, err := tx.ExecContext(ctx, "PRAGMA user_version = "+strconv.Itoa(len(ms))); err != nil {
		return fmt.Errorf("%s: migrate: %w", file, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: migrate: %w", file, err)
	}
	return nil
}

// isUniqueViolation reports whether err is a UNIQUE or PRIMARY KEY failure.
func isUniqueViolation(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code()
	return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// FilesWithin is the most person files whose SQLiteMemoryBound fits in
// bytes, 0 when not even one does: the inverse the memory plan sizes the
// open-file cache with.
func FilesWithin(bytes int64) int {
	return int(max((bytes-softHeapLimit)/perFileBytes-1-directoryReaders, 0))
}

// closeKeepingWAL closes db, the only connection to its file, without the
// checkpoint SQLite runs when the last connection closes: the WAL and its
// -shm stay for the next open, which reads them back. On people-10k, where
// a post opens one file and closes another, that checkpoint and the unlink
// and re-creation of both files were a good share of a post's CPU
// (bench/THRESHOLDS.md). If the option cannot be set the close checkpoints
// as usual.
func closeKeepingWAL(db *sql.DB) error {
	return errors.Join(noCheckpointOnClose(db), db.Close())
}

// noCheckpointOnClose sets SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE on db's one
// connection (noCheckpointOnCloseRaw).
func noCheckpointOnClose(db *sql.DB) error {
	c, err := db.Conn(context.Background())
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Raw(noCheckpointOnCloseRaw)
}

// noCheckpointOnCloseRaw sets SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE on dc, a
// driver connection reached through sql.Conn.Raw. The driver does not
// offer sqlite3_db_config for it, so its handle is read from the
// connection's db field (modernc's conn.go); TestEvictionKeepsSmallWAL
// and TestClosedReadsKeepTheWAL fail if a driver upgrade moves it.
func noCheckpointOnCloseRaw(dc any) error {
	v := reflect.ValueOf(dc)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	var h reflect.Value
	if v.Kind() == reflect.Struct {
		h = v.FieldByName("db")
	}
	if !h.IsValid() || h.Kind() != reflect.Uintptr || h.Uint() == 0 {
		return fmt.Errorf("sqlite: no handle in the driver's %T", dc)
	}
	tls := libc.NewTLS()
	defer tls.Close()
	buf := libc.Xmalloc(tls, 16)
	defer libc.Xfree(tls, buf)
	if rc := sqlite3.Xsqlite3_db_config(tls, uintptr(h.Uint()), sqlite3.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, libc.VaList(buf, int32(1), uintptr(0))); rc != sqlite3.SQLITE_OK {
		return fmt.Errorf("sqlite: no checkpoint on close: code %d", rc)
	}
	return nil
}
