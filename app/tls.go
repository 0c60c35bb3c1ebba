package app

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/ui"
)

// HTTPS without a reverse proxy: ACME via x/crypto/acme/autocert with
// NAH_DOMAIN (cache in NAH_DATA_DIR/acme), or NAH_TLS_CERT and NAH_TLS_KEY.
// HTTP/1.1 only: the idlest-first connection bound (listener.go) cannot see
// an HTTP/2 connection as idle.

// TLSConfig is how the server serves HTTPS; the zero value is plain HTTP.
// cmd/nah fills it from NAH_DOMAIN, NAH_ACME_*, NAH_TLS_CERT and NAH_TLS_KEY.
type TLSConfig struct {
	// Domains are the names to obtain certificates for over ACME, the
	// first being the one links and redirects use.
	Domains []string
	// CacheDir keeps the ACME account key and the certificates
	// (NAH_DATA_DIR/acme, 0700).
	CacheDir string
	// Email is the contact the CA writes to about the certificates; empty
	// is none.
	Email string
	// DirectoryURL is the CA's ACME directory; empty is
	// DefaultACMEDirectory. Its HTTPS is verified against the system's
	// roots (SSL_CERT_FILE names others, for a private CA).
	DirectoryURL string
	// Certificate is the operator's own, when Domains is empty.
	Certificate *tls.Certificate
}

// Enabled reports whether the server serves HTTPS.
func (c TLSConfig) Enabled() bool { return len(c.Domains) > 0 || c.Certificate != nil }

// DefaultACMEDirectory is Let's Encrypt's production directory.
const DefaultACMEDirectory = autocert.DefaultACMEDirectory

// hstsHeader asks browsers to come back over HTTPS only, for a year, the
// shortest that the preload lists and most audits accept. Not
// includeSubDomains: a family's domain may have other names (a router, a
// printer) that serve no HTTPS, and this server has no say over them.
const hstsHeader = "max-age=31536000"

// RedirectMaxConnections bounds the plain-HTTP listener, which answers only
// redirects and the CA's HTTP-01 challenges: a browser that was typed the
// bare name, and the CA's few validation requests. Idle ones make room,
// as on the main listener.
const RedirectMaxConnections = 64

// TLSConfig returns the configuration of the HTTPS listener: TLS 1.2 at
// least, HTTP/1.1 only (see above), and the certificates of Config.TLS.
// Call it once.
func (a *App) TLSConfig() *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	if a.certs != nil {
		c.GetCertificate = a.certs.getCertificate
		c.NextProtos = append(c.NextProtos, acme.ALPNProto) // TLS-ALPN-01 challenges
	} else if a.cfg.TLS.Certificate != nil {
		c.Certificates = []tls.Certificate{*a.cfg.TLS.Certificate}
	}
	return c
}

// RedirectHandler answers the plain-HTTP listener: the CA's HTTP-01
// challenges under /.well-known/acme-challenge/ (with NAH_DOMAIN), and
// otherwise a permanent redirect of GET and HEAD to the same path over
// HTTPS on httpsPort. Other methods are refused with 400: a phone app that
// posts over plain HTTP has a bug to fix, and its password or token has
// already crossed the network in the clear.
func (a *App) RedirectHandler(httpsPort string) http.Handler {
	names := a.cfg.TLS.Domains
	if c := a.cfg.TLS.Certificate; len(names) == 0 && c != nil && c.Leaf != nil {
		names = c.Leaf.DNSNames
	}
	redirect := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := httpsURL(r, names, httpsPort)
		if target == "" {
			a.writeError(w, r, nah.Errorf(nah.Invalid, "", "this server answers over HTTPS only"))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			a.writeError(w, r, nah.Errorf(nah.Invalid, "", "this server answers over HTTPS only: %s", target))
			return
		}
		http.Redirect(w, r, target, http.StatusMovedPermanently)
	})
	if a.certs != nil {
		return a.certs.m.HTTPHandler(redirect)
	}
	return redirect
}

// httpsURL is r's URL over HTTPS. The host is the request's when it is one
// of names (any, when names is empty), else the first of names: the
// redirect never sends a client to a name this server does not serve.
func httpsURL(r *http.Request, names []string, port string) string {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if len(names) > 0 && !slices.Contains(names, host) {
		host = names[0]
	}
	if host == "" {
		return ""
	}
	if port != "443" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return "https://" + host + r.URL.RequestURI()
}

