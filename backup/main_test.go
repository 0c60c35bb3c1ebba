package backup_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/internal/tests3"
	"github.com/nah-app/nah/internal/testutil"
	"github.com/nah-app/nah/store"
)

func TestMain(m *testing.M) {
	// Machines of this kind set AWS_CA_BUNDLE, which Litestream's S3 client
	// refuses (../shared/notes/s3.md); Target.Init clears it too, but the
	// tests' own clients are made before.
	os.Unsetenv("AWS_CA_BUNDLE")
	// SQLite is configured once, before any test opens a database: an
	// internal test that opened one first made every later store.Open of
	// the binary fail (enable memory statistics: code 21).
	if err := store.ConfigureSQLite(); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// s3Target parses and initialises s3://nah-test/<prefix> on srv (or on
// endpoint, a proxy in front of it, when not empty) as an operator would
// configure it.
func s3Target(t testing.TB, srv *tests3.Server, prefix, endpoint string) *backup.Target {
	t.Helper()
	if endpoint == "" {
		endpoint = srv.Endpoint()
	}
	env := srv.Env(endpoint)
	tg, err := backup.ParseTarget("s3://"+tests3.Bucket+"/"+prefix, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	return tg
}

// node is a store replicating to a target, wired as cmd/nah's serve wires
// it (cmd/nah/backups.go): the store's hooks watch and unwatch person files,
// the directory is always watched, and Backups runs the catch-up loop.
type node struct {
	dir string
	s   *store.Store
	r   *backup.Replicator
	b   *backup.Backups

	cancel context.CancelFunc
	closed bool
}

type nodeOpts struct {
	maxOpen, maxWatched int
	run                 bool          // start Backups.Run
	walIdle             time.Duration // store.Config.WALIdle
	queue               bool          // keep the replication queue on disk, as the server does
}

func openNode(t testing.TB, dir string, tg *backup.Target, o nodeOpts) *node {
	t.Helper()
	ctx := context.Background()
	log := testLogger(t)
	meta := filepath.Join(dir, "replication")
	if err := os.MkdirAll(meta, 0o700); err != nil {
		t.Fatal(err)
	}
	r, err := backup.Open(ctx, backup.Config{Target: tg, DataDir: dir, MetaDir: meta, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cfg := store.Config{Dir: dir, MaxOpenFiles: o.maxOpen, Logger: log}
	cfg.Replicator, cfg.MaxWatched, cfg.WALIdle = r, o.maxWatched, o.walIdle
	if o.queue {
		cfg.QueueDir = filepath.Join(dir, filepath.FromSlash(nah.QueueRel))
	}
	s, err := store.Open(ctx, cfg)
	if err != nil {
		r.Close(ctx)
		t.Fatal(err)
	}
	if err := r.Watch(ctx, s.Path(nah.DirectoryRel)); err != nil {
		t.Fatal(err)
	}
	n := &node{dir: dir, s: s, r: r}
	n.b = &backup.Backups{Repl: r, Behind: time.Minute, Source: s, Files: s, Log: log, CatchUpEvery: time.Second}
	rctx, cancel := context.WithCancel(ctx)
	n.cancel = cancel
	if o.run {
		go n.b.Run(rctx)
	}
	t.Cleanup(n.close)
	return n
}

// close shuts down as serve does: the store first, then replication.
func (n *node) close() {
	if n.closed {
		return
	}
	n.closed = true
	n.cancel()
	n.s.Close()
	n.r.Close(context.Background())
}

func (n *node) person(t testing.TB, handle string) string {
	t.Helper()
	p, err := n.s.CreatePerson(context.Background(), store.NewPerson{Handle: handle, PasswordHash: "x"})
	if err != nil {
		t.Fatal(err)
	}
	return p.ID
}

// post writes one moment and says how long it took.
func (n *node) post(t testing.TB, id string, i int) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := n.s.CreateMoment(context.Background(), id, fmt.Appendf(nil, "moment %d of %s", i, id)); err != nil {
		t.Fatalf("post %d by %s: %v", i, id, err)
	}
	return time.Since(start)
}

// testLogger sends the log to the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// sameRows fails the test unless the files at a and b hold the same rows,
// and returns how many rows they hold.
func sameRows(t testing.TB, live, restored string) int {
	t.Helper()
	a, b := testutil.Dump(t, live), testutil.Dump(t, restored)
	n := 0
	for tb, rows := range a {
		other, ok := b[tb]
		if !ok {
			t.Errorf("%s: table %s missing from the restore", restored, tb)
			continue
		}
		if len(rows) != len(other) {
			t.Errorf("%s: table %s has %d rows, live %d", restored, tb, len(other), len(rows))
			continue
		}
		for i := range rows {
			if rows[i] != other[i] {
				t.Errorf("%s: table %s differs: live %s, restored %s", restored, tb, rows[i], other[i])
				break
			}
		}
		n += len(rows)
	}
	for tb := range b {
		if _, ok := a[tb]; !ok {
			t.Errorf("%s: table %s is not in the live file", restored, tb)
		}
	}
	return n
}

// restoreAll restores every file of the node from tg into a fresh folder
// and compares it row by row with the live file; it returns where each
// came from.
func restoreAll(t testing.TB, n *node, tg *backup.Target, rels []string) map[string]string {
	t.Helper()
	out := t.TempDir()
	from := map[string]string{}
	for i, rel := range rels {
		p := filepath.Join(out, fmt.Sprintf("%03d.db", i))
		src, err := backup.RestoreFile(context.Background(), tg, rel, p, time.Time{})
		if err != nil {
			t.Fatalf("restore %s: %v", rel, err)
		}
		from[rel] = src.String()
		sameRows(t, n.s.Path(rel), p)
	}
	return from
}

// p95 is the 95th percentile of ds.
func p95(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)*95+99)/100-1]
}

