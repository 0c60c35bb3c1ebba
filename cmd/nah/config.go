package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/mail"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/app"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/digest"
	"github.com/nah-app/nah/store"
)

// config is the whole process's configuration, read from the environment
// and validated once at start (readConfig). Each package gets its own part:
// Store goes to store.Open, App to app.New; the rest is the process's.
type config struct {
	Addr            string // with HTTPS, the HTTPS listener's
	MetricsAddr     string // empty: no metrics listener
	ShutdownTimeout time.Duration
	LogLevel        slog.Level
	MaxConnections  int // of the Addr listener

	// HTTPAddr is, with HTTPS, the plain-HTTP listener's address, which
	// redirects to HTTPS and answers ACME's HTTP-01 challenges; empty is
	// none. tlsCertFile and tlsKeyFile are NAH_TLS_CERT and NAH_TLS_KEY,
	// loaded into App.TLS.Certificate by https.
	HTTPAddr                string
	httpOff                 bool // NAH_HTTP_ADDR=off
	tlsCertFile, tlsKeyFile string

	Store  store.Config  // Dir is NAH_DATA_DIR
	App    app.Config    // App.Settings lists every variable for the console
	Digest digest.Config // the push relay

	// Replication (NAH_REPLICA_*, NAH_SWEEP_*): Target is nil when
	// NAH_REPLICA_URL is off.
	ReplicaURL      string
	ReplicaTarget   *backup.Target
	ReplicaMaxFiles int
	SweepEvery      time.Duration // 0: no sweep
	SweepKeep       int
	DrillEvery      time.Duration // NAH_DRILL_EVERY; 0: only when asked from the console

	// MemoryLimit is NAH_MEMORY_LIMIT, and GoMemoryLimit the Go runtime's
	// share of it (GOMEMLIMIT), from the memory plan (plan).
	MemoryLimit   int64
	GoMemoryLimit int64
}

// The memory plan. NAH_MEMORY_LIMIT is what the whole process may use; it
// is split, in this order, into
//
//   - SQLite, outside the Go heap: the shared page cache plus every open
//     file (store.SQLiteMemoryBound: 32 MB + 517 x 75 KB ~ 70 MB at 512
//     files); the rest is the Go runtime's, and GOMEMLIMIT is set to it;
//   - the head cache, a long-lived heap that the collector lets grow by
//     half again at GOGC 50 (64 MB of heads ~ 96 MB);
//   - a base of 40 MB: the runtime, the graph of people and connections
//     (6 MB for 10,000 people), token and rate-limit caches, metrics;
//   - replication: each watched file costs ~404 KiB at peak
//     (backup.PerFileBytes: Litestream's own connection, read transaction
//     and LTX encoder), 25 MiB at the default NAH_REPLICA_MAX_FILES of 64,
//     and the restore drill's 4 MiB (backup.DrillBytes);
//   - the open connections, idle or not: 45 KB each under churn
//     (app/listener.go), 22.5 MB at the default 512, and with HTTPS the
//     redirect listener's 64 (2.9 MB). TLS changes nothing here: measured
//     as in listener.go with NAH_TLS_CERT, an idle TLS connection holds
//     35 KB (the handshake's state and record buffers add 12 KB to the
//     23 KB of plain HTTP), and churn at a bound of 1,024 costs the same
//     44 MB over TLS as without;
//   - what is left is the budget that requests take from before they
//     allocate (app/budget.go), and past which they are answered 503.
//
// The default, 320 MiB, leaves 62 MiB for requests with the default caches
// and keeps 65 MB of the 400 MB limit for the kernel's view of the process
// (stacks, socket buffers, the allocator's slack).
const (
	defaultMemoryLimit = 320 << 20
	memoryBase         = 40 << 20
	connectionBytes    = 45 << 10
	minRequestBudget   = 16 << 20
)

