package main

import (
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

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
	ReplicaBudget   int64         // NAH_REPLICA_BUDGET in bytes; 0: none
	SweepEvery      time.Duration // 0: no sweep
	SweepKeep       int
	Retention       time.Duration // NAH_RETENTION
	DrillEvery      time.Duration // NAH_DRILL_EVERY; 0: only when asked from the console

	// MemoryLimit is NAH_MEMORY_LIMIT, and GoMemoryLimit the Go runtime's
	// share of it (GOMEMLIMIT), from the memory plan (plan).
	MemoryLimit   int64
	GoMemoryLimit int64
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

// setSetting records, for the console, the value a variable resolved to.
func (c *config) setSetting(name, value string) {
	for i, s := range c.App.Settings {
		if s.Name == name {
			c.App.Settings[i].Value = value
		}
	}
}