// median is the middle of ds.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// eventually polls cond every 50 ms until it holds or within runs out.
func eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// countingProxy is an HTTP proxy in front of the S3 server that keeps its
// clients' connections alive (versitygw closes each after one answer, so
// its own accepts would count requests, not connections) and counts the
// connections clients open to it.
type countingProxy struct {
	url      string
	accepted atomic.Int64
	live     atomic.Int64
	peak     atomic.Int64
}

func newCountingProxy(t testing.TB, addr string) *countingProxy {
	t.Helper()
	p := &countingProxy{}
	up := &url.URL{Scheme: "http", Host: addr}
	srv := httptest.NewUnstartedServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(up)
		r.Out.Host = r.In.Host // what the client signed
	}})
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			p.accepted.Add(1)
			n := p.live.Add(1)
			for old := p.peak.Load(); n > old && !p.peak.CompareAndSwap(old, n); old = p.peak.Load() {
			}
		case http.StateClosed, http.StateHijacked:
			p.live.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

func (p *countingProxy) endpoint() string { return p.url }

// bareFile is one person's database file replicated by a Replicator of its
// own, with no store: the tests that drive Watch, Sync, Ship and Unwatch
// by hand. The target is the directory replica.
type bareFile struct {
	r       *backup.Replicator
	target  *backup.Target
	replica string
	rel     string
	path    string
}

// newBareFile opens a Replicator (retention 0: the default) on a fresh
// data directory and a directory target, for person id's file, which it
// does not create.
func newBareFile(t *testing.T, id string, retention time.Duration) *bareFile {
	t.Helper()
	ctx := context.Background()
	data, replica := t.TempDir(), filepath.Join(t.TempDir(), "replica")
	target, err := backup.ParseTarget(replica, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if err := target.Init(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := backup.Open(ctx, backup.Config{Target: target, DataDir: data, MetaDir: filepath.Join(data, "replication"),
		Logger: testLogger(t), Retention: retention})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(ctx) })
	rel := "people/" + id + "/person.db"
	p := filepath.Join(data, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	return &bareFile{r: r, target: target, replica: replica, rel: rel, path: p}
}

// open is a connection of its own to the file, as an app opens it.
func (b *bareFile) open(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", b.path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	return db
}
