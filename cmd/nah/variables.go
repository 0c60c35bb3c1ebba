package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/mail"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/app"
	"github.com/nah-app/nah/digest"
	"github.com/nah-app/nah/store"
)

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
	{"NAH_MAX_OPEN_FILES", "auto", "bound of the open person-file cache (~75 KB each plus a 32 MB page cache shared by all: 512 files ~ 70 MB of SQLite memory, 1000 ~ 107 MB); auto: as many as the memory plan leaves room for, 1024 at the default NAH_MEMORY_LIMIT", func(c *config, v string) (err error) {
		if strings.EqualFold(v, "auto") {
			c.Store.MaxOpenFiles = 0 // the memory plan sets it
			return nil
		}
		if c.Store.MaxOpenFiles, err = strconv.Atoi(v); err != nil || c.Store.MaxOpenFiles < 16 || c.Store.MaxOpenFiles > 100_000 {
			return errors.New("want auto or a whole number from 16 to 100000")
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
	{"NAH_MAX_MEDIA_BYTES", "25MiB", "largest media file (B, KiB, MiB, GiB, or KB, MB, GB), of one POST /api/v1/media or a resumable upload's whole length; a larger one is 413 as soon as it is known", func(c *config, v string) (err error) {
		if c.App.MaxMediaBytes, err = parseBytes(v); err == nil && c.App.MaxMediaBytes > 4<<30 {
			err = errors.New("want a size of at most 4GiB")
		}
		return err
	}},
	{"NAH_QUOTA_BYTES", "2GiB", "storage each person may use, their database and media together; an upload that would pass it is 413 quota_exceeded", func(c *config, v string) (err error) {
		c.App.QuotaBytes, err = parseBytes(v)
		return err
	}},
	{"NAH_UPLOAD_EXPIRY", store.DefaultUploadExpiry.String(), "how long an unfinished resumable upload (/api/v1/uploads) lives after its creation or last piece; then it is removed and its length given back to the quota", func(c *config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute || d > 30*24*time.Hour {
			return errors.New("want a duration from 1m to 720h such as 24h")
		}
		c.Store.UploadExpiry = d
		return nil
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
	{"NAH_RETENTION", "168h", "how far back a restore to a time can go: older history is deleted from NAH_REPLICA_URL, keeping one snapshot of each file from before then and everything since (a deleted person's history goes whole at the purge)", func(c *config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 10*time.Second {
			return errors.New("want a duration such as 168h (a week) or 720h; at least 10s")
		}
		c.Retention = d
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
	{"NAH_REPLICA_BUDGET", "", "space the replica may take on its target (B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB), measured every 5 minutes; past it the Backups page, /healthz (degraded) and nah_replica_over_budget warn; empty or off = no budget", func(c *config, v string) (err error) {
		if v == "" || v == "off" {
			return nil
		}
		c.ReplicaBudget, err = parseBytes(v)
		return err
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

// parseBytes reads a size: a whole number with an optional unit, B, KiB,
// MiB, GiB, TiB (as GOMEMLIMIT) or KB, MB, GB, TB (decimal).
func parseBytes(v string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
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
