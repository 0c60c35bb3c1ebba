package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// needTool returns the path of a program the test needs; without it the
// test is skipped, except under CI=true, where .ci/run installs it: there
// it fails.
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		msg := fmt.Sprintf("%s is not installed (Debian's %s package; .ci/run installs it)", name, pkg)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nah test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a certificate for names (DNS names or IP addresses) signed
// by ca, and its key, as PEM files in dir.
func (ca *testCA) issue(t *testing.T, dir string, names ...string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, names[0]+".crt"), filepath.Join(dir, names[0]+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// httpsClient reaches the server at addr whatever the URL's host, as a
// phone that resolved the name to it would, and trusts roots only. It
// does not follow redirects.
func httpsClient(roots []byte, addr string) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(roots)
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// useHTTPS makes p's calls go to https://name:port through client.
func (p *proc) useHTTPS(name string, client *http.Client) {
	_, port, _ := net.SplitHostPort(p.addr)
	p.base, p.client = "https://"+net.JoinHostPort(name, port), client
}

// waitLog waits until the server's log matches re and returns the match's
// first group (or the whole match).
func (p *proc) waitLog(t *testing.T, re *regexp.Regexp, within time.Duration) string {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(p.log()); m != nil {
			return m[len(m)-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing in the log matches %s after %v:\n%s", re, within, p.log())
		}
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.log())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no exit 20 s after SIGTERM")
	}
}

// apiRoundTrip signs a person up, posts a moment and reads it back in
// their feed, through p.call.
func apiRoundTrip(t *testing.T, p *proc, handle string) {
	t.Helper()
	_, token := p.signup(t, handle)
	st, out, err := p.call("POST", "/api/v1/moments", token, map[string]string{"body": base64.StdEncoding.EncodeToString([]byte("over TLS"))})
	if err != nil || st != 201 {
		t.Fatalf("post: %d %v %v", st, out, err)
	}
	id := out["id"].(string)
	st, out, err = p.call("GET", "/api/v1/feed", token, nil)
	if err != nil || st != 200 {
		t.Fatalf("feed: %d %v %v", st, out, err)
	}
	if ms, _ := out["moments"].([]any); len(ms) != 1 || ms[0].(map[string]any)["id"] != id {
		t.Fatalf("feed: %v, want the moment %s", out, id)
	}
}

// pebble is Let's Encrypt's test CA, run by a test.
type pebble struct {
	directory string // the ACME directory URL
	caFile    string // the root of pebble's own HTTPS listeners, for SSL_CERT_FILE
	root      []byte // the root that pebble's certificates chain to (it makes a new one at each start)
	cmd       *exec.Cmd
	out       *bytes.Buffer
	done      chan struct{}
}

