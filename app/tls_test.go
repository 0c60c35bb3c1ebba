package app

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHSTSOverTLSOnly: answers over TLS carry Strict-Transport-Security;
// answers over plain HTTP do not (browsers ignore it there, and it would
// not be true).
func TestHSTSOverTLSOnly(t *testing.T) {
	h := NewServer("", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), slog.New(slog.DiscardHandler)).Handler
	secure := httptest.NewTLSServer(h)
	defer secure.Close()
	plain := httptest.NewServer(h)
	defer plain.Close()
	res, err := secure.Client().Get(secure.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got := res.Header.Get("Strict-Transport-Security"); got != hstsHeader {
		t.Errorf("over TLS: Strict-Transport-Security %q, want %q", got, hstsHeader)
	}
	res, err = plain.Client().Get(plain.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got := res.Header.Get("Strict-Transport-Security"); got != "" {
		t.Errorf("over plain HTTP: Strict-Transport-Security %q", got)
	}
}

// TestRedirectToHTTPS: GET and HEAD are sent to the same path over HTTPS,
// on a name the server serves; other methods are refused with the API's
// error; the port is left out when it is 443.
func TestRedirectToHTTPS(t *testing.T) {
	ts := newTestServer(t, func(c *serverConfig) {
		c.TLS = TLSConfig{Domains: []string{"nah.example.com", "www.nah.example.com"}, CacheDir: t.TempDir()}
	})
	for _, c := range []struct {
		method, host, target, port string
		status                     int
		location                   string
	}{
		{"GET", "nah.example.com", "/console?tab=people", "443", 301, "https://nah.example.com/console?tab=people"},
		{"HEAD", "www.nah.example.com:80", "/", "443", 301, "https://www.nah.example.com/"},
		{"GET", "WWW.Nah.Example.COM.", "/api/v1/feed", "8443", 301, "https://www.nah.example.com:8443/api/v1/feed"},
		{"GET", "evil.example.net", "/x", "443", 301, "https://nah.example.com/x"},
		{"GET", "10.0.0.5", "/", "443", 301, "https://nah.example.com/"},
		{"POST", "nah.example.com", "/api/v1/moments", "443", 400, ""},
	} {
		req := httptest.NewRequest(c.method, c.target, nil)
		req.Host = c.host
		w := httptest.NewRecorder()
		ts.app.RedirectHandler(c.port).ServeHTTP(w, req)
		if w.Code != c.status || w.Header().Get("Location") != c.location {
			t.Errorf("%s %s%s: %d to %q, want %d to %q", c.method, c.host, c.target, w.Code, w.Header().Get("Location"), c.status, c.location)
		}
		if c.status == 400 {
			var body struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error.Code != "invalid" || !strings.Contains(body.Error.Message, "https://nah.example.com/api/v1/moments") {
				t.Errorf("%s over plain HTTP: %s", c.method, w.Body)
			}
		}
	}
}

// cacheCertificate puts a certificate for name, valid from notBefore to
// notAfter, in autocert's directory cache, as autocert would have.
func cacheCertificate(t *testing.T, dir, name string, notBefore, notAfter time.Time) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name}, NotBefore: notBefore, NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	data := append(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCertificateProblemsOnOverview: a name of NAH_DOMAIN that cannot get
// a certificate (the CA unreachable) is named on the console's overview
// with the error; a name the server does not serve is not news; a name
// with a good certificate in the cache is fine; one whose renewal has
// failed for half the renewal window is a problem again.
func TestCertificateProblemsOnOverview(t *testing.T) {
	cache := t.TempDir()
	now := time.Now()
	cacheCertificate(t, cache, "good.nah.test", now.Add(-time.Hour), now.Add(60*24*time.Hour))
	cacheCertificate(t, cache, "stale.nah.test", now.Add(-89*24*time.Hour), now.Add(24*time.Hour))
	ts := newTestServer(t, func(c *serverConfig) {
		c.TLS = TLSConfig{Domains: []string{"nah.test", "good.nah.test", "stale.nah.test"}, CacheDir: cache, DirectoryURL: "https://127.0.0.1:1/directory"}
	})
	admin := signedInAdmin(t, ts)
	if p := get(t, admin, ts.URL+"/console"); strings.Contains(p.body, "No HTTPS certificate") {
		t.Fatalf("a warning before any attempt:\n%s", p.body)
	}
	for _, name := range []string{"nah.test", "good.nah.test", "stale.nah.test", "scanner.example.net", ""} {
		cert, err := ts.app.certs.getCertificate(ecdsaHello(name))
		if wantErr := name != "good.nah.test" && name != "stale.nah.test"; (err != nil) != wantErr || (cert == nil) == !wantErr {
			t.Errorf("%q: %v %v", name, cert, err)
		}
	}
	p := get(t, admin, ts.URL+"/console")
	for _, want := range []string{"No HTTPS certificate for nah.test", "connection refused", "No HTTPS certificate for stale.nah.test", "renewing it has failed so far"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the overview does not say %q:\n%s", want, p.body)
		}
	}
	for _, unwanted := range []string{"for good.nah.test", "scanner.example.net"} {
		if strings.Contains(p.body, unwanted) {
			t.Errorf("the overview says %q", unwanted)
		}
	}
	if n := len(ts.app.certs.certs); n != 3 {
		t.Errorf("%d names watched, want NAH_DOMAIN's 3", n)
	}
}

