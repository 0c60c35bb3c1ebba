package store

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store/internal/personfile"
)

// Config configures a Store. Zero values take the defaults below.
type Config struct {
	Dir          string // data directory; required
	MaxOpenFiles int    // bound of the open person-file cache; DefaultMaxOpenFiles (sqlite.go)
	// Sync is what a commit waits for on every connection the store opens:
	// SyncFull (the zero value) survives a power cut, SyncNormal only a
	// crash of the process (sqlite.go says what each promises and costs).
	Sync Sync
	// Now is the store's clock: moment times and the staleness of newest-moment
	// times. Tests inject a fake one; default time.Now.
	Now func() time.Time
	// StaleAfter is how long a newest-moment time is trusted before it is
	// re-read from the person's file (another process may have posted);
	// DefaultStaleAfter.
	StaleAfter time.Duration
	// HeadCacheBytes bounds the in-memory heads of newest moments;
	// DefaultHeadCacheBytes (feed_head.go). Negative turns heads off.
	HeadCacheBytes int64
	// DeleteGrace is how long a deleted person's folder and row wait, for
	// an undo, before the sweep purges them; DefaultDeleteGrace when zero,
	// negative to purge at once (lifecycle_delete.go).
	DeleteGrace time.Duration
	// Sweep runs the purge of deleted people due one (at start, then every
	// minute). Only the serving process sets it: a command-line tool opening
	// the same data directory must not purge by its own reading of the
	// grace, nor race the server's undo.
	Sweep bool
	// UploadExpiry is how long a resumable upload lives after its
	// creation or last piece; DefaultUploadExpiry when zero (person_uploads.go).
	UploadExpiry time.Duration

	// Replicator, if set, follows every file written (replication.go).
	// At most MaxWatched person files are watched at once (0: no bound);
	// QueueDir, if set, keeps the files waiting for it on disk, so that
	// a kill forgets none.
	Replicator Replicator
	MaxWatched int
	QueueDir   string
	// WALIdle is how long after its last write the WAL of an open file
	// that replication does not watch is emptied by it, once shipped;
	// a minute when zero (personfile.DefaultWALIdle).
	WALIdle time.Duration
	// MediaAdded, if set, is told of a person whose media folder gained
	// files (an upload, a resumable upload's end, an import, an undo), so
	// that backups mirror them soon (backup.MediaMirror). It must not block.
	MediaAdded func(id string)

	Logger *slog.Logger // default: discard

	// Version is this binary's version (nah version), recorded in the
	// directory by a start that creates or migrates it, so that an older
	// binary refusing the data can say which version to install.
	Version string

	// beforeOpen runs before a person file is opened and may refuse it,
	// afterClose after its handle is closed: for tests.
	beforeOpen func(path string) error
	afterClose func(path string)
}

// DefaultStaleAfter is Config.StaleAfter when zero: a post by another
// process on the same files shows in feeds within 30 s, at the cost of
// re-reading a person's file at most twice a minute.
const DefaultStaleAfter = 30 * time.Second

// Store is the data layer. It is safe for concurrent use.
type Store struct {
	dir        string
	now        func() time.Time
	staleAfter time.Duration
	log        *slog.Logger

	w *sql.DB // the directory's one writer connection
	r *sql.DB // the directory's readers
	// tokenQuery is PersonForToken's query on r, prepared once a connection:
	// its parse was a large share of the check (people-10k's posts,
	// bench/THRESHOLDS.md).
	tokenQuery *sql.Stmt

	files      *personfile.Cache
	migrated   sync.Map // paths of person files their open migrated, until acquired (acquire)
	sync       Sync     // of every connection the store opens (Config.Sync)
	repl       Replicator
	mediaAdded func(id string)
	graph      *graph
	cursorKey  []byte
	keyLogKey  ed25519.PrivateKey // signs key log heads (mls_keylog.go)
	fileReads  atomic.Int64       // looks into a person file on the feed path
	settle     settling           // posts between their clock read and their visibility

	keyChange atomic.Pointer[func(person string, size int64)] // OnKeyChange

	headBudget int64
	headBytes  atomic.Int64
	sessions   sessionCache
	stmts      stmts      // the post's and the feed's statements prepared on each open person file
	connMu     sync.Mutex // serialises connection changes with their graph updates

	lifeMu      sync.Mutex // serialises deletions, undos and purges (lifecycle_delete.go)
	deleteGrace time.Duration
	swept       chan struct{} // closed when the purge sweep has stopped

	uploadExpiry time.Duration
	uploaders    sync.Map // person id → true: they have resumable uploads (person_uploads.go)

	dirtyMu sync.Mutex
	dirty   map[string]dirtyPerson // what the directory has not heard yet

	problems   problems      // person files that cannot be read (faults.go)
	fullAt     atomic.Int64  // store clock (unix ms) of the last write refused for lack of space; 0 once one went through
	fullLogged atomic.Int64  // when a full disk was last logged
	wake       chan struct{} // a write went through after the disk was full: flush now

	// afterTokenRead, when set (by tests only), runs in PersonForToken
	// between the directory read and the cache put.
	afterTokenRead func()
	// afterConnsRead, when set (by tests only), runs in loadConns between
	// the directory read and the install.
	afterConnsRead func()

	run *runLock // this Store's lock file (runs.go)

	stop     chan struct{}
	stopped  chan struct{}
	closeErr error
	once     sync.Once
}