// plan splits MemoryLimit as above.
func (c *config) plan() error {
	sqlite := store.SQLiteMemoryBound(c.Store.MaxOpenFiles)
	heads := max(c.Store.HeadCacheBytes, 0)
	conns := int64(c.MaxConnections) * connectionBytes
	if c.HTTPAddr != "" {
		conns += app.RedirectMaxConnections * connectionBytes
	}
	var repl int64
	if c.ReplicaTarget != nil {
		repl = int64(c.ReplicaMaxFiles)*backup.PerFileBytes + backup.DrillBytes
	}
	c.GoMemoryLimit = c.MemoryLimit - sqlite
	c.App.MemoryBudget = c.GoMemoryLimit - heads*3/2 - memoryBase - conns - repl
	if c.App.MemoryBudget < minRequestBudget {
		need := sqlite + heads*3/2 + memoryBase + conns + repl + minRequestBudget
		return fmt.Errorf("too small for NAH_MAX_OPEN_FILES=%d, NAH_HEAD_CACHE_MB=%d, NAH_MAX_CONNECTIONS=%d and NAH_REPLICA_MAX_FILES=%d: want at least %dMiB, or fewer files, connections or a smaller head cache",
			c.Store.MaxOpenFiles, heads>>20, c.MaxConnections, c.ReplicaMaxFiles, (need+1<<20-1)>>20)
	}
	// The largest page, 100 moments of the largest size read from files,
	// is charged twice its bodies (app/budget.go) and must fit in the bulk
	// share, three quarters of the budget, or it would be refused forever.
	if page := 2 * int64(nah.FeedPageMax) * int64(c.App.MaxMomentBytes); page > c.App.MemoryBudget*3/4 {
		return fmt.Errorf("too small for NAH_MAX_MOMENT_BYTES=%d: a page of %d such moments needs %dMiB of the %dMiB left for requests; raise the limit or lower the moment size",
			c.App.MaxMomentBytes, nah.FeedPageMax, page>>20, (c.App.MemoryBudget*3/4)>>20)
	}
	return nil
}

// parseBytes reads a size: a whole number with an optional unit, B, KiB,
// MiB, GiB (as GOMEMLIMIT) or KB, MB, GB (decimal).
func parseBytes(v string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > (1<<50)/mult {
		return 0, errors.New("want a size such as 320MiB or 1GiB")
	}
	return n * mult, nil
}

// Defaults that belong to the process itself; the packages' own defaults
// are their constants.
const (
	defaultAddr            = "127.0.0.1:8090"
	defaultDataDir         = "./data"
	defaultShutdownTimeout = 10 * time.Second
	defaultLogLevel        = slog.LevelInfo
	defaultReplicaURL      = "./replica"
	// defaultReplicaMaxFiles: 25 MiB of the memory plan. On people-1k
	// under the write benchmark 64 kept peak under 200 MB (bench/THRESHOLDS.md).
	defaultReplicaMaxFiles = 64
)

// variable is one environment variable: its name, default and meaning as
// `nah help` shows them, and set, which parses a value into the config or
// says what it wants instead.
type variable struct {
	Name, Default, Meaning string
	set                    func(c *config, v string) error
}