// ObtainCertificates gets a certificate for every name of NAH_DOMAIN now,
// rather than at the first visitor's handshake, so that a name that cannot
// get one is in the log within seconds of the start; then it looks again
// every hour, and after a failure sooner, backing off from a minute to an
// hour. It returns when ctx is done, at once without NAH_DOMAIN.
// autocert renews by itself; these looks are what tell the console.
func (a *App) ObtainCertificates(ctx context.Context) {
	if a.certs == nil {
		return
	}
	retry := certRetryMin
	for {
		failing := false
		for _, name := range a.cfg.TLS.Domains {
			if _, err := a.certs.getCertificate(ecdsaHello(name)); err != nil {
				failing = true
			}
		}
		next := certCheckEvery
		if failing {
			next, retry = retry, min(retry*2, certRetryMax)
		} else {
			retry = certRetryMin
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

// Certificate watching: how often, and how loudly.
const (
	certCheckEvery = time.Hour
	certRetryMin   = time.Minute // autocert itself retries a failed name after a minute
	certRetryMax   = time.Hour
	// certLogEvery spaces the log lines of a problem that does not
	// change: every handshake for the name meets it, and Let's Encrypt
	// refuses a sixth failed validation in an hour anyway.
	certLogEvery = 10 * time.Minute
	// certProblemMax bounds the CA's error text kept for the console.
	certProblemMax = 400
)

// ecdsaHello is the ClientHello of a client that takes an ECDSA
// certificate, the kind autocert gets for modern clients.
func ecdsaHello(name string) *tls.ClientHelloInfo {
	return &tls.ClientHelloInfo{
		ServerName:       name,
		SignatureSchemes: []tls.SignatureScheme{tls.ECDSAWithP256AndSHA256},
		SupportedCurves:  []tls.CurveID{tls.CurveP256},
		CipherSuites:     []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256},
	}
}

// certWatch gets certificates from autocert and remembers, for each name
// of NAH_DOMAIN, whether the last attempt failed and why, for the log and
// the console.
type certWatch struct {
	m   *autocert.Manager
	log *slog.Logger
	now func() time.Time

	mu    sync.Mutex
	certs map[string]*certState // the names of NAH_DOMAIN, made once: clients' names never enter
}

// certState is what is known of one name's certificate.
type certState struct {
	problem string    // why there is no good certificate; empty when there is one
	since   time.Time // of the first failure in a row
	tried   time.Time // of the last failure
	logged  time.Time // of the last log line about it
}

// newCertWatch makes the watch of c.Domains. Its clock is the wall
// clock, not Config.Now: certificates are valid by it, to autocert and to
// every client.
func newCertWatch(c TLSConfig, log *slog.Logger) *certWatch {
	w := &certWatch{
		m: &autocert.Manager{
			Prompt:     autocert.AcceptTOS, // setting NAH_DOMAIN is the operator's assent (docs/operating.md)
			Cache:      autocert.DirCache(c.CacheDir),
			HostPolicy: autocert.HostWhitelist(c.Domains...),
			Email:      c.Email,
			Client:     &acme.Client{DirectoryURL: c.DirectoryURL, UserAgent: "nah"},
		},
		log:   log,
		now:   time.Now,
		certs: make(map[string]*certState, len(c.Domains)),
	}
	if w.m.Client.DirectoryURL == "" {
		w.m.Client.DirectoryURL = DefaultACMEDirectory
	}
	for _, d := range c.Domains {
		w.certs[d] = &certState{}
	}
	return w
}

// autocertPending is autocert's answer while a failed attempt is held for
// a minute before the next: the failure itself was recorded when it came.
const autocertPending = "acme/autocert: missing certificate"

// getCertificate is the HTTPS listener's certificate lookup: autocert's,
// with what it says about the names of NAH_DOMAIN recorded.
func (w *certWatch) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	cert, err := w.m.GetCertificate(hello)
	if len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == acme.ALPNProto {
		return cert, err // the CA, validating a challenge
	}
	w.record(strings.TrimSuffix(strings.ToLower(hello.ServerName), "."), cert, err)
	return cert, err
}

// record notes the outcome of a lookup for name: an error, or a
// certificate that autocert has failed to renew for half its renewal
// window, is a problem, logged when it changes and every certLogEvery.
func (w *certWatch) record(name string, cert *tls.Certificate, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.certs[name]
	if st == nil {
		return // a name this server does not serve: a scanner's, not news
	}
	now := w.now()
	problem := ""
	switch {
	case err != nil && err.Error() == autocertPending:
		return
	case err != nil:
		problem = err.Error()
	case cert.Leaf != nil:
		// autocert renews at the lesser of 30 days and a third of the
		// lifetime before expiry, retrying on failure without a word.
		window := min(30*24*time.Hour, cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore)/3)
		if left := cert.Leaf.NotAfter.Sub(now); left < window/2 {
			problem = "the certificate expires at " + cert.Leaf.NotAfter.UTC().Format(time.RFC3339) + " and renewing it has failed so far"
		}
	}
	if len(problem) > certProblemMax {
		problem = problem[:certProblemMax] + "…"
	}
	if problem == "" {
		if st.problem != "" {
			w.log.Info("HTTPS certificate obtained", "domain", name)
		}
		*st = certState{}
		return
	}
	if st.problem == "" {
		st.since = now
	}
	if problem != st.problem || now.Sub(st.logged) >= certLogEvery {
		w.log.Error("no HTTPS certificate for a name of NAH_DOMAIN: clients asking for it cannot connect; the server serves the rest and tries again",
			"domain", name, "err", problem, "since", st.since.UTC().Format(time.RFC3339))
		st.logged = now
	}
	st.problem, st.tried = problem, now
}

// problems lists the names without a good certificate, in NAH_DOMAIN's
// order.
func (w *certWatch) problems(domains []string) []ui.CertProblem {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []ui.CertProblem
	for _, d := range domains {
		if st := w.certs[d]; st != nil && st.problem != "" {
			out = append(out, ui.CertProblem{Domain: d, Problem: st.problem, Since: st.since.UnixMilli(), Tried: st.tried.UnixMilli()})
		}
	}
	return out
}