// freeAddr is a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startPebble runs Debian's pebble with challenge validation off
// (PEBBLE_VA_ALWAYS_VALID: every authorization is valid, so no DNS name
// needs to point here), no artificial sleeps and no rejected nonces. Its
// HTTPS listeners get a certificate from a CA made here, which the server
// trusts through SSL_CERT_FILE; pebble's package ships none.
func startPebble(t *testing.T) *pebble {
	t.Helper()
	bin := needTool(t, "pebble", "pebble")
	dir := t.TempDir()
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, dir, "localhost", "127.0.0.1")
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	listen, mgmt := freeAddr(t), freeAddr(t)
	// Ports pebble would validate challenges on; with validation off
	// it never dials them.
	httpPort, tlsPort := 5002, 5001
	conf, _ := json.Marshal(map[string]any{"pebble": map[string]any{
		"listenAddress": listen, "managementListenAddress": mgmt,
		"certificate": certFile, "privateKey": keyFile,
		"httpPort": httpPort, "tlsPort": tlsPort, "ocspResponderURL": "", "externalAccountBindingRequired": false,
	}})
	confFile := filepath.Join(dir, "pebble-config.json")
	if err := os.WriteFile(confFile, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	pb := &pebble{directory: "https://" + listen + "/dir", caFile: caFile, out: new(bytes.Buffer), done: make(chan struct{})}
	pb.cmd = exec.Command(bin, "-config", confFile)
	pb.cmd.Env = []string{"PEBBLE_VA_ALWAYS_VALID=1", "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PATH=" + os.Getenv("PATH")}
	w := &lockedWriter{buf: pb.out}
	pb.cmd.Stdout, pb.cmd.Stderr = w, w
	if err := pb.cmd.Start(); err != nil {
		msg := fmt.Sprintf("pebble does not start: %v", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	go func() { pb.cmd.Wait(); close(pb.done) }()
	t.Cleanup(pb.stop)

	c := httpsClient(ca.pem, listen)
	c.Timeout = 2 * time.Second
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		res, err := c.Get(pb.directory)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		select {
		case <-pb.done:
			t.Fatalf("pebble exited at start:\n%s", w.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pebble does not answer: %v\n%s", err, w.String())
		}
	}
	res, err := httpsClient(ca.pem, mgmt).Get("https://" + mgmt + "/roots/0")
	if err != nil {
		t.Fatal(err)
	}
	pb.root, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !bytes.Contains(pb.root, []byte("BEGIN CERTIFICATE")) {
		t.Fatalf("pebble's root: %d %s", res.StatusCode, pb.root)
	}
	return pb
}

func (pb *pebble) stop() {
	pb.cmd.Process.Kill()
	<-pb.done
}

type lockedWriter struct {
	mu  sync.Mutex
	buf *bytes.Buffer
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestACMEWithPebble: with NAH_DOMAIN, the server obtains a certificate
// for nah.test from a real ACME server (pebble), and a client that trusts
// only pebble's root signs up, posts and reads its feed over TLS 1.2 or
// later; answers carry HSTS; the first-admin link is https://nah.test and
// the console's cookie is Secure; plain HTTP redirects, except the ACME
// challenge path. The certificate and the account key are in
// NAH_DATA_DIR/acme (0700). After pebble is stopped, a restart serves the
// same certificate from there, asking nothing of the CA; and a server with
// no certificate yet, the CA unreachable, says so in its log and goes on
// answering plain HTTP.
func TestACMEWithPebble(t *testing.T) {
	pb := startPebble(t)
	dir := t.TempDir()
	env := []string{"NAH_DOMAIN=nah.test", "NAH_HTTP_ADDR=127.0.0.1:0", "NAH_ACME_DIRECTORY=" + pb.directory,
		"NAH_ACME_EMAIL=ops@nah.test", "SSL_CERT_FILE=" + pb.caFile}
	p := start(t, dir, env...)
	c := httpsClient(pb.root, p.addr)
	p.useHTTPS("nah.test", c)

	res, err := c.Get(p.base + "/healthz")
	if err != nil {
		t.Fatalf("HTTPS with pebble's certificate: %v\n%s\npebble:\n%s", err, p.log(), pb.out)
	}
	res.Body.Close()
	leaf := res.TLS.PeerCertificates[0]
	if res.StatusCode != 200 || res.TLS.Version < tls.VersionTLS12 || leaf.VerifyHostname("nah.test") != nil {
		t.Fatalf("healthz: %d, TLS %x, certificate for %v", res.StatusCode, res.TLS.Version, leaf.DNSNames)
	}
	// A client offering HTTP/2, as phones do, gets HTTP/1.1 (app/tls.go).
	conn, err := tls.Dial("tcp", p.addr, &tls.Config{ServerName: "nah.test", RootCAs: c.Transport.(*http.Transport).TLSClientConfig.RootCAs, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if proto := conn.ConnectionState().NegotiatedProtocol; proto != "http/1.1" {
		t.Errorf("ALPN chose %q, want http/1.1", proto)
	}
	conn.Close()
	if hsts := res.Header.Get("Strict-Transport-Security"); !strings.HasPrefix(hsts, "max-age=") {
		t.Errorf("Strict-Transport-Security: %q", hsts)
	}
	apiRoundTrip(t, p, "ann")

	// The first-admin link starts with https://nah.test:port, and the
	// console's session cookie is Secure.
	link := p.waitLog(t, regexp.MustCompile(`(https://nah\.test:\d+/console/setup/[A-Za-z0-9_-]{43})\s`), 5*time.Second)
	if !strings.HasPrefix(link, p.base+"/") {
		t.Fatalf("setup link %s, want it under %s", link, p.base)
	}
	res, err = c.PostForm(link, url.Values{"name": {"root"}, "password": {"admin-password"}, "password2": {"admin-password"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if cookies := res.Cookies(); res.StatusCode != 303 || len(cookies) != 1 || !cookies[0].Secure || !cookies[0].HttpOnly {
		t.Fatalf("setup: %d, cookies %v, want one Secure, HttpOnly session", res.StatusCode, res.Header["Set-Cookie"])
	}

	// Plain HTTP redirects to HTTPS; the challenge path is ACME's.
	httpAddr := p.waitLog(t, regexp.MustCompile(`http_listen=(\S+)`), time.Second)
	plain := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("GET", "http://"+httpAddr+"/console?x=1", nil)
	req.Host = "nah.test"
	res, err = plain.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if want := p.base + "/console?x=1"; res.StatusCode != 301 || res.Header.Get("Location") != want {
		t.Errorf("plain HTTP: %d to %q, want 301 to %s", res.StatusCode, res.Header.Get("Location"), want)
	}
	req, _ = http.NewRequest("GET", "http://"+httpAddr+"/.well-known/acme-challenge/unknown-token", nil)
	req.Host = "nah.test"
	if res, err = plain.Do(req); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 404 {
		t.Errorf("an unknown ACME challenge over plain HTTP: %d, want autocert's 404, not a redirect", res.StatusCode)
	}

	// The certificate and account key are kept in the data directory.
	if fi, err := os.Stat(filepath.Join(dir, "acme")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("NAH_DATA_DIR/acme: %v %v, want a 0700 directory", fi, err)
	}
	for _, f := range []string{"nah.test", "acme_account+key"} {
		if _, err := os.Stat(filepath.Join(dir, "acme", f)); err != nil {
			t.Errorf("the ACME cache lacks %s: %v", f, err)
		}
	}
	p.stop(t)

	// A restart with the CA gone: the same certificate, from the cache.
	pb.stop()
	p2 := start(t, dir, env...)
	c2 := httpsClient(pb.root, p2.addr)
	p2.useHTTPS("nah.test", c2)
	res, err = c2.Get(p2.base + "/healthz")
	if err != nil {
		t.Fatalf("HTTPS after a restart with pebble stopped: %v\n%s", err, p2.log())
	}
	res.Body.Close()
	if got := res.TLS.PeerCertificates[0].SerialNumber; got.Cmp(leaf.SerialNumber) != 0 {
		t.Errorf("after the restart, certificate %x, want the cached %x", got, leaf.SerialNumber)
	}
	apiRoundTrip(t, p2, "bob")
	time.Sleep(200 * time.Millisecond) // ObtainCertificates' look at start
	if strings.Contains(p2.log(), "no HTTPS certificate") {
		t.Errorf("the restart asked the CA for a certificate:\n%s", p2.log())
	}
	p2.stop(t)

	// No certificate and no CA: a clear log line; plain HTTP still answers.
	p3 := start(t, t.TempDir(), env...)
	p3.waitLog(t, regexp.MustCompile(`level=ERROR msg="no HTTPS certificate for a name of NAH_DOMAIN[^"]*" domain=nah.test err=`), 30*time.Second)
	httpAddr = p3.waitLog(t, regexp.MustCompile(`http_listen=(\S+)`), time.Second)
	req, _ = http.NewRequest("GET", "http://"+httpAddr+"/", nil)
	req.Host = "nah.test"
	if res, err = plain.Do(req); err != nil || res.StatusCode != 301 {
		t.Fatalf("plain HTTP without a certificate: %v %v", res, err)
	}
	res.Body.Close()
	p3.stop(t)
}

// TestOwnCertificate: with NAH_TLS_CERT and NAH_TLS_KEY the API is served
// over TLS with that certificate, TLS 1.1 is refused, and plain HTTP
// redirects to the certificate's name.
func TestOwnCertificate(t *testing.T) {
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, t.TempDir(), "nah.test")
	p := start(t, t.TempDir(), "NAH_TLS_CERT="+certFile, "NAH_TLS_KEY="+keyFile, "NAH_HTTP_ADDR=127.0.0.1:0")
	c := httpsClient(ca.pem, p.addr)
	p.useHTTPS("nah.test", c)
	apiRoundTrip(t, p, "ann")
	res, err := c.Get(p.base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.Header.Get("Strict-Transport-Security") == "" {
		t.Error("no HSTS over TLS")
	}

	// Go's client offers nothing below TLS 1.2 unless told to: the
	// refusal must be the server's alert.
	old := httpsClient(ca.pem, p.addr)
	old.Transport.(*http.Transport).TLSClientConfig.MinVersion = tls.VersionTLS10
	old.Transport.(*http.Transport).TLSClientConfig.MaxVersion = tls.VersionTLS11
	if res, err := old.Get(p.base + "/healthz"); err == nil || !strings.Contains(err.Error(), "remote error: tls: protocol version not supported") {
		if err == nil {
			res.Body.Close()
		}
		t.Errorf("a TLS 1.1 client: %v, want the server's protocol version alert", err)
	}

	httpAddr := p.waitLog(t, regexp.MustCompile(`http_listen=(\S+)`), time.Second)
	_, port, _ := net.SplitHostPort(p.addr)
	plain := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err = plain.Get("http://" + httpAddr + "/api/v1/feed") // Host is the address: not the certificate's name
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if want := "https://nah.test:" + port + "/api/v1/feed"; res.StatusCode != 301 || res.Header.Get("Location") != want {
		t.Errorf("plain HTTP: %d to %q, want 301 to %s", res.StatusCode, res.Header.Get("Location"), want)
	}
	res, err = plain.Post("http://"+httpAddr+"/api/v1/moments", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 400 {
		t.Errorf("a POST over plain HTTP: %d, want 400", res.StatusCode)
	}
	p.stop(t)
}

// TestBadCertificateExits2: a certificate or key that cannot be read, a
// key that is not the certificate's, or one without the other stops the
// server with status 2 and a message naming the variable at fault.
func TestBadCertificateExits2(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, dir, "nah.test")
	_, otherKey := ca.issue(t, dir, "other.test")
	for _, c := range []struct {
		env  []string
		name string
	}{
		{[]string{"NAH_TLS_CERT=" + filepath.Join(dir, "missing.crt"), "NAH_TLS_KEY=" + keyFile}, "NAH_TLS_CERT"},
		{[]string{"NAH_TLS_CERT=" + certFile, "NAH_TLS_KEY=" + filepath.Join(dir, "missing.key")}, "NAH_TLS_KEY"},
		{[]string{"NAH_TLS_CERT=" + certFile, "NAH_TLS_KEY=" + otherKey}, "NAH_TLS_KEY"},
		{[]string{"NAH_TLS_CERT=" + keyFile, "NAH_TLS_KEY=" + keyFile}, "NAH_TLS_CERT"},
		{[]string{"NAH_TLS_CERT=" + certFile}, "NAH_TLS_KEY"},
		{[]string{"NAH_TLS_CERT=" + certFile, "NAH_TLS_KEY=" + keyFile, "NAH_DOMAIN=nah.test"}, "NAH_TLS_CERT"},
		{[]string{"NAH_DOMAIN=*.nah.test"}, "NAH_DOMAIN"},
		{[]string{"NAH_HTTP_ADDR=:80"}, "NAH_HTTP_ADDR"},
	} {
		cmd := exec.Command(binary, "serve")
		cmd.Env = append([]string{"NAH_DATA_DIR=" + t.TempDir(), "NAH_ADDR=127.0.0.1:0"}, c.env...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("%v: exit %v, want status 2\n%s", c.env, err, out)
		}
		if !strings.Contains(string(out), "nah: "+c.name+"=") {
			t.Errorf("%v: the message does not name %s: %s", c.env, c.name, out)
		}
	}
}
