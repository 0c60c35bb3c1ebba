// Package app owns HTTP: the JSON API of the phone apps, the feed, the
// admin console's handlers, metrics, and the HTTP server. It is handed its
// part of the configuration (Config) by cmd/nah and reads no environment.
// It is the only package that imports chi. It keeps no request log: slog
// lines are for start, shutdown and errors only, and never carry a body, a
// token or a password.
package app

import (
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// App is the HTTP application.
type App struct {
	cfg     Config
	store   *store.Store
	log     *slog.Logger
	hasher  *hasher
	now     func() time.Time
	metrics *metrics
	mem     *budget // memory that requests may hold at once

	signinByHandle *limiter
	signinByAddr   *limiter
	signins        signinLog // who tried to get in (signins.go)
	signupByAddr   *limiter
	// signupFailuresByAddr counts failed sign-ups (accounts.go, takeSignup).
	signupFailuresByAddr *limiter
	secretsByAddr        *limiter
	exportByPerson       *limiter
	exportsHeld          atomic.Int64 // the budget exports in flight hold (export.go)
	exportMu             sync.Mutex
	exporting            map[string]struct{} // people with an export in flight
	fullBackups          oneAtATime          // the one slot for a full backup or a nightly copy (console_backups.go)
	imports              oneAtATime          // the one slot for an import (console_import.go)
	// restoring holds the people whose file a restore or its undo is
	// replacing now and how far it is (console_restore_progress.go): a
	// second ask is refused, not run again after the first.
	restoring sync.Map // person id: *restoreRun
	uploading inFlight // keyed uploads running (idem.go)

	// tickets are a restore's confirmations and results
	// (console_restore_ticket.go).
	tickets restoreTickets

	handler http.Handler

	certs *certWatch // with NAH_DOMAIN: certificates over ACME (tls.go)
}

// Sign-in limits: failures per handle and per client address in a window.
// While a key is over its limit even the right password is refused, so a
// guesser learns nothing from the answer.
const (
	signinFailuresPerHandle = 10
	signinFailuresPerAddr   = 50
	signinWindow            = 15 * time.Minute
)

// Failed sign-ups (a taken handle, a bad password, a wrong join code) count
// per client address on their own, apart from the successful ones that
// Config.SignupPerHour bounds: 50 an hour is a family's typos many times
// over, and keeps a guesser from probing which handles are taken. (Join
// codes are also held to secretFailuresPerAddr.)
const signupFailuresPerAddr = 50

// One-time secrets (reset and setup links, join codes) that are not usable
// count per client address: past the limit the answer is 429 before the
// secret is looked up. Right ones do not count, and a person needs one, so
// ten wrong ones in a window is already far past any typo.
const (
	secretFailuresPerAddr = 10
	secretWindow          = 15 * time.Minute
)

// New builds the application on an open store.
func New(cfg Config, s *store.Store, log *slog.Logger) *App {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxMomentBytes == 0 {
		cfg.MaxMomentBytes = nah.DefaultMaxMomentBytes
	}
	if cfg.MaxMediaBytes == 0 {
		cfg.MaxMediaBytes = nah.DefaultMaxMediaBytes
	}
	if cfg.QuotaBytes == 0 {
		cfg.QuotaBytes = nah.DefaultQuotaBytes
	}
	if cfg.Transfer.Grace == 0 {
		cfg.Transfer.Grace = DefaultTransferGrace
	}
	if cfg.Transfer.MinRate == 0 {
		cfg.Transfer.MinRate = DefaultMinTransferRate
	}
	if cfg.MemoryBudget == 0 {
		cfg.MemoryBudget = DefaultMemoryBudget
	}
	a := &App{
		cfg:                  cfg,
		store:                s,
		log:                  log,
		hasher:               newHasher(cfg.PasswordCost),
		now:                  cfg.Now,
		metrics:              newMetrics(cfg.Now),
		mem:                  &budget{limit: cfg.MemoryBudget},
		signinByHandle:       newLimiter(signinFailuresPerHandle, signinWindow, cfg.Now),
		signinByAddr:         newLimiter(signinFailuresPerAddr, signinWindow, cfg.Now),
		signupByAddr:         newLimiter(cfg.SignupPerHour, time.Hour, cfg.Now),
		signupFailuresByAddr: newLimiter(signupFailuresPerAddr, time.Hour, cfg.Now),
		secretsByAddr:        newLimiter(secretFailuresPerAddr, secretWindow, cfg.Now),
		exportByPerson:       newLimiter(exportsPerPerson, exportWindow, cfg.Now),
		exporting:            make(map[string]struct{}),
		fullBackups:          make(oneAtATime, 1),
		imports:              make(oneAtATime, 1),
	}
	if len(cfg.TLS.Domains) > 0 {
		a.certs = newCertWatch(cfg.TLS, log)
	}
	a.handler = a.routes()
	return a
}

// ServeHTTP serves the API.
func (a *App) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.handler.ServeHTTP(w, r) }

// maxHeaderBytes is only net/http's backstop (plain 431, it reads up to
// 20-24 KiB at 16 KiB); limitHeaders (headers.go) applies the SPEC's 16 KiB.
// Not higher: a half-read header holds twice its size, 41 KB a connection at
// 16 KiB vs 130 KB at 64 KiB (500 connections), over the memory plan's 45 KB.
//
// idleTimeout: 30 s covers a phone app's pauses in use; an idle connection
// holds ~25 KB (listener.go) until then.
const (
	maxHeaderBytes    = 16 << 10
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 30 * time.Second
)

// NewServer returns an http.Server for h with every timeout set, so a slow
// client cannot hold a connection open forever, and the security headers
// (headers.go) on every response. A nil h is http.DefaultServeMux, as for
// http.Server.
func NewServer(addr string, h http.Handler, log *slog.Logger) *http.Server {
	if h == nil {
		h = http.DefaultServeMux
	}
	return &http.Server{
		Addr:              addr,
		Handler:           secureHeaders(h),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

func routePattern(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		return rc.RoutePattern()
	}
	return ""
}
