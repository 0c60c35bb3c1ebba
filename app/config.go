package app

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nah-app/nah"
)

// Config is everything the server reads from its environment, read and
// validated once at start (ConfigFromEnv) and passed down.
type Config struct {
	Addr            string
	DataDir         string
	OpenSignup      bool
	MaxOpenFiles    int
	HeadCacheBytes  int64 // negative: heads off
	SignupPerHour   int
	TrustedProxies  []netip.Prefix
	MaxMomentBytes  int
	ShutdownTimeout time.Duration
	LogLevel        slog.Level
	MetricsAddr     string

	// PasswordCost is the bcrypt cost. Not an environment variable: tests
	// lower it, production keeps the default.
	PasswordCost int
	// Now is the clock of rate limits and the store; nil means time.Now.
	Now func() time.Time

	// values and sources record, per variable, the value in force and
	// whether it came from the environment or the default, for the console.
	values, sources map[string]string
}

func (c Config) source(name string) string {
	if s := c.sources[name]; s != "" {
		return s
	}
	return "the default"
}

// Effective lists every variable with the value in force and its source.
func (c Config) Effective() []struct{ Name, Value, Source string } {
	out := make([]struct{ Name, Value, Source string }, 0, len(Vars))
	for _, v := range Vars {
		val, ok := c.values[v.Name]
		if !ok {
			val = v.Default
		}
		if val == "" {
			val = "(empty)"
		}
		out = append(out, struct{ Name, Value, Source string }{v.Name, val, c.source(v.Name)})
	}
	return out
}

// Var documents one environment variable.
type Var struct {
	Name, Default, Meaning string
}

// Vars lists every environment variable, in the order `nah help` shows them.
var Vars = []Var{
	{"NAH_ADDR", "127.0.0.1:8090", "listen address (host:port)"},
	{"NAH_DATA_DIR", "./data", "directory database, person files"},
	{"NAH_OPEN_SIGNUP", "false", "accept POST /api/v1/accounts without a join code"},
	{"NAH_MAX_OPEN_FILES", "512", "bound of the open person-file cache (~75 KB each plus a 32 MB page cache shared by all: 512 files ~ 70 MB of SQLite memory, 1000 ~ 107 MB)"},
	{"NAH_HEAD_CACHE_MB", "64", "memory for the newest moments of each person, so most feeds read no file; 0 turns it off"},
	{"NAH_SIGNUP_PER_HOUR", "20", "sign-ups per client address per hour; 0 = no limit"},
	{"NAH_TRUSTED_PROXIES", "", "comma-separated addresses or CIDRs of reverse proxies whose X-Forwarded-For is believed"},
	{"NAH_MAX_MOMENT_BYTES", strconv.Itoa(nah.DefaultMaxMomentBytes), "largest decoded moment body in bytes"},
	{"NAH_SHUTDOWN_TIMEOUT", "10s", "how long SIGTERM waits for in-flight requests"},
	{"NAH_LOG_LEVEL", "info", "debug, info, warn or error"},
	{"NAH_METRICS_ADDR", "", "listen address of the Prometheus metrics (host:port); empty = off"},
}

// ConfigFromEnv reads and validates the configuration. An error names the
// variable and what is wrong with it.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	c.values, c.sources = map[string]string{}, map[string]string{}
	get := func(name string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			c.values[name], c.sources[name] = v, "the environment"
			return v
		}
		for _, v := range Vars {
			if v.Name == name {
				return v.Default
			}
		}
		return ""
	}
	var err error
	fail := func(name, format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%s=%q: %s", name, getenv(name), fmt.Sprintf(format, args...))
	}

	c.Addr = get("NAH_ADDR")
	if _, port, err := net.SplitHostPort(c.Addr); err != nil || port == "" {
		return fail("NAH_ADDR", "want host:port, such as 127.0.0.1:8090")
	}
	c.DataDir = get("NAH_DATA_DIR")
	if strings.ContainsAny(c.DataDir, "?#") {
		return fail("NAH_DATA_DIR", "the path must not contain '?' or '#'")
	}
	c.DataDir = filepath.Clean(c.DataDir)
	if c.OpenSignup, err = strconv.ParseBool(get("NAH_OPEN_SIGNUP")); err != nil {
		return fail("NAH_OPEN_SIGNUP", "want true or false")
	}
	if c.MaxOpenFiles, err = strconv.Atoi(get("NAH_MAX_OPEN_FILES")); err != nil || c.MaxOpenFiles < 16 || c.MaxOpenFiles > 100_000 {
		return fail("NAH_MAX_OPEN_FILES", "want a whole number from 16 to 100000")
	}
	mbs, err := strconv.Atoi(get("NAH_HEAD_CACHE_MB"))
	if err != nil || mbs < 0 || mbs > 64<<10 {
		return fail("NAH_HEAD_CACHE_MB", "want a whole number of megabytes, 0 to turn the cache off")
	}
	c.HeadCacheBytes = int64(mbs) << 20
	if mbs == 0 {
		c.HeadCacheBytes = -1
	}
	if c.SignupPerHour, err = strconv.Atoi(get("NAH_SIGNUP_PER_HOUR")); err != nil || c.SignupPerHour < 0 {
		return fail("NAH_SIGNUP_PER_HOUR", "want a whole number, 0 for no limit")
	}
	if v := get("NAH_TRUSTED_PROXIES"); v != "" {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			p, err := netip.ParsePrefix(s)
			if err != nil {
				a, aerr := netip.ParseAddr(s)
				if aerr != nil {
					return fail("NAH_TRUSTED_PROXIES", "%q is neither an address nor a CIDR", s)
				}
				p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
			}
			c.TrustedProxies = append(c.TrustedProxies, p.Masked())
		}
	}
	if c.MaxMomentBytes, err = strconv.Atoi(get("NAH_MAX_MOMENT_BYTES")); err != nil || c.MaxMomentBytes < 1 || c.MaxMomentBytes > 16<<20 {
		return fail("NAH_MAX_MOMENT_BYTES", "want a whole number of bytes from 1 to 16777216")
	}
	if c.ShutdownTimeout, err = time.ParseDuration(get("NAH_SHUTDOWN_TIMEOUT")); err != nil || c.ShutdownTimeout <= 0 {
		return fail("NAH_SHUTDOWN_TIMEOUT", "want a positive duration such as 10s")
	}
	if c.MetricsAddr = get("NAH_METRICS_ADDR"); c.MetricsAddr != "" {
		if _, port, err := net.SplitHostPort(c.MetricsAddr); err != nil || port == "" {
			return fail("NAH_METRICS_ADDR", "want host:port, such as 127.0.0.1:9090")
		}
	}
	if err := c.LogLevel.UnmarshalText([]byte(get("NAH_LOG_LEVEL"))); err != nil {
		return fail("NAH_LOG_LEVEL", "want debug, info, warn or error")
	}
	return c, nil
}

// LogValue summarises the configuration for the start-up log line. It holds
// no secrets.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("addr", c.Addr),
		slog.String("data_dir", c.DataDir),
		slog.Bool("open_signup", c.OpenSignup),
		slog.Int("max_open_files", c.MaxOpenFiles),
		slog.Int64("head_cache_bytes", c.HeadCacheBytes),
		slog.Int("signup_per_hour", c.SignupPerHour),
		slog.Int("trusted_proxies", len(c.TrustedProxies)),
		slog.Int("max_moment_bytes", c.MaxMomentBytes),
	)
}