// variables lists every environment variable, in the order `nah help` and
// the console show them.
var variables = []variable{
	{"NAH_ADDR", defaultAddr, "listen address (host:port); with HTTPS (NAH_DOMAIN, NAH_TLS_CERT) :443 unless set", func(c *config, v string) error {
		if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
			return errors.New("want host:port, such as 127.0.0.1:8090")
		}
		c.Addr = v
		return nil
	}},
	{"NAH_DATA_DIR", defaultDataDir, "directory database, person files", func(c *config, v string) error {
		if strings.ContainsAny(v, "?#") {
			return errors.New("the path must not contain '?' or '#'")
		}
		c.Store.Dir = filepath.Clean(v)
		return nil
	}},
	{"NAH_OPEN_SIGNUP", "false", "accept POST /api/v1/accounts without a join code", func(c *config, v string) (err error) {
		if c.App.OpenSignup, err = strconv.ParseBool(v); err != nil {
			return errors.New("want true or false")
		}
		return nil
	}},
	{"NAH_MAX_OPEN_FILES", strconv.Itoa(store.DefaultMaxOpenFiles), "bound of the open person-file cache (~75 KB each plus a 32 MB page cache shared by all: 512 files ~ 70 MB of SQLite memory, 1000 ~ 107 MB)", func(c *config, v string) (err error) {
		if c.Store.MaxOpenFiles, err = strconv.Atoi(v); err != nil || c.Store.MaxOpenFiles < 16 || c.Store.MaxOpenFiles > 100_000 {
			return errors.New("want a whole number from 16 to 100000")
		}
		return nil
	}},
	{"NAH_SYNC", store.SyncFull.String(), "full: a commit waits for the disk, so a power cut loses no acknowledged moment; normal: a crash of the process loses nothing, a power cut may lose the last moments but never corrupts (fewer fsyncs, faster posts)", func(c *config, v string) error {
		switch strings.ToLower(v) {
		case "full":
			c.Store.Sync = store.SyncFull
		case "normal":
			c.Store.Sync = store.SyncNormal
		default:
			return errors.New("want full or normal")
		}
		return nil
	}},
	{"NAH_HEAD_CACHE_MB", strconv.Itoa(store.DefaultHeadCacheBytes >> 20), "memory for the newest moments of each person, so most feeds read no file; 0 turns it off", func(c *config, v string) error {
		mbs, err := strconv.Atoi(v)
		if err != nil || mbs < 0 || mbs > 64<<10 {
			return errors.New("want a whole number of megabytes, 0 to turn the cache off")
		}
		c.Store.HeadCacheBytes = int64(mbs) << 20
		if mbs == 0 {
			c.Store.HeadCacheBytes = -1 // the store's zero is its default
		}
		return nil
	}},
	{"NAH_SIGNUP_PER_HOUR", strconv.Itoa(app.DefaultSignupPerHour), "successful sign-ups per client address per hour; 0 = no limit", func(c *config, v string) (err error) {
		if c.App.SignupPerHour, err = strconv.Atoi(v); err != nil || c.App.SignupPerHour < 0 {
			return errors.New("want a whole number, 0 for no limit")
		}
		return nil
	}},
	{"NAH_TRUSTED_PROXIES", "", "comma-separated addresses or CIDRs of reverse proxies whose X-Forwarded-For is believed", func(c *config, v string) error {
		if v == "" {
			return nil
		}
		for s := range strings.SplitSeq(v, ",") {
			s = strings.TrimSpace(s)
			p, err := netip.ParsePrefix(s)
			if err != nil {
				a, aerr := netip.ParseAddr(s)
				if aerr != nil {
					return fmt.Errorf("%q is neither an address nor a CIDR", s)
				}
				p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
			}
			c.App.TrustedProxies = append(c.App.TrustedProxies, p.Masked())
		}
		return nil
	}},
	{"NAH_PUBLIC_URL", "", "the server's address as people reach it, for the links it makes (reset, setup); empty = http:// and the listen address", func(c *config, v string) error {
		if v == "" {
			return nil
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(v, "#") {
			return errors.New("want an http or https URL such as https://nah.example.com, without query or fragment")
		}
		c.App.PublicURL = strings.TrimRight(u.String(), "/")
		return nil
	}},
	{"NAH_MAX_MOMENT_BYTES", strconv.Itoa(nah.DefaultMaxMomentBytes), "largest decoded moment body in bytes", func(c *config, v string) (err error) {
		if c.App.MaxMomentBytes, err = strconv.Atoi(v); err != nil || c.App.MaxMomentBytes < 1 || c.App.MaxMomentBytes > 16<<20 {
			return errors.New("want a whole number of bytes from 1 to 16777216")
		}
		return nil
	}},
	{"NAH_MAX_MEDIA_BYTES", "25MiB", "largest media upload (B, KiB, MiB, GiB, or KB, MB, GB); a larger one is 413 as soon as it is known", func(c *config, v string) (err error) {
		if c.App.MaxMediaBytes, err = parseBytes(v); err == nil && c.App.MaxMediaBytes > 4<<30 {
			err = errors.New("want a size of at most 4GiB")
		}
		return err
	}},
	{"NAH_QUOTA_BYTES", "2GiB", "storage each person may use, their database and media together; an upload that would pass it is 413 quota_exceeded", func(c *config, v string) (err error) {
		c.App.QuotaBytes, err = parseBytes(v)
		return err
	}},
	{"NAH_MEMORY_LIMIT", strconv.Itoa(defaultMemoryLimit>>20) + "MiB", "memory the whole process may use: SQLite, the head cache and a base are set apart, the rest is what requests may hold at once (past it they get 503 with Retry-After); GOMEMLIMIT is set from it", func(c *config, v string) (err error) {
		c.MemoryLimit, err = parseBytes(v)
		return err
	}},
	{"NAH_MAX_CONNECTIONS", strconv.Itoa(app.DefaultMaxConnections), "bound of open client connections (~25 KB each idle, ~45 KB under churn: 512 ~ 23 MB); past it the one idle longest is closed, else 503", func(c *config, v string) (err error) {
		if c.MaxConnections, err = strconv.Atoi(v); err != nil || c.MaxConnections < 16 || c.MaxConnections > 100_000 {
			return errors.New("want a whole number from 16 to 100000")
		}
		return nil
	}},
	{"NAH_SHUTDOWN_TIMEOUT", defaultShutdownTimeout.String(), "how long SIGTERM waits for in-flight requests", func(c *config, v string) (err error) {
		if c.ShutdownTimeout, err = time.ParseDuration(v); err != nil || c.ShutdownTimeout <= 0 {
			return errors.New("want a positive duration such as 10s")
		}
		return nil
	}},
	{"NAH_DELETE_GRACE", store.DefaultDeleteGrace.String(), "how long a deleted person can be restored from the console before their files and rows are purged; 0 purges at once", func(c *config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return errors.New("want a duration such as 168h, 0 to purge at once")
		}
		c.Store.DeleteGrace = d
		if d == 0 {
			c.Store.DeleteGrace = -1 // the store's zero is its default
		}
		return nil
	}},
	{"NAH_REPLICA_URL", defaultReplicaURL, "where every database is replicated with Litestream and swept nightly: a directory (another disk), file:///path, or s3://bucket/prefix (endpoint, region and keys from AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY); off = no backups", func(c *config, v string) error {
		if v != "off" {
			c.ReplicaURL = v
		}
		return nil
	}},
	{"NAH_REPLICA_MAX_FILES", strconv.Itoa(defaultReplicaMaxFiles), "person files replicated at once (~404 KiB each: 64 ~ 25 MiB); files written recently are watched, the others wait for their next write or the nightly sweep", func(c *config, v string) (err error) {
		if c.ReplicaMaxFiles, err = strconv.Atoi(v); err != nil || c.ReplicaMaxFiles < 1 || c.ReplicaMaxFiles > 4096 {
			return errors.New("want a whole number from 1 to 4096")
		}
		return nil
	}},
	{"NAH_SWEEP_EVERY", "24h", "how often every database is copied whole to NAH_REPLICA_URL/sweeps/ (at 03:00 UTC for 24h); off = never", func(c *config, v string) error {
		if v == "off" {
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			return errors.New("want a duration of a minute or more such as 24h, or off")
		}
		c.SweepEvery = d
		return nil
	}},
	{"NAH_SWEEP_KEEP", "7", "how many sweeps are kept on the target", func(c *config, v string) (err error) {
		if c.SweepKeep, err = strconv.Atoi(v); err != nil || c.SweepKeep < 1 || c.SweepKeep > 1000 {
			return errors.New("want a whole number from 1 to 1000")
		}
		return nil
	}},
	{"NAH_DRILL_EVERY", "6h", "how often a sample of the databases (everyone weekly) is restored from NAH_REPLICA_URL into a scratch folder and compared with the live files; off = only when asked from the console", func(c *config, v string) error {
		if v == "off" {
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			return errors.New("want a duration of a minute or more such as 6h, or off")
		}
		c.DrillEvery = d
		return nil
	}},
	{"NAH_LOG_LEVEL", strings.ToLower(defaultLogLevel.String()), "debug, info, warn or error", func(c *config, v string) error {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			return errors.New("want debug, info, warn or error")
		}
		return nil
	}},
	{"NAH_METRICS_ADDR", "", "listen address of the Prometheus metrics (host:port); empty = off", func(c *config, v string) error {
		if v == "" {
			return nil
		}
		if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
			return errors.New("want host:port, such as 127.0.0.1:9090")
		}
		c.MetricsAddr = v
		return nil
	}},
	{"NAH_DOMAIN", "", "comma-separated names to serve over HTTPS with certificates from NAH_ACME_DIRECTORY's CA (setting it accepts the CA's terms); NAH_ADDR becomes :443 and NAH_HTTP_ADDR :80 unless set", func(c *config, v string) (err error) {
		if v == "" {
			return nil
		}
		c.App.TLS.Domains, err = parseDomains(v)
		return err
	}},
	{"NAH_ACME_EMAIL", "", "address the CA writes to about the certificates (expiry it did not see renewed, revocations); empty = none", func(c *config, v string) error {
		if v == "" {
			return nil
		}
		if a, err := mail.ParseAddress(v); err != nil || a.Address != v {
			return errors.New("want an email address such as ops@example.com")
		}
		c.App.TLS.Email = v
		return nil
	}},
	{"NAH_ACME_DIRECTORY", app.DefaultACMEDirectory, "the CA's ACME (RFC 8555) directory URL: Let's Encrypt's by default, its staging directory for a trial, or any other CA's", func(c *config, v string) error {
		if u, err := url.Parse(v); err != nil || u.Scheme != "https" || u.Host == "" {
			return errors.New("want the https:// URL of an ACME directory")
		}
		c.App.TLS.DirectoryURL = v
		return nil
	}},
	{"NAH_TLS_CERT", "", "a certificate you bring instead of NAH_DOMAIN (PEM file, the chain after the leaf); loaded at start, so restart after renewing it", func(c *config, v string) error {
		c.tlsCertFile = v
		return nil
	}},
	{"NAH_TLS_KEY", "", "the private key of NAH_TLS_CERT (PEM file)", func(c *config, v string) error {
		c.tlsKeyFile = v
		return nil
	}},
	{"NAH_HTTP_ADDR", "", "with HTTPS, the plain-HTTP listener that redirects to HTTPS and answers ACME's HTTP-01 challenges (host:port; default :80 with HTTPS; off = none)", func(c *config, v string) error {
		switch v {
		case "":
			return nil
		case "off":
			c.httpOff = true
			return nil
		}
		if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
			return errors.New("want host:port such as :80, or off")
		}
		c.HTTPAddr = v
		return nil
	}},
	// Daily digests (the digest package): where pushes go.
	{"NAH_PUSH_RELAY_URL", "", "the push relay's URL, which gets each digest push as a JSON POST; empty = digests are computed and counted, not sent", func(c *config, v string) error {
		if v == "" {
			return nil
		}
		if err := digest.CheckRelayURL(v); err != nil {
			return err
		}
		c.Digest.RelayURL = v
		return nil
	}},
	{"NAH_PUSH_RELAY_TOKEN", "", "bearer secret sent to the push relay (never logged; the console shows only whether it is set)", func(c *config, v string) error {
		c.Digest.RelayToken = v
		return nil
	}},
}

