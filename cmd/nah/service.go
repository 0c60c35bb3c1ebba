package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
)

// `nah service` prints a systemd unit for this box: the binary that runs
// it, the data directory (NAH_DATA_DIR, else /var/lib/nah), a user and an
// environment file. The unit sets the two values its sandbox and its
// memory limit must agree with, the data directory (the one writable path)
// and NAH_MEMORY_LIMIT (below MemoryMax); everything else belongs in the
// environment file, which the operator edits.

// defaultServiceDataDir is the data directory of a service when
// NAH_DATA_DIR is unset: ./data means nothing to systemd, and /var/lib is
// where a service's state lives, which systemd's StateDirectory= creates
// with the right owner.
const defaultServiceDataDir = "/var/lib/nah"

// hiddenFromService are the trees that ProtectHome= and PrivateTmp= hide
// from the service: a binary or data directory there is not found.
var hiddenFromService = []string{"/home", "/root", "/run/user", "/tmp", "/var/tmp"}

// unitValue is what a path or name in the unit may hold without quoting:
// systemd splits on spaces and expands % and $.
var unitValue = regexp.MustCompile(`^[A-Za-z0-9_./@+:-]+$`)

var userName = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

const serviceUsage = "usage: nah service [-user nah] [-env-file /etc/nah/nah.env] [-bin /usr/bin/nah] > /etc/systemd/system/nah.service"

func service(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("service", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	user := fs.String("user", "nah", "the user the server runs as")
	envFile := fs.String("env-file", "/etc/nah/nah.env", "the environment file with the server's settings")
	bin := fs.String("bin", "", "the binary's path in the unit (default: this binary's); the Debian package's is /usr/bin/nah")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return usageError{serviceUsage}
	}
	cfg, err := readConfig(getenv)
	if err != nil {
		return usageError{err.Error()}
	}
	u := unit{User: *user, EnvFile: *envFile, DataDir: defaultServiceDataDir, Version: version}
	if strings.TrimSpace(getenv("NAH_DATA_DIR")) != "" {
		if u.DataDir, err = filepath.Abs(cfg.Store.Dir); err != nil {
			return err
		}
	}
	if u.Exec = *bin; u.Exec == "" {
		if u.Exec, err = os.Executable(); err != nil {
			return err
		}
		if p, err := filepath.EvalSymlinks(u.Exec); err == nil {
			u.Exec = p
		}
	} else if !filepath.IsAbs(u.Exec) {
		return usageError{fmt.Sprintf("-bin %q: want an absolute path", u.Exec)}
	}
	switch {
	case !userName.MatchString(u.User):
		return usageError{fmt.Sprintf("-user %q: want a user name such as nah", u.User)}
	case !filepath.IsAbs(u.EnvFile) || !unitValue.MatchString(u.EnvFile):
		return usageError{fmt.Sprintf("-env-file %q: want an absolute path without spaces, quotes, %% or $", u.EnvFile)}
	case !unitValue.MatchString(u.DataDir):
		return usageError{fmt.Sprintf("NAH_DATA_DIR=%q: a unit needs a path without spaces, quotes, %% or $", u.DataDir)}
	case !unitValue.MatchString(u.Exec):
		return fmt.Errorf("the binary's path %q has spaces, quotes, %% or $: move it, to /usr/local/bin/nah for one", u.Exec)
	}
	for _, p := range []struct{ what, path string }{{"the binary", u.Exec}, {"the data directory (NAH_DATA_DIR)", u.DataDir}} {
		for _, h := range hiddenFromService {
			if p.path == h || strings.HasPrefix(p.path, h+"/") {
				fmt.Fprintf(stderr, "nah service: warning: %s is under %s, which the unit hides from the service (ProtectHome=, PrivateTmp=): it will not start; use /usr/local/bin/nah and /var/lib/nah\n", p.what, h)
			}
		}
	}
	// The replica: the default ./replica means nothing to systemd either;
	// a service's goes beside its data directory (another disk or S3 is
	// better: docs/backups.md), and a local one must be writable in the sandbox.
	switch r := strings.TrimSpace(getenv("NAH_REPLICA_URL")); {
	case r == "":
		u.ReplicaDir, u.ReplicaEnv = u.DataDir+"-replica", true
	case cfg.ReplicaTarget != nil && !cfg.ReplicaTarget.IsS3():
		u.ReplicaDir = cfg.ReplicaTarget.Dir()
	}
	if u.ReplicaDir != "" && !unitValue.MatchString(u.ReplicaDir) {
		return usageError{fmt.Sprintf("NAH_REPLICA_URL=%q: a unit needs a path without spaces, quotes, %% or $", u.ReplicaDir)}
	}
	for _, d := range []string{u.DataDir, u.ReplicaDir} {
		if rest, ok := strings.CutPrefix(d, "/var/lib/"); ok && !strings.Contains(rest, "/") {
			u.StateDirectory = strings.TrimSpace(u.StateDirectory + " " + rest)
		}
	}
	u.MemoryLimitMiB, u.MemoryMaxMiB = serviceMemory(cfg.MemoryLimit)
	return unitTemplate.Execute(stdout, u)
}

