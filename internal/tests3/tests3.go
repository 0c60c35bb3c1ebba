// Package tests3 runs a real S3 server for tests: versitygw v1.8.0 with its
// posix backend, on a free port of 127.0.0.1 and a fresh folder, started in
// well under a second (../shared/notes/s3.md). It is its own package because
// the replica's and the command's tests both need it and test files cannot
// share code across packages; nothing but tests imports it.
package tests3

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// The server's keys and the bucket Start makes.
const (
	Key    = "k"
	Secret = "s"
	Bucket = "nah-test"
)

// Install is how to get the server; .ci/run does it.
const Install = "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// Binary finds the server: $VERSITYGW, then PATH, then GOPATH/bin. Without
// it the test is skipped, naming the install command, except in CI, where
// a skipped S3 test would pass off as a passing one, so there it fails.
func Binary(t testing.TB) string {
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
		t.Fatalf("versitygw not found (.ci/run installs it): %s", Install)
	}
	t.Skipf("versitygw not found: %s", Install)
	return ""
}

// Server is one versitygw process. Stop and Start keep its folder and
// port, so the same bucket comes back.
type Server struct {
	Addr string // host:port
	Dir  string // the posix backend's folder

	t    testing.TB
	bin  string
	cmd  *exec.Cmd
	exit chan struct{}
}

// Start runs a server with Bucket made, stopped with the test.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, bin: Binary(t), Dir: t.TempDir(), Addr: FreeAddr(t)}
	s.Start()
	t.Cleanup(s.Stop)
	if _, err := s.Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(Bucket)}); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	return s
}

// FreeAddr is a port of 127.0.0.1 free now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Endpoint is the server's URL.
func (s *Server) Endpoint() string { return "http://" + s.Addr }

// Start (re)starts the server and waits until it listens.
func (s *Server) Start() {
	s.t.Helper()
	cmd := exec.Command(s.bin, "--access", Key, "--secret", Secret, "--port", s.Addr, "--quiet", "posix", s.Dir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.cmd, s.exit = cmd, make(chan struct{})
	go func(exit chan struct{}) { cmd.Wait(); close(exit) }(s.exit)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
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
			s.t.Fatalf("versitygw not listening on %s after 10 s: %v", s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop ends the server and waits until it is gone; stopping a stopped
// server does nothing.
func (s *Server) Stop() {
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

// Client is a plain S3 client of the server, as an operator's tool would be.
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(s.Endpoint()),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(Key, Secret, ""),
	})
}

// Env is the environment an operator would give nah for the server at
// endpoint (the server's own, or a proxy in front of it).
func (s *Server) Env(endpoint string) map[string]string {
	return map[string]string{
		"AWS_ENDPOINT_URL_S3":   endpoint,
		"AWS_ACCESS_KEY_ID":     Key,
		"AWS_SECRET_ACCESS_KEY": Secret,
	}
}

// List is every key under prefix in Bucket.
func (s *Server) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	p := s3.NewListObjectsV2Paginator(s.Client(), &s3.ListObjectsV2Input{Bucket: aws.String(Bucket), Prefix: aws.String(prefix)})
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