// directoryReaders is the size of the directory's reader pool: token checks
// and lookups are short, and each connection costs its own cache.
const directoryReaders = 4

// Open opens (creating if needed) the data directory at cfg.Dir, brings the
// directory database up to date and loads the people of the graph.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("store: no data directory")
	}
	if cfg.MaxOpenFiles <= 0 {
		cfg.MaxOpenFiles = DefaultMaxOpenFiles
	}
	if cfg.Sync != SyncFull && cfg.Sync != SyncNormal {
		return nil, fmt.Errorf("store: unknown %v", cfg.Sync)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	if cfg.HeadCacheBytes == 0 {
		cfg.HeadCacheBytes = DefaultHeadCacheBytes
	}
	if cfg.DeleteGrace == 0 {
		cfg.DeleteGrace = DefaultDeleteGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, nah.PeopleRel), privateDir); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	path := filepath.Join(cfg.Dir, nah.DirectoryRel)
	tightenDataDir(cfg.Dir, cfg.Logger)
	removeStaleImports(cfg.Dir, cfg.Now(), cfg.Logger)
	removeOldHeld(filepath.Join(cfg.Dir, importHeldDir), cfg.Now())
	os.Remove(filepath.Join(cfg.Dir, importHeldDir)) // only if empty
	s := &Store{
		dir:        cfg.Dir,
		now:        cfg.Now,
		staleAfter: cfg.StaleAfter,
		headBudget: cfg.HeadCacheBytes,
		log:        cfg.Logger,
		repl:       cfg.Replicator,
		mediaAdded: cfg.MediaAdded,
		sync:       cfg.Sync,
		swept:      make(chan struct{}),

		uploadExpiry: cmp.Or(cfg.UploadExpiry, DefaultUploadExpiry),

		deleteGrace: max(cfg.DeleteGrace, 0),
		graph:       newGraph(),
		dirty:       make(map[string]dirtyPerson),
		wake:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
		stopped:     make(chan struct{}),
	}
	var err error
	// The directory is small and hot: a 2 MB cache per connection.
	if s.w, err = openDB(path, false, 1, 2048, cfg.Sync, cfg.Replicator != nil); err != nil {
		return nil, err
	}
	if err = migrate(ctx, s.w, path, directoryMigrations, func(tx *sql.Tx) error {
		return recordWriter(ctx, tx, cfg.Version)
	}); err != nil {
		var tooNew *tooNewError
		if errors.As(err, &tooNew) {
			err = directoryTooNew(ctx, s.w, cfg.Dir, cfg.Version, tooNew)
		}
		s.w.Close()
		if s.kindOf(err) == noSpace {
			// Opening the directory makes its shared-memory index, which a
			// full disk has no room for: say so rather than "I/O error".
			return nil, fmt.Errorf("store: the disk of %s is full: free some space and start again: %w", cfg.Dir, err)
		}
		return nil, err
	}
	if s.r, err = openDB(path, true, directoryReaders, 2048, cfg.Sync, false); err != nil {
		s.w.Close()
		return nil, err
	}
	if s.tokenQuery, err = s.r.PrepareContext(ctx, tokenQuery); err != nil {
		s.r.Close()
		s.w.Close()
		return nil, err
	}
	run, crashed, err := takeRun(cfg.Dir)
	if err != nil {
		s.r.Close()
		s.w.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	if err = s.load(ctx, crashed); err != nil {
		run.drop()
		s.r.Close()
		s.w.Close()
		return nil, err
	}
	s.run = run
	s.files = s.newFileCache(cfg)
	s.loadRestoreFailed()
	s.removePendingImports(ctx)
	go s.flushLoop()
	if cfg.Sweep {
		go s.sweepLoop()
	} else {
		close(s.swept)
	}
	return s, nil
}

