package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nah-app/nah/app"
)

// With HTTPS, the listen addresses' defaults are the standard ports.
const (
	defaultHTTPSAddr = ":443"
	defaultHTTPAddr  = ":80"
)

// https completes the HTTPS settings, which depend on one another: NAH_DOMAIN
// or NAH_TLS_CERT (not both), the key with the certificate, the default
// ports, the ACME cache in the data directory. An error names the variable.
func (c *config) https(getenv func(string) string) error {
	cert, key := c.tlsCertFile, c.tlsKeyFile
	switch {
	case cert != "" && len(c.App.TLS.Domains) > 0:
		return fmt.Errorf("NAH_TLS_CERT=%q: want NAH_DOMAIN (certificates over ACME) or NAH_TLS_CERT (your own), not both", cert)
	case cert != "" && key == "":
		return fmt.Errorf("NAH_TLS_KEY=%q: want the private key of NAH_TLS_CERT's certificate", getenv("NAH_TLS_KEY"))
	case cert == "" && key != "":
		return fmt.Errorf("NAH_TLS_CERT=%q: want the certificate of NAH_TLS_KEY's private key", getenv("NAH_TLS_CERT"))
	case cert != "":
		pair, err := loadKeyPair(cert, key)
		if err != nil {
			return err
		}
		c.App.TLS.Certificate = pair
	}
	if !c.App.TLS.Enabled() {
		if c.HTTPAddr != "" || c.httpOff {
			return fmt.Errorf("NAH_HTTP_ADDR=%q: want NAH_DOMAIN or NAH_TLS_CERT too: it redirects to HTTPS", getenv("NAH_HTTP_ADDR"))
		}
		return nil
	}
	c.App.TLS.CacheDir = filepath.Join(c.Store.Dir, "acme")
	if c.unset("NAH_ADDR") {
		c.Addr = defaultHTTPSAddr
		c.setDefault("NAH_ADDR", defaultHTTPSAddr)
	}
	if c.unset("NAH_HTTP_ADDR") {
		c.HTTPAddr = defaultHTTPAddr
		c.setDefault("NAH_HTTP_ADDR", defaultHTTPAddr)
	}
	return nil
}

// unset reports whether the variable name took its default.
func (c *config) unset(name string) bool {
	for _, s := range c.App.Settings {
		if s.Name == name {
			return s.Source == "the default"
		}
	}
	return true
}

// setDefault records, for the console, the HTTPS default a variable took.
func (c *config) setDefault(name, value string) {
	for i, s := range c.App.Settings {
		if s.Name == name {
			c.App.Settings[i] = app.Setting{Name: name, Value: value, Source: "the default with HTTPS"}
		}
	}
}

// parseDomains reads NAH_DOMAIN: DNS names, lower-cased, without
// duplicates. Wildcards are refused (ACME gives them only for DNS-01
// challenges, which need the DNS provider's API), as are addresses (CAs do
// not issue for them) and single labels (no public CA issues for those).
func parseDomains(v string) ([]string, error) {
	var out []string
	for s := range strings.SplitSeq(v, ",") {
		s = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), ".")
		if !dnsName(s) {
			return nil, fmt.Errorf("%q is not a DNS name such as nah.example.com (no port, scheme or wildcard; punycode for non-ASCII names)", s)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

// dnsName reports whether s is a DNS name of two labels or more, each of
// letters, digits and inner hyphens, the last not all digits.
func dnsName(s string) bool {
	labels := strings.Split(s, ".")
	if len(s) > 253 || len(labels) < 2 {
		return false
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, r := range l {
			if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
				return false
			}
		}
	}
	_, err := strconv.Atoi(labels[len(labels)-1])
	return err != nil
}

// loadKeyPair loads the operator's certificate and key, naming the
// variable at fault: a file that cannot be read, a certificate file
// without a certificate, a key that is not the certificate's.
func loadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("NAH_TLS_CERT=%q: %v", certFile, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("NAH_TLS_KEY=%q: %v", keyFile, err)
	}
	found := false
	for rest := certPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return nil, fmt.Errorf("NAH_TLS_CERT=%q: a certificate that cannot be read: %v", certFile, err)
		}
		found = true
	}
	if !found {
		return nil, fmt.Errorf("NAH_TLS_CERT=%q: want a PEM file with a CERTIFICATE block", certFile)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("NAH_TLS_KEY=%q: want the PEM private key of NAH_TLS_CERT's certificate: %v", keyFile, err)
	}
	return &pair, nil
}

// checkCertificateFile warns about the operator's certificate when it has
// expired or will within two weeks: it is loaded once, at start, so a
// renewed file needs a restart.
func checkCertificateFile(log *slog.Logger, cert *tls.Certificate, now time.Time) {
	if cert == nil || cert.Leaf == nil {
		return
	}
	switch left := cert.Leaf.NotAfter.Sub(now); {
	case left <= 0:
		log.Error("NAH_TLS_CERT has expired: clients refuse it; put a renewed one in place and restart", "not_after", cert.Leaf.NotAfter)
	case left < 14*24*time.Hour:
		log.Warn("NAH_TLS_CERT expires within two weeks; put a renewed one in place and restart", "not_after", cert.Leaf.NotAfter)
	}
}

// httpsMode says how the server serves HTTPS, for the log.
func (c config) httpsMode() string {
	switch {
	case len(c.App.TLS.Domains) > 0:
		return "acme:" + strings.Join(c.App.TLS.Domains, ",")
	case c.App.TLS.Certificate != nil:
		return "certificate:" + c.tlsCertFile
	}
	return "off"
}
