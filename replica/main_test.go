package replica_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nah-app/nah/replica"
	"github.com/nah-app/nah/store"
)

func TestMain(m *testing.M) {
	// Machines of this kind set AWS_CA_BUNDLE, which Litestream's S3 client
	// refuses (../shared/notes/s3.md); Target.Init clears it too, but the
	// tests' own clients are made before.
	os.Unsetenv("AWS_CA_BUNDLE")
	os.Exit(m.Run())
}

// The tests' S3 server: versitygw with its posix backend, started by each
// test that needs one on a free port of 127.0.0.1 and a fresh folder.
const (
	s3Key     = "k"
	s3Secret  = "s"
	s3Bucket  = "nah-test"
	vgwModule = "github.com/versity/versitygw/cmd/versitygw@v1.8.0"
)

// versitygwBin finds the server: $VERSITYGW, then PATH, then GOPATH/bin.
// Without it the test is skipped, naming the install command, except in CI,
// where a skipped S3 test would pass off as a passing one.
func versitygwBin(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("VERSITYGW"); p != "" {
		return p
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("versitygw not found: .ci/run installs it with go install %s", vgwModule)
	}
	t.Skipf("versitygw not found: go install %s", vgwModule)
	return ""
}

// s3Server is one versitygw process; stop and start keep its folder and
// port, so the same bucket comes back.
type s3Server struct {
	t    testing.TB
	bin  string
	dir  string
	addr string
	cmd  *exec.Cmd
	exit chan struct{}
}

func startS3(t testing.TB) *s3Server {
	t.Helper()
	s := &s3Server{t: t, bin: versitygwBin(t), dir: t.TempDir(), addr: freeAddr(t)}
	s.start()
	t.Cleanup(s.stop)
	c := s.client()
	if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(s3Bucket)}); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	return s
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (s *s3Server) endpoint() string { return "http://" + s.addr }

func (s *s3Server) start() {
	s.t.Helper()
	cmd := exec.Command(s.bin, "--access", s3Key, "--secret", s3Secret, "--port", s.addr, "--quiet", "posix", s.dir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.cmd, s.exit = cmd, make(chan struct{})
	go func(exit chan struct{}) { cmd.Wait(); close(exit) }(s.exit)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-s.exit:
			s.t.Fatalf("versitygw exited at start: %v", cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("versitygw not listening on %s after 10 s: %v", s.addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop ends the server and waits until it is gone (idempotent).
func (s *s3Server) stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exit:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.exit
	}
	s.cmd = nil
}

// client is a plain S3 client of the server, as an operator's tool would be.
func (s *s3Server) client() *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(s.endpoint()),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s3Key, s3Secret, ""),
	})
}

// env is the environment an operator would give nah for this server.
func (s *s3Server) env(endpoint string) func(string) string {
	m := map[string]string{
		"AWS_ENDPOINT_URL_S3":   endpoint,
		"AWS_ACCESS_KEY_ID":     s3Key,
		"AWS_SECRET_ACCESS_KEY": s3Secret,
	}
	return func(k string) string { return m[k] }
}

// target parses and initialises s3://nah-test/<prefix> on the server (or
// on endpoint, a proxy in front of it, when not empty).
func (s *s3Server) target(t testing.TB, prefix, endpoint string) *replica.Target {
	t.Helper()
	if endpoint == "" {
		endpoint = s.endpoint()
	}
	tg, err := replica.ParseTarget("s3://"+s3Bucket+"/"+prefix, s.env(endpoint))
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
	r   *replica.Replicator
	b   *replica.Backups

	cancel context.CancelFunc
	closed bool
}

type nodeOpts struct {
	maxOpen, maxWatched int
	run                 bool // start Backups.Run
}

func openNode(t testing.TB, dir string, tg *replica.Target, o nodeOpts) *node {
	t.Helper()
	ctx := context.Background()
	log := testLogger(t)
	meta := filepath.Join(dir, "replication")
	if err := os.MkdirAll(meta, 0o700); err != nil {
		t.Fatal(err)
	}
	r, err := replica.Open(ctx, replica.Config{Target: tg, DataDir: dir, MetaDir: meta, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cfg := store.Config{Dir: dir, MaxOpenFiles: o.maxOpen, Logger: log}
	cfg.Hooks.Watch = r.Watch
	cfg.Hooks.Unwatch = func(p string) {
		if err := r.Unwatch(p); err != nil {
			log.Warn("replication: last sync", "err", err)
		}
	}
	cfg.Hooks.MaxWatched = o.maxWatched
	s, err := store.Open(ctx, cfg)
	if err != nil {
		r.Close(ctx)
		t.Fatal(err)
	}
	if err := r.Watch(ctx, s.Path(store.DirectoryRel)); err != nil {
		t.Fatal(err)
	}
	n := &node{dir: dir, s: s, r: r}
	n.b = &replica.Backups{Repl: r, Behind: time.Minute, Rewatch: s.Rewatch, Log: log}
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

// dump reads every table of the SQLite file at path, Litestream's own
// excepted, as sorted rows of text.
func dump(t testing.TB, path string) map[string][]string {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=query_only(1)&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_litestream%'`)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var tables []string
	for rows.Next() {
		var n string
		rows.Scan(&n)
		tables = append(tables, n)
	}
	rows.Close()
	out := map[string][]string{}
	for _, tb := range tables {
		rs, err := db.Query(`SELECT * FROM "` + tb + `"`)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, tb, err)
		}
		cols, _ := rs.Columns()
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		out[tb] = []string{}
		for rs.Next() {
			if err := rs.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out[tb] = append(out[tb], fmt.Sprintf("%q", vals))
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		rs.Close()
		sort.Strings(out[tb])
	}
	return out
}

// sameRows fails the test unless the files at a and b hold the same rows,
// and returns how many rows they hold.
func sameRows(t testing.TB, live, restored string) int {
	t.Helper()
	a, b := dump(t, live), dump(t, restored)
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
func restoreAll(t testing.TB, n *node, tg *replica.Target, rels []string) map[string]string {
	t.Helper()
	out := t.TempDir()
	from := map[string]string{}
	for i, rel := range rels {
		p := filepath.Join(out, fmt.Sprintf("%03d.db", i))
		src, err := replica.RestoreFile(context.Background(), tg, rel, p, time.Time{})
		if err != nil {
			t.Fatalf("restore %s: %v", rel, err)
		}
		from[rel] = src
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

// countingProxy forwards TCP connections to addr and counts them.
type countingProxy struct {
	ln       net.Listener
	accepted atomic.Int64
	live     atomic.Int64
	peak     atomic.Int64
}

func newCountingProxy(t testing.TB, addr string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			go p.forward(c, addr)
		}
	}()
	return p
}

func (p *countingProxy) forward(c net.Conn, addr string) {
	defer c.Close()
	n := p.live.Add(1)
	defer p.live.Add(-1)
	for {
		old := p.peak.Load()
		if n <= old || p.peak.CompareAndSwap(old, n) {
			break
		}
	}
	up, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

func (p *countingProxy) endpoint() string { return "http://" + p.ln.Addr().String() }


// list is every key under prefix in the test bucket.
func (s *s3Server) list(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	p := s3.NewListObjectsV2Paginator(s.client(), &s3.ListObjectsV2Input{Bucket: aws.String(s3Bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys, nil
}