// load reads the cursor key and people into memory. After a crash
// (runs.go) no newest time of the directory is trusted: each is read from
// its person's file at their first use.
func (s *Store) load(ctx context.Context, crashed bool) error {
	key := make([]byte, 32)
	rand.Read(key)
	if _, err := s.w.ExecContext(ctx, `INSERT OR IGNORE INTO meta(key, value) VALUES ('cursor_key', ?)`, key); err != nil {
		return fmt.Errorf("store: cursor key: %w", err)
	}
	if err := s.w.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'cursor_key'`).Scan(&s.cursorKey); err != nil {
		return fmt.Errorf("store: cursor key: %w", err)
	}
	if err := s.loadKeyLogKey(ctx); err != nil {
		return err
	}
	now := s.now().UnixMilli()
	rows, err := s.r.QueryContext(ctx, `SELECT id, newest_at FROM people WHERE deleted_at IS NULL`)
	if err != nil {
		return fmt.Errorf("store: load people: %w", err)
	}
	defer rows.Close()
	g := s.graph
	g.mu.Lock()
	defer g.mu.Unlock()
	for rows.Next() {
		var id string
		var newest int64
		if err := rows.Scan(&id, &newest); err != nil {
			return fmt.Errorf("store: load people: %w", err)
		}
		// The directory's newest_at is trusted like a fresh read for at most
		// one staleness period; a post that a crash kept out of it shows
		// after. The trust is spread over the period at random so that the
		// re-reads do not all fall due in the same second, 30 s after start.
		checked := now - mrand.Int64N(s.staleAfter.Milliseconds())
		if crashed {
			checked = 0
		}
		g.addLocked(id, newest, checked)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: load people: %w", err)
	}
	// Connections are read on first use (loadConns), not here: graph.go.
	return nil
}

// CursorKey is the secret that signs feed cursors. It lives in the directory
// database so that cursors survive restarts and work across instances.
func (s *Store) CursorKey() []byte { return s.cursorKey }

// Stats are the store's gauges, read from memory (and the file system's
// free space) without touching a file: what the console's overview, the
// metrics and health pages show. (Counts that need a query or a walk of the
// disk are in Totals.)
type Stats struct {
	OpenFiles    int // person files open now
	MaxOpenFiles int // the bound of the open-file cache
	// SQLiteConnections is every SQLite connection open: one per open person
	// file, plus the directory's writer and its readers.
	SQLiteConnections int
	SQLiteBytes       int64 // memory SQLite holds now, outside the Go heap
	SQLitePeakBytes   int64 // the most it has held
	HeadBytes         int64 // memory of the cached heads
	HeadBudget        int64 // their bound; 0 or less when heads are off
	FileReads         int64 // looks into person files on the feed path, ever
	// UnreadableFiles is how many person files cannot be read now
	// (FileProblems lists them).
	UnreadableFiles int
	DiskFull        bool // writes are refused for lack of space (DiskFull)
	// ReplicationQueue is how many written person files the replica
	// lacks some of, watched or not (personfile's queue, Wrote), and
	// ReplicationQueueWait how long the oldest write among them has waited.
	ReplicationQueue     int
	ReplicationQueueWait time.Duration
	// FileOpens, FileCloses and TakeUps count, since start, person files
	// opened, closed and handed to replication.
	FileOpens, FileCloses, TakeUps int64
	// Ships count written files shipped to the replica without a take-up.
	Ships int64
}

// WaitClosed returns once the person files evicted so far are closed:
// a close runs off the request path and checkpoints, so until then the
// file on disk and the free space are not what they will be.
func (s *Store) WaitClosed() { s.files.WaitClosed() }

// Stats returns the store's gauges now.
func (s *Store) Stats() Stats {
	open := s.files.Len()
	sqlNow, sqlPeak := SQLiteMemory()
	queue, wait := s.files.Queue()
	n := s.files.Counts()
	return Stats{
		OpenFiles:            open,
		MaxOpenFiles:         s.files.Max(),
		SQLiteConnections:    open + 1 + directoryReaders,
		SQLiteBytes:          sqlNow,
		SQLitePeakBytes:      sqlPeak,
		HeadBytes:            s.headBytes.Load(),
		HeadBudget:           s.headBudget,
		FileReads:            s.fileReads.Load(),
		UnreadableFiles:      int(s.problems.n.Load()),
		DiskFull:             s.DiskFull(),
		ReplicationQueue:     queue,
		ReplicationQueueWait: wait,
		FileOpens:            n.Opens,
		FileCloses:           n.Closes,
		TakeUps:              n.TakeUps,
		Ships:                n.Ships,
	}
}

// Ping reads the directory database.
func (s *Store) Ping(ctx context.Context) error {
	var n int
	return s.r.QueryRowContext(ctx, `SELECT count(*) FROM meta`).Scan(&n)
}

// Close flushes pending times and closes every file, checkpointing each WAL.
// Call it after the HTTP server has finished its requests.
func (s *Store) Close() error {
	s.once.Do(func() {
		close(s.stop)
		<-s.stopped
		<-s.swept
		errs := []error{s.flushDirty(context.Background())}
		s.files.Close()
		errs = append(errs, s.tokenQuery.Close(), s.r.Close(), s.w.Close())
		s.closeErr = errors.Join(errs...)
		if errs[0] == nil {
			s.run.drop() // every newest time reached the directory
		} else {
			s.run.f.Close() // left unlocked: the next Open reads the files
		}
	})
	return s.closeErr
}

// writeTx runs fn in one immediate transaction on the directory writer. A
// full disk is InsufficientStorage (faults.go).
func (s *Store) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return s.spaceErr(err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return s.spaceErr(err)
	}
	if err := tx.Commit(); err != nil {
		return s.spaceErr(err)
	}
	s.noteWrote()
	return nil
}

// exec runs one statement on the directory writer. A full disk is
// InsufficientStorage (faults.go).
func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := s.w.ExecContext(ctx, query, args...)
	if err != nil {
		return nil, s.spaceErr(err)
	}
	s.noteWrote()
	return res, nil
}
