package app

import (
	"net/netip"
	"time"

	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/digest"
)

// Config is what app needs to know of the process's configuration. cmd/nah
// reads the environment once and fills it; zero values take the defaults
// noted.
type Config struct {
	// Backups is replication, the sweep and restores (nil: NAH_REPLICA_URL
	// is off): the console's Backups page and health read it.
	Backups *backup.Backups
	// OpenSignup accepts sign-ups without a join code, unless the console
	// has saved an override.
	OpenSignup bool
	// SignupPerHour bounds successful sign-ups per client address per
	// hour; 0 is no limit. cmd/nah's default is DefaultSignupPerHour.
	// Failed ones have their own bound (signupFailuresPerAddr).
	SignupPerHour int
	// TrustedProxies are the reverse proxies whose X-Forwarded-For is
	// believed for rate limits.
	TrustedProxies []netip.Prefix
	// MaxMomentBytes is the largest decoded moment body; default
	// nah.DefaultMaxMomentBytes.
	MaxMomentBytes int
	// MaxMediaBytes is the largest media upload; default
	// nah.DefaultMaxMediaBytes. QuotaBytes is what one person may store,
	// database and media; default nah.DefaultQuotaBytes. Transfer bounds
	// how long a media upload or download may take (media.go).
	MaxMediaBytes int64
	QuotaBytes    int64
	Transfer      Transfer
	// PublicURL is the server's address as people reach it (scheme, host,
	// perhaps a path; no trailing slash), which the links the console
	// makes start with. It is never taken from a request's Host, which the
	// client chooses: a forged Host would send a reset link's token to
	// another site. cmd/nah sets NAH_PUBLIC_URL, else http:// and the
	// listen address. Empty: links are shown as paths.
	PublicURL string
	// PublicURLFromListen says that PublicURL is only the listen address
	// (NAH_PUBLIC_URL unset, no HTTPS): a private address there is a
	// guess that phones away from home cannot reach (linkWarning).
	PublicURLFromListen bool

	// MemoryBudget is the memory that requests may hold at once: their
	// base cost, their bodies, the pages they write. Past it a request is
	// answered 503 with Retry-After at once (budget.go). cmd/nah derives it
	// from NAH_MEMORY_LIMIT; default DefaultMemoryBudget.
	MemoryBudget int64

	// TLS is how the server serves HTTPS (tls.go); the zero value is plain
	// HTTP.
	TLS TLSConfig

	// PasswordCost is the bcrypt cost; default bcrypt.DefaultCost. Not an
	// environment variable: tests lower it, production keeps the default.
	PasswordCost int
	// Now is the clock of rate limits and metrics; nil means time.Now.
	Now func() time.Time

	// Version is the server's version (cmd/nah's, stamped at build), which
	// a person's export records in its manifest.
	Version string

	// Digests is the digest loop, for the console's Digests page and the
	// metrics; nil where no loop runs (the page says so).
	Digests *digest.Loop

	// Settings lists every variable of the process with the value in force
	// and where it came from, for the console's settings page.
	Settings []Setting
}

// DefaultSignupPerHour is the sign-up limit per client address that
// cmd/nah uses when NAH_SIGNUP_PER_HOUR is unset. It is not applied to a
// zero Config.SignupPerHour, which means no limit.
const DefaultSignupPerHour = 20

// Setting is one variable of the process as the console shows it.
type Setting struct {
	Name, Value, Source string
}

// source says where the variable name's value came from.
func (c Config) source(name string) string {
	for _, s := range c.Settings {
		if s.Name == name && s.Source != "" {
			return s.Source
		}
	}
	return "the default"
}

// Effective lists every variable with the value in force and its source.
func (c Config) Effective() []struct{ Name, Value, Source string } {
	out := make([]struct{ Name, Value, Source string }, 0, len(c.Settings))
	for _, s := range c.Settings {
		if s.Value == "" {
			s.Value = "(empty)"
		}
		out = append(out, struct{ Name, Value, Source string }(s))
	}
	return out
}