// secretVariables are shown to the console as set or not, never by value.
var secretVariables = []string{"NAH_PUSH_RELAY_TOKEN"}

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

// readConfig reads and validates every variable, unset ones taking their
// defaults. An error names the variable, its value and what is wanted.
func readConfig(getenv func(string) string) (config, error) {
	var c config
	for _, v := range variables {
		val, src := strings.TrimSpace(getenv(v.Name)), "the environment"
		if val == "" {
			val, src = v.Default, "the default"
		}
		if err := v.set(&c, val); err != nil {
			return config{}, fmt.Errorf("%s=%q: %v", v.Name, getenv(v.Name), err)
		}
		if slices.Contains(secretVariables, v.Name) && val != "" {
			val = "(set, not shown)"
		}
		c.App.Settings = append(c.App.Settings, app.Setting{Name: v.Name, Value: val, Source: src})
	}
	if err := c.https(getenv); err != nil {
		return config{}, err
	}
	if c.ReplicaURL != "" {
		t, err := backup.ParseTarget(c.ReplicaURL, getenv)
		if err != nil {
			return config{}, fmt.Errorf("NAH_REPLICA_URL=%q: %v", c.ReplicaURL, err)
		}
		c.ReplicaTarget = t
	}
	if err := c.plan(); err != nil {
		return config{}, fmt.Errorf("NAH_MEMORY_LIMIT=%q: %v", getenv("NAH_MEMORY_LIMIT"), err)
	}
	return c, nil
}