// serviceMemory is the unit's NAH_MEMORY_LIMIT and MemoryMax, both in MiB
// (systemd's M): the configured limit rounded up to a whole MiB, and the
// least MemoryMax of which it is at most memoryShareNum/Den (cgroup.go).
// The default 320 MiB gives 400 MiB.
func serviceMemory(limit int64) (limitMiB, maxMiB int64) {
	limitMiB = (limit + 1<<20 - 1) >> 20
	return limitMiB, (limitMiB*memoryShareDen + memoryShareNum - 1) / memoryShareNum
}

// unit is what the unit template is filled with.
type unit struct {
	Version, User, EnvFile, DataDir, Exec string
	StateDirectory                        string // DataDir's and ReplicaDir's that are /var/lib/<one name>
	ReplicaDir                            string // a local replica: writable in the sandbox
	ReplicaEnv                            bool   // NAH_REPLICA_URL was unset: the unit sets ReplicaDir
	MemoryLimitMiB, MemoryMaxMiB          int64
}

// Headroom is what MemoryMax leaves above NAH_MEMORY_LIMIT.
func (u unit) Headroom() int64 { return u.MemoryMaxMiB - u.MemoryLimitMiB }

// unitTemplate is the unit. Each hardening line takes away something the
// server never needs; ones whose effect on a Go binary could not be tested
// here are left out (SystemCallFilter=, MemoryDenyWriteExecute=).
var unitTemplate = template.Must(template.New("unit").Parse(`# nah's systemd unit, printed by 'nah service' (nah {{.Version}}) for this box.
# Install and start it:
#   nah service > /etc/systemd/system/nah.service
#   systemctl daemon-reload && systemctl enable --now nah
# Settings (NAH_DOMAIN and the rest of 'nah help') go in {{.EnvFile}};
# the data directory and the memory limit are set here, because the sandbox
# and MemoryMax below must agree with them.

[Unit]
Description=nah, the server of a private family moments app
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
User={{.User}}
ExecStart={{.Exec}} serve
EnvironmentFile=-{{.EnvFile}}
Environment=NAH_DATA_DIR={{.DataDir}}
{{- if .ReplicaEnv}}
Environment=NAH_REPLICA_URL={{.ReplicaDir}}
{{- end}}

# Memory. Past MemoryMax the kernel kills the server; past NAH_MEMORY_LIMIT
# the server answers 503 instead. NAH_MEMORY_LIMIT is at most 4/5 of
# MemoryMax: {{.MemoryLimitMiB}} MiB of {{.MemoryMaxMiB}} MiB (systemd's M is MiB) leaves {{.Headroom}} MiB for what the
# server does not count (goroutine stacks, socket buffers, the allocator's
# slack); no swap, so that the limit is what the kernel holds the server to.
# At start the server logs both (memory_limit, cgroup_memory_max, in bytes)
# and warns if they do not agree. Change them together, here:
# NAH_MEMORY_LIMIT in {{.EnvFile}} would override this line.
Environment=NAH_MEMORY_LIMIT={{.MemoryLimitMiB}}MiB
MemoryMax={{.MemoryMaxMiB}}M
MemorySwapMax=0

Restart=on-failure
RestartSec=2s
# Exit status 2 is a bad setting, which a restart would not fix.
RestartPreventExitStatus=2

# Ports 80 and 443 without root, and no other privilege.
CapabilityBoundingSet=CAP_NET_BIND_SERVICE
AmbientCapabilities=CAP_NET_BIND_SERVICE
NoNewPrivileges=yes

# The data directory (and a local replica) are the only writable paths{{if .StateDirectory}}; systemd makes them, owned by {{.User}}{{else}}: make them first, owned by {{.User}}
# (install -d -o {{.User}} -g {{.User}} -m 700 {{.DataDir}}){{end}}.
ProtectSystem=strict
ReadWritePaths={{.DataDir}}{{if .ReplicaDir}} {{.ReplicaDir}}{{end}}
{{- if .StateDirectory}}
StateDirectory={{.StateDirectory}}
StateDirectoryMode=0700
{{- end}}
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
UMask=0077
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
SystemCallArchitectures=native
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX

[Install]
WantedBy=multi-user.target
`))