// TestTLSConfig: TLS 1.2 at least; HTTP/1.1 only, and ACME's TLS-ALPN-01
// protocol with NAH_DOMAIN; the operator's certificate otherwise.
func TestTLSConfig(t *testing.T) {
	acme := newTestServer(t, func(c *serverConfig) { c.TLS = TLSConfig{Domains: []string{"nah.test"}, CacheDir: t.TempDir()} })
	c := acme.app.TLSConfig()
	if c.MinVersion != tls.VersionTLS12 || strings.Join(c.NextProtos, " ") != "http/1.1 acme-tls/1" || c.GetCertificate == nil {
		t.Errorf("with NAH_DOMAIN: %+v", c)
	}
	own := &tls.Certificate{Certificate: [][]byte{{1}}}
	byo := newTestServer(t, func(c *serverConfig) { c.TLS = TLSConfig{Certificate: own} })
	c = byo.app.TLSConfig()
	if c.MinVersion != tls.VersionTLS12 || strings.Join(c.NextProtos, " ") != "http/1.1" || len(c.Certificates) != 1 || byo.app.certs != nil {
		t.Errorf("with NAH_TLS_CERT: %+v", c)
	}
}

// selfSigned is a certificate for name, for a test's TLS listener.
func selfSigned(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestConnectionBoundOverTLS: the bound holds for TLS connections as for
// plain ones (cmd/nah wraps the limiter's listener in tls.NewListener):
// idle ones make room for new clients, and with none idle a new one is
// answered 503.
func TestConnectionBoundOverTLS(t *testing.T) {
	own := selfSigned(t, "nah.test")
	ts := newTestServer(t, func(c *serverConfig) { c.TLS = TLSConfig{Certificate: &own} })
	const max = 4
	entered, release := make(chan struct{}, max), make(chan struct{})
	defer close(release)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer("", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			entered <- struct{}{}
			<-release
		}
	}), slog.New(slog.DiscardHandler))
	lim := ts.app.LimitConnections(srv, ln, max)
	go srv.Serve(tls.NewListener(lim, ts.app.TLSConfig()))
	defer srv.Close()
	dialTLS := func() *clientConn {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, ServerName: "nah.test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return &clientConn{c, bufio.NewReader(c)}
	}

	// Each connection is idle to the server before the next is made, so
	// that "idle longest" is the order they were made in: on a busy
	// machine the server may mark one idle after the client has read its
	// answer and made the next.
	l := lim.(*limitListener).l
	var idle []*clientConn
	for i := range 3 * max {
		c := dialTLS()
		if res, _, err := c.get("/"); err != nil || res.StatusCode != 200 {
			t.Fatalf("idle TLS connection %d: %v %v", i, res, err)
		}
		waitFor(t, "the connection to be idle", func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.idle.Len() == min(i+1, max)
		})
		idle = append(idle, c)
	}
	for i, c := range idle {
		if closed := c.closedByServer(50 * time.Millisecond); closed != (i < 2*max) {
			t.Errorf("idle TLS connection %d of %d: closed %v", i, len(idle), closed)
		}
	}
	for range max {
		c := dialTLS()
		fmt.Fprint(c, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
		<-entered
	}
	if res, _, err := dialTLS().get("/"); err != nil || res.StatusCode != 503 {
		t.Fatalf("over the bound, none idle: %v %v", res, err)
	}
}