// publicURL is where people reach the server, for the links it makes:
// NAH_PUBLIC_URL; or else, with HTTPS, https:// and the first name of
// NAH_DOMAIN or of the certificate, with listen's port unless it is 443;
// or else http:// and listen, the address the server listens on. Never the
// Host of a request, which the client chooses.
func (c config) publicURL(listen string) string {
	if c.App.PublicURL != "" {
		return c.App.PublicURL
	}
	if !c.App.TLS.Enabled() {
		return "http://" + listen
	}
	name := ""
	if len(c.App.TLS.Domains) > 0 {
		name = c.App.TLS.Domains[0]
	} else if leaf := c.App.TLS.Certificate.Leaf; leaf != nil {
		for _, n := range leaf.DNSNames {
			if !strings.HasPrefix(n, "*.") {
				name = n
				break
			}
		}
	}
	host, port, err := net.SplitHostPort(listen)
	switch {
	case err != nil:
		return "https://" + listen
	case name != "":
		host = name
	case host == "":
		host = "localhost"
	}
	if port == "443" {
		if strings.Contains(host, ":") {
			return "https://[" + host + "]"
		}
		return "https://" + host
	}
	return "https://" + net.JoinHostPort(host, port)
}

// LogValue summarises the configuration for the start-up log line. It holds
// no secrets.
func (c config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("addr", c.Addr),
		slog.Int("max_connections", c.MaxConnections),
		slog.String("data_dir", c.Store.Dir),
		slog.Bool("open_signup", c.App.OpenSignup),
		slog.Int("max_open_files", c.Store.MaxOpenFiles),
		slog.String("sync", c.Store.Sync.String()),
		slog.Int64("head_cache_bytes", c.Store.HeadCacheBytes),
		slog.Int("signup_per_hour", c.App.SignupPerHour),
		slog.Int("trusted_proxies", len(c.App.TrustedProxies)),
		slog.String("public_url", c.App.PublicURL),
		slog.Int("max_moment_bytes", c.App.MaxMomentBytes),
		slog.Int64("max_media_bytes", c.App.MaxMediaBytes),
		slog.Int64("quota_bytes", c.App.QuotaBytes),
		slog.Int64("memory_limit", c.MemoryLimit),
		slog.Int64("request_budget", c.App.MemoryBudget),
		slog.String("https", c.httpsMode()),
		slog.String("http_addr", c.HTTPAddr),
		slog.String("replica", c.replicaLog()),
		slog.Int("replica_max_files", c.ReplicaMaxFiles),
		slog.Bool("push_relay", c.Digest.RelayURL != ""),
	)
}

// replicaLog is the replica target without secrets, for the log.
func (c config) replicaLog() string {
	if c.ReplicaTarget == nil {
		return "off"
	}
	return c.ReplicaTarget.Redacted()
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
