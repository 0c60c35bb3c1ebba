package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/app"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
)

func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

// TestConfigDefaults: an empty environment gives the packages' own defaults,
// and the console hears of every variable.
func TestConfigDefaults(t *testing.T) {
	c, err := readConfig(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.DrillEvery != 6*time.Hour {
		t.Errorf("NAH_DRILL_EVERY: %v, want 6h", c.DrillEvery)
	}
	if c.ReplicaBudget != 0 {
		t.Errorf("NAH_REPLICA_BUDGET: %d, want none", c.ReplicaBudget)
	}
	if c.Addr != defaultAddr || c.MetricsAddr != "" || c.ShutdownTimeout != defaultShutdownTimeout || c.LogLevel != slog.LevelInfo {
		t.Errorf("process: %+v", c)
	}
	if c.Store.Dir != "data" || c.Store.MaxOpenFiles != 1024 || c.Store.HeadCacheBytes != store.DefaultHeadCacheBytes ||
		c.Store.Sync != store.SyncFull {
		t.Errorf("store: %+v", c.Store)
	}
	if c.App.OpenSignup || c.App.SignupPerHour != app.DefaultSignupPerHour || c.App.TrustedProxies != nil ||
		c.App.MaxMomentBytes != nah.DefaultMaxMomentBytes {
		t.Errorf("app: %+v", c.App)
	}
	if len(c.App.Settings) != len(variables) {
		t.Fatalf("%d settings for %d variables", len(c.App.Settings), len(variables))
	}
	for i, s := range c.App.Settings {
		want := variables[i].Default
		if s.Name == "NAH_MAX_OPEN_FILES" {
			want = "auto: 1024" // what auto resolved to
		}
		if v := variables[i]; s != (app.Setting{Name: v.Name, Value: want, Source: "the default"}) {
			t.Errorf("setting %d: %+v, want %s=%q from the default", i, s, v.Name, v.Default)
		}
	}
}

func TestConfigFromEnvironment(t *testing.T) {
	c, err := readConfig(env(map[string]string{
		"NAH_ADDR":             "0.0.0.0:80",
		"NAH_DATA_DIR":         "/srv/nah/../data/",
		"NAH_OPEN_SIGNUP":      "true",
		"NAH_MAX_OPEN_FILES":   " 1000 ",
		"NAH_SYNC":             "Normal",
		"NAH_HEAD_CACHE_MB":    "0",
		"NAH_SIGNUP_PER_HOUR":  "0",
		"NAH_TRUSTED_PROXIES":  "10.0.0.1, 192.168.0.0/16",
		"NAH_MAX_MOMENT_BYTES": "1000",
		"NAH_SHUTDOWN_TIMEOUT": "1m",
		"NAH_DELETE_GRACE":     "0",
		"NAH_LOG_LEVEL":        "debug",
		"NAH_METRICS_ADDR":     "127.0.0.1:9090",
		"NAH_DRILL_EVERY":      "off",
		"NAH_REPLICA_BUDGET":   "50GB",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.DrillEvery != 0 {
		t.Errorf("NAH_DRILL_EVERY=off: %v", c.DrillEvery)
	}
	if c.ReplicaBudget != 50e9 {
		t.Errorf("NAH_REPLICA_BUDGET=50GB: %d", c.ReplicaBudget)
	}
	if c.Addr != "0.0.0.0:80" || c.MetricsAddr != "127.0.0.1:9090" || c.ShutdownTimeout != time.Minute || c.LogLevel != slog.LevelDebug {
		t.Errorf("process: %+v", c)
	}
	if c.Store.Dir != "/srv/data" || c.Store.MaxOpenFiles != 1000 || c.Store.HeadCacheBytes != -1 || c.Store.DeleteGrace != -1 ||
		c.Store.Sync != store.SyncNormal {
		t.Errorf("store: %+v", c.Store)
	}
	if !c.App.OpenSignup || c.App.SignupPerHour != 0 || len(c.App.TrustedProxies) != 2 || c.App.TrustedProxies[0].String() != "10.0.0.1/32" ||
		c.App.MaxMomentBytes != 1000 {
		t.Errorf("app: %+v", c.App)
	}
	if s := c.App.Settings[3]; s != (app.Setting{Name: "NAH_MAX_OPEN_FILES", Value: "1000", Source: "the environment"}) {
		t.Errorf("setting: %+v", s)
	}
}

func TestConfigErrors(t *testing.T) {
	for name, c := range map[string]struct{ value, want string }{
		"NAH_ADDR":             {"nowhere", `NAH_ADDR="nowhere": want host:port, such as 127.0.0.1:8090`},
		"NAH_DATA_DIR":         {"data?", `NAH_DATA_DIR="data?": the path must not contain '?' or '#'`},
		"NAH_OPEN_SIGNUP":      {"perhaps", `NAH_OPEN_SIGNUP="perhaps": want true or false`},
		"NAH_MAX_OPEN_FILES":   {"15", `NAH_MAX_OPEN_FILES="15": want auto or a whole number from 16 to 100000`},
		"NAH_SYNC":             {"fast", `NAH_SYNC="fast": want full or normal`},
		"NAH_HEAD_CACHE_MB":    {"-1", `NAH_HEAD_CACHE_MB="-1": want a whole number of megabytes, 0 to turn the cache off`},
		"NAH_SIGNUP_PER_HOUR":  {"-1", `NAH_SIGNUP_PER_HOUR="-1": want a whole number, 0 for no limit`},
		"NAH_TRUSTED_PROXIES":  {"10.0.0.1, proxy", `NAH_TRUSTED_PROXIES="10.0.0.1, proxy": "proxy" is neither an address nor a CIDR`},
		"NAH_MAX_MOMENT_BYTES": {"0", `NAH_MAX_MOMENT_BYTES="0": want a whole number of bytes from 1 to 16777216`},
		"NAH_SHUTDOWN_TIMEOUT": {"soon", `NAH_SHUTDOWN_TIMEOUT="soon": want a positive duration such as 10s`},
		"NAH_DELETE_GRACE":     {"x", `NAH_DELETE_GRACE="x": want a duration such as 168h, 0 to purge at once`},
		"NAH_LOG_LEVEL":        {"loud", `NAH_LOG_LEVEL="loud": want debug, info, warn or error`},
		"NAH_METRICS_ADDR":     {"9090", `NAH_METRICS_ADDR="9090": want host:port, such as 127.0.0.1:9090`},
		"NAH_MEMORY_LIMIT":     {"lots", `NAH_MEMORY_LIMIT="lots": want a size such as 320MiB or 1GiB`},
		"NAH_MAX_CONNECTIONS":  {"lots", `NAH_MAX_CONNECTIONS="lots": want a whole number from 16 to 100000`},
		"NAH_PUBLIC_URL":       {"nah.example.com", `NAH_PUBLIC_URL="nah.example.com": want an http or https URL such as https://nah.example.com, without query or fragment`},
		"NAH_DRILL_EVERY":      {"30s", `NAH_DRILL_EVERY="30s": want a duration of a minute or more such as 6h, or off`},
		"NAH_REPLICA_BUDGET":   {"50 gigs", `NAH_REPLICA_BUDGET="50 gigs": want a size such as 320MiB or 1GiB`},
	} {
		_, err := readConfig(env(map[string]string{name: c.value}))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s=%q: %v, want %s", name, c.value, err, c.want)
		}
	}
}

// TestMemoryPlan: NAH_MEMORY_LIMIT is split into SQLite's bound, the Go
// runtime's share, the head cache, a base and the requests' budget, and a
// limit too small for the caches is refused, naming what it needs.
func TestMemoryPlan(t *testing.T) {
	c, err := readConfig(env(map[string]string{"NAH_MAX_OPEN_FILES": "512"}))
	if err != nil {
		t.Fatal(err)
	}
	sqlite := store.SQLiteMemoryBound(512)
	if c.MemoryLimit != 320<<20 || c.GoMemoryLimit != c.MemoryLimit-sqlite {
		t.Fatalf("limit %d, Go's share %d, SQLite's %d", c.MemoryLimit, c.GoMemoryLimit, sqlite)
	}
	repl := int64(defaultReplicaMaxFiles)*backup.PerFileBytes + backup.DrillBytes
	if want := c.GoMemoryLimit - store.DefaultHeadCacheBytes*3/2 - memoryBase - app.DefaultMaxConnections*app.ConnectionBytes - repl; c.App.MemoryBudget != want || want < 60<<20 {
		t.Fatalf("request budget %d, want %d (and at least 60 MiB by default)", c.App.MemoryBudget, want)
	}
	off, err := readConfig(env(map[string]string{"NAH_REPLICA_URL": "off", "NAH_MAX_OPEN_FILES": "512"}))
	if err != nil || off.App.MemoryBudget != c.App.MemoryBudget+repl {
		t.Fatalf("with replication off: budget %d, %v; want %d", off.App.MemoryBudget, err, c.App.MemoryBudget+repl)
	}
	for v, want := range map[string]int64{"1GiB": 1 << 30, "400MB": 400e6, "300 MiB": 300 << 20, "400000000": 400e6} {
		c, err := readConfig(env(map[string]string{"NAH_MEMORY_LIMIT": v}))
		if err != nil || c.MemoryLimit != want {
			t.Errorf("NAH_MEMORY_LIMIT=%q: %d, %v; want %d", v, c.MemoryLimit, err, want)
		}
	}
	_, err = readConfig(env(map[string]string{"NAH_MEMORY_LIMIT": "200MiB", "NAH_MAX_OPEN_FILES": "512"}))
	if err == nil || !strings.Contains(err.Error(), "want at least 274MiB") {
		t.Fatalf("200MiB with the default caches: %v", err)
	}
	_, err = readConfig(env(map[string]string{"NAH_MAX_MOMENT_BYTES": "1048576"}))
	if err == nil || !strings.Contains(err.Error(), "too small for NAH_MAX_MOMENT_BYTES=1048576") {
		t.Fatalf("1 MiB moments with the default limit (a page of 100 could never be served): %v", err)
	}
	if _, err := readConfig(env(map[string]string{"NAH_MAX_MOMENT_BYTES": "1048576", "NAH_MEMORY_LIMIT": "1GiB"})); err != nil {
		t.Fatalf("1 MiB moments in 1 GiB: %v", err)
	}
	if _, err := readConfig(env(map[string]string{"NAH_MEMORY_LIMIT": "200MiB", "NAH_HEAD_CACHE_MB": "0"})); err != nil {
		t.Fatalf("200MiB without heads: %v", err)
	}
}

// TestAutoOpenFiles: NAH_MAX_OPEN_FILES=auto, the default, keeps every
// file of people-1k open at the default 320 MiB, grows and shrinks with the
// limit, and always leaves the requests their reserve and the largest page.
func TestAutoOpenFiles(t *testing.T) {
	for _, tc := range []struct {
		env      map[string]string
		min, max int
	}{
		{nil, 1001, 1100},
		{map[string]string{"NAH_MEMORY_LIMIT": "1GiB"}, 9000, 11000},
		{map[string]string{"NAH_MEMORY_LIMIT": "200MiB", "NAH_HEAD_CACHE_MB": "0"}, 512, 800},
		{map[string]string{"NAH_MEMORY_LIMIT": "1GiB", "NAH_MAX_MOMENT_BYTES": "1048576"}, 5000, 8000},
		{map[string]string{"NAH_REPLICA_URL": "off"}, 1088, 1500},
	} {
		c, err := readConfig(env(tc.env))
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		n := c.Store.MaxOpenFiles
		if n < tc.min || n > tc.max || n%64 != 0 {
			t.Errorf("%v: %d open files, want a multiple of 64 from %d to %d", tc.env, n, tc.min, tc.max)
		}
		page := 2 * int64(nah.FeedPageMax) * int64(c.App.MaxMomentBytes)
		if c.App.MemoryBudget < requestReserve || c.App.MemoryBudget*3/4 < page {
			t.Errorf("%v: %d files leave the requests %d bytes (page %d)", tc.env, n, c.App.MemoryBudget, page)
		}
		if s := c.App.Settings[3]; s.Value != fmt.Sprintf("auto: %d", n) {
			t.Errorf("%v: the console shows %+v", tc.env, s)
		}
	}
	// Too little memory for even the smallest bound is refused, as before.
	if _, err := readConfig(env(map[string]string{"NAH_MEMORY_LIMIT": "200MiB"})); err == nil || !strings.Contains(err.Error(), "want at least") {
		t.Fatalf("200MiB with the default caches: %v", err)
	}
}

// TestConfigPublicURL: an absolute http(s) URL, its trailing slash trimmed;
// anything a link could not start with is refused.
func TestConfigPublicURL(t *testing.T) {
	for v, want := range map[string]string{
		"":                                "",
		"https://nah.example.com":         "https://nah.example.com",
		"https://nah.example.com/":        "https://nah.example.com",
		" http://10.0.0.5:8090/family// ": "http://10.0.0.5:8090/family",
		"HTTPS://Nah.Example.com":         "https://Nah.Example.com",
	} {
		c, err := readConfig(env(map[string]string{"NAH_PUBLIC_URL": v}))
		if err != nil || c.App.PublicURL != want {
			t.Errorf("%q: %q %v, want %q", v, c.App.PublicURL, err, want)
		}
	}
	for _, v := range []string{"nah.example.com", "/console", "ftp://nah.example.com", "https://", "https://nah.example.com/?a=1",
		"https://nah.example.com/?", "https://nah.example.com/#top", "https://nah.example.com#", "https://user:pw@nah.example.com", "https:nah.example.com", "http://[::1"} {
		if _, err := readConfig(env(map[string]string{"NAH_PUBLIC_URL": v})); err == nil || !strings.HasPrefix(err.Error(), "NAH_PUBLIC_URL=") {
			t.Errorf("%q accepted: %v", v, err)
		}
	}
}

func TestConfigMaxConnections(t *testing.T) {
	for v, want := range map[string]int{"": app.DefaultMaxConnections, "16": 16, "5000": 5000} {
		// Connections are part of the memory plan: 5,000 need more than the default.
		c, err := readConfig(env(map[string]string{"NAH_MAX_CONNECTIONS": v, "NAH_MEMORY_LIMIT": "1GiB"}))
		if err != nil || c.MaxConnections != want {
			t.Errorf("%q: %d %v, want %d", v, c.MaxConnections, err, want)
		}
	}
	for _, v := range []string{"15", "0", "-1", "100001", "1e3"} {
		if _, err := readConfig(env(map[string]string{"NAH_MAX_CONNECTIONS": v})); err == nil {
			t.Errorf("%q accepted", v)
		}
	}
}

// TestConfigHTTPS: NAH_DOMAIN turns HTTPS on, with the standard ports
// unless the addresses are set, the ACME cache in the data directory, the
// redirect listener in the memory plan, and links to the first name.
func TestConfigHTTPS(t *testing.T) {
	plain, err := readConfig(env(map[string]string{"NAH_MAX_OPEN_FILES": "512"}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := readConfig(env(map[string]string{"NAH_DOMAIN": " Nah.Example.com, www.nah.example.com., nah.example.com", "NAH_DATA_DIR": "/srv/nah", "NAH_MAX_OPEN_FILES": "512"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.App.TLS.Domains, " "); got != "nah.example.com www.nah.example.com" || c.App.TLS.DirectoryURL != app.DefaultACMEDirectory ||
		c.App.TLS.CacheDir != "/srv/nah/acme" || c.Addr != ":443" || c.HTTPAddr != ":80" {
		t.Fatalf("NAH_DOMAIN: %+v, addr %q, http %q", c.App.TLS, c.Addr, c.HTTPAddr)
	}
	if s := c.App.Settings[0]; s != (app.Setting{Name: "NAH_ADDR", Value: ":443", Source: "the default with HTTPS"}) {
		t.Errorf("the console hears %+v", s)
	}
	if plain.App.MemoryBudget-c.App.MemoryBudget != app.RedirectMaxConnections*app.ConnectionBytes {
		t.Errorf("the redirect listener's connections are not in the memory plan: %d, %d", plain.App.MemoryBudget, c.App.MemoryBudget)
	}
	for listen, want := range map[string]string{"[::]:443": "https://nah.example.com", "127.0.0.1:8443": "https://nah.example.com:8443"} {
		if got := c.publicURL(listen); got != want {
			t.Errorf("link base listening on %s: %s, want %s", listen, got, want)
		}
	}

	c, err = readConfig(env(map[string]string{"NAH_DOMAIN": "nah.example.com", "NAH_ADDR": "127.0.0.1:8443", "NAH_HTTP_ADDR": "off",
		"NAH_ACME_EMAIL": "ops@example.com", "NAH_ACME_DIRECTORY": "https://acme-staging-v02.api.letsencrypt.org/directory"}))
	if err != nil || c.Addr != "127.0.0.1:8443" || c.HTTPAddr != "" || c.App.TLS.Email != "ops@example.com" || !strings.Contains(c.App.TLS.DirectoryURL, "staging") {
		t.Fatalf("set addresses: %+v %q %q %v", c.App.TLS, c.Addr, c.HTTPAddr, err)
	}

	for name, values := range map[string][]string{
		"NAH_DOMAIN":         {"localhost", "*.example.com", "nah.example.com:443", "https://nah.example.com", "10.0.0.5", "nah..example.com", "-nah.example.com", "nah.example.com,", "ñah.example.com"},
		"NAH_ACME_EMAIL":     {"ops", "Ops <ops@example.com>"},
		"NAH_ACME_DIRECTORY": {"http://acme.example.com/directory", "acme.example.com"},
		"NAH_HTTP_ADDR":      {"80"},
	} {
		for _, v := range values {
			vars := map[string]string{name: v}
			if name != "NAH_DOMAIN" {
				vars["NAH_DOMAIN"] = "nah.example.com"
			}
			if _, err := readConfig(env(vars)); err == nil || !strings.HasPrefix(err.Error(), name+"=") {
				t.Errorf("%s=%q: %v, want an error naming it", name, v, err)
			}
		}
	}
}

// TestCgroupLimit: the least memory limit of the process's cgroup and its
// ancestors, from cgroup v2's memory.max or v1's memory.limit_in_bytes;
// none where every level says unlimited.
func TestCgroupLimit(t *testing.T) {
	write := func(path, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v2 := t.TempDir()
	write(filepath.Join(v2, "cgroup.controllers"), "cpu memory pids\n")
	write(filepath.Join(v2, "system.slice/memory.max"), "max\n")
	write(filepath.Join(v2, "system.slice/nah.service/memory.max"), "419430400\n")
	v1 := t.TempDir()
	write(filepath.Join(v1, "memory/memory.limit_in_bytes"), "9223372036854771712\n")
	write(filepath.Join(v1, "memory/box/memory.limit_in_bytes"), "1073741824\n")
	write(filepath.Join(v1, "memory/box/nah/memory.limit_in_bytes"), "9223372036854771712\n")
	for _, c := range []struct {
		root, self string
		want       int64
	}{
		{v2, "0::/system.slice/nah.service\n", 400 << 20},
		{v2, "0::/system.slice\n", 0},
		{v2, "0::/elsewhere\n", 0},
		{v1, "12:pids:/box/nah\n4:memory:/box/nah\n0::/box/nah\n", 1 << 30},
		{v1, "4:cpu,memory:/\n", 0},
		{v1, "12:pids:/box/nah\n", 0},
	} {
		got, ok := cgroupLimit(c.self, c.root)
		if got != c.want || ok != (c.want > 0) {
			t.Errorf("%q: %d %v, want %d", c.self, got, ok, c.want)
		}
	}
}

// TestEverySettingGrouped: the console's Settings page has words and a
// group for every variable of `nah help`, so none lands under Other.
func TestEverySettingGrouped(t *testing.T) {
	for _, v := range variables {
		if !app.GroupedSetting(v.Name) {
			t.Errorf("%s is in no group of the console's Settings page (app/console_settings.go's settingGroups)", v.Name)
		}
	}
}
