// Command nah is the nah server: `nah serve` runs it, `nah help` lists its
// configuration. main only wires the process to run, which tests call
// directly.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/app"
	"github.com/nah-app/nah/digest"
	"github.com/nah-app/nah/store"
)

// version, commit and date are stamped at build time (the Makefile and
// packaging/goreleaser.yaml: -ldflags "-X main.version=... -X main.commit=...
// -X main.date=..."); a plain go build leaves these.
var (
	version = "dev"
	commit  = "unknown"
	date    = "unknown"
)

// usageError exits with status 2: the command line or configuration is wrong.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "nah:", err)
		if errors.As(err, new(usageError)) {
			os.Exit(2)
		}
		if re := (restoreExit{}); errors.As(err, &re) {
			os.Exit(re.code)
		}
		os.Exit(1)
	}
}

// run is the whole program. ctx is cancelled by SIGINT or SIGTERM.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, getenv, stderr, nil)
	case "help", "-h", "-help", "--help":
		help(stdout)
		return nil
	case "version", "-version", "--version":
		fmt.Fprintf(stdout, "nah %s\ncommit %s\nbuilt %s\n%s %s/%s\n", version, commit, date, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return nil
	case "healthcheck":
		return healthcheck(ctx, getenv, stdout)
	case "joincode":
		return joincode(ctx, args, getenv, stdout, stderr)
	case "admin":
		return adminCmd(ctx, args, getenv, stdout, stderr)
	case "person":
		return personCmd(ctx, args, getenv, stdout, stderr)
	case "service":
		return service(args, getenv, stdout, stderr)
	case "restore":
		if isCheck(args) {
			return restoreCheckCmd(ctx, args, getenv, stdout, stderr)
		}
		return restoreCmd(ctx, args, getenv, stdout, stderr)
	default:
		return usageError{fmt.Sprintf("unknown command %q; try 'nah help'", cmd)}
	}
}

func help(w io.Writer) {
	fmt.Fprint(w, `nah: the server of a private family moments app.

Commands:
  nah serve                      run the server (the default)
  nah joincode create [-ttl D]   make a single-use sign-up code (default 168h)
  nah admin create               print a one-time link (valid an hour) that creates a console admin
  nah person import [-handle NEW] FILE.tar
                                 recreate a person from their export (made on another server) under
                                 a new id, and print a one-time link (valid 24h) that sets their
                                 password; a running server sees them only after a restart, so on
                                 a running server use the console's "Import a person" instead
  nah service [-user nah] [-env-file /etc/nah/nah.env] [-bin PATH]
                                 print a hardened systemd unit for this binary and NAH_DATA_DIR
                                 (else /var/lib/nah), with MemoryMax agreeing with NAH_MEMORY_LIMIT
  nah restore -from URL -to DIR [-time RFC3339] [-workers N]
                                 rebuild a whole data directory from a replica (a path, file:///path
                                 or s3://bucket/prefix, as NAH_REPLICA_URL) into a new or empty DIR:
                                 every database from its Litestream history, else from the newest
                                 sweep; -time restores the server as it was at that moment. Exit 3:
                                 some files came from a sweep older than their corrupt history;
                                 exit 1: some people have no sound copy (marked, listed by serve)
  nah restore -check -from URL -data DIR
                                 restore every database of the replica into a scratch folder and
                                 compare it with data directory DIR (the restore drill's check);
                                 exit 1 on any difference
  nah healthcheck                ask the server on NAH_ADDR for /healthz; exit 1 unless its status
                                 is ok (a container's health check: no shell needed)
  nah version                    print the version, commit, build date and Go version
  nah help                       this text

Configuration (environment variables, with their defaults):
`)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	for _, v := range variables {
		def := v.Default
		if def == "" {
			def = "(empty)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", v.Name, def, v.Meaning)
	}
	tw.Flush()
}

// setup reads the configuration and makes the logger, which the store's
// configuration gets too, so that serve and the subcommands open the store
// alike.
func setup(getenv func(string) string, stderr io.Writer) (config, *slog.Logger, error) {
	cfg, err := readConfig(getenv)
	if err != nil {
		return cfg, nil, usageError{err.Error()}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	cfg.Store.Logger = log
	cfg.Store.Version = version
	return cfg, log, nil
}

// serve runs the server until ctx is cancelled, then shuts down in order:
// stop accepting and finish in-flight requests (bounded by
// NAH_SHUTDOWN_TIMEOUT), then close the store, which checkpoints every file.
// With HTTPS the listener speaks TLS inside the connection bound, and a
// second one on NAH_HTTP_ADDR redirects plain HTTP (closed at return).
// ready, when not nil, receives the listening address.
func serve(ctx context.Context, getenv func(string) string, stderr io.Writer, ready chan<- string) error {
	cfg, log, err := setup(getenv, stderr)
	if err != nil {
		return err
	}
	// The head cache is a large, long-lived heap (58 MB for 10,000 people);
	// at the default GOGC of 100 the heap may grow to twice what is live
	// before a collection. 50 lowers people-10k's peak at the same feed
	// throughput (bench/THRESHOLDS.md, "GOGC 100" under "Tried and
	// dropped"). GOGC in the environment still wins.
	if getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	// The Go runtime's share of NAH_MEMORY_LIMIT (config.go's memory
	// plan): the collector works harder near it instead of letting the heap
	// outgrow the plan. GOMEMLIMIT in the environment still wins.
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(cfg.GoMemoryLimit)
	}
	start := time.Now()
	cfg.Store.Sweep = true // this process purges deleted people; tools do not
	repl, media, err := startReplication(ctx, &cfg, log)
	if err != nil {
		return err
	}
	s, err := store.Open(ctx, cfg.Store)
	if err != nil {
		if repl != nil {
			repl.Close(context.Background())
		}
		return err
	}
	// In this order: the store closes every file (and replication lets go
	// of each after it), then replication stops with a last sync of the
	// directory, whose WAL is emptied once Litestream let go of it.
	defer func() {
		if err := s.Close(); err != nil {
			log.Error("close store", "err", err)
		}
		if repl != nil {
			if err := repl.Close(context.Background()); err != nil {
				log.Error("stop replication", "err", err)
			}
			if err := store.CheckpointClosed(s.Path(nah.DirectoryRel)); err != nil {
				log.Error("checkpoint the directory", "err", err)
			}
		}
		log.Info("stopped")
	}()
	if repl != nil {
		bctx, stopBackups := context.WithCancel(ctx)
		b, stopped, err := startBackups(bctx, cfg, s, repl, media, log)
		if err != nil {
			stopBackups()
			return err
		}
		// On any return, an early error included: a sweep in progress ends
		// before the store closes.
		defer func() { stopBackups(); <-stopped }()
		cfg.App.Backups = b
	}
	// The digest loop, after the store opens; its deferred Stop runs
	// before the store's Close, once the server has stopped.
	digests, err := digest.New(cfg.Digest, s, log)
	if err != nil {
		return err
	}
	defer digests.Stop()
	cfg.App.Digests = digests
	s.OnKeyChange(digests.KeyChanged) // a client added or removed: push to the person's devices
	digests.Start()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return usageError{fmt.Sprintf("NAH_ADDR=%q: %v", cfg.Addr, err)}
	}
	cfg.App.PublicURLFromListen = cfg.App.PublicURL == "" && !cfg.App.TLS.Enabled()
	cfg.App.PublicURL = cfg.publicURL(ln.Addr().String())
	cfg.App.Version = version
	a := app.New(cfg.App, s, log)
	srv := app.NewServer(cfg.Addr, a, log)
	limited := a.LimitConnections(srv, ln, cfg.MaxConnections)
	var served net.Listener = limited
	httpListen := ""
	if cfg.App.TLS.Enabled() {
		if err := os.MkdirAll(cfg.App.TLS.CacheDir, 0o700); err != nil {
			return fmt.Errorf("the ACME cache: %w", err)
		}
		// TLS inside the connection bound: a handshake holds a slot.
		served = tls.NewListener(limited, a.TLSConfig())
		if cfg.HTTPAddr != "" {
			hln, err := net.Listen("tcp", cfg.HTTPAddr)
			if err != nil {
				return usageError{fmt.Sprintf("NAH_HTTP_ADDR=%q: %v", cfg.HTTPAddr, err)}
			}
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			hsrv := app.NewServer(cfg.HTTPAddr, a.RedirectHandler(port), log)
			go hsrv.Serve(a.LimitConnections(hsrv, hln, app.RedirectMaxConnections))
			defer hsrv.Close() // redirects are answered at once: nothing to drain
			httpListen = hln.Addr().String()
		}
	}
	cgroupMax, inCgroup := cgroupMemoryMax()
	log.Info("nah started", "version", version, "config", cfg, "listen", ln.Addr().String(), "http_listen", httpListen,
		"memory_limit", cfg.MemoryLimit, "cgroup_memory_max", cgroupReport(cgroupMax, inCgroup), "took", time.Since(start).Round(time.Millisecond))
	checkMemoryLimit(log, cfg.MemoryLimit, cgroupMax, inCgroup)
	checkCertificateFile(log, cfg.App.TLS.Certificate, time.Now())
	// After the redirect handler is made (autocert then offers HTTP-01
	// too), and after the start line, which its errors follow.
	go a.ObtainCertificates(ctx)
	if cfg.MetricsAddr != "" {
		mln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return usageError{fmt.Sprintf("NAH_METRICS_ADDR=%q: %v", cfg.MetricsAddr, err)}
		}
		msrv := app.NewServer(cfg.MetricsAddr, a.MetricsHandler(), log)
		mlimited := a.LimitConnections(msrv, mln, app.MetricsMaxConnections)
		go msrv.Serve(mlimited)
		defer msrv.Close()
		log.Info("metrics", "listen", mln.Addr().String())
	}
	if ready != nil {
		ready <- ln.Addr().String()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(served) }()
	// After serving starts: the link costs a directory write, and phones
	// need not wait for it.
	if n, err := s.Admins().Count(ctx); err != nil {
		log.Error("count admins", "err", err)
	} else if n == 0 {
		if link, err := app.SetupLink(ctx, s, cfg.App.PublicURL); err != nil {
			log.Error("make the first-admin link", "err", err)
		} else {
			// A one-time secret on the operator's terminal, valid an hour.
			fmt.Fprintf(stderr, "\nNo console admin yet. Open this link within the hour to create the first one:\n\n  %s\n\n", link)
		}
	}
	// Every start, so that whoever reads the log finds the console.
	log.Info("console", "url", strings.TrimSuffix(cfg.App.PublicURL, "/")+"/console")
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error("shutdown: requests still running were cut off", "err", err)
		srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func joincode(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "create" {
		return usageError{"usage: nah joincode create [-ttl 168h]"}
	}
	fs := flag.NewFlagSet("joincode create", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ttl := fs.Duration("ttl", 7*24*time.Hour, "how long the code can be used")
	if err := fs.Parse(args[1:]); err != nil || *ttl <= 0 {
		return usageError{"usage: nah joincode create [-ttl 168h]"}
	}
	return withStore(ctx, getenv, stderr, func(_ config, s *store.Store) error {
		code, jc, err := s.JoinCodes().Create(ctx, *ttl)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n(valid until %s; it works once)\n", code, time.UnixMilli(jc.ExpiresAt).UTC().Format(time.RFC3339))
		return nil
	})
}

// withStore runs fn on the store opened as serve opens it, for the
// subcommands that change it while the server may be running (SQLite's
// locks and the busy timeout make that safe).
func withStore(ctx context.Context, getenv func(string) string, stderr io.Writer, fn func(config, *store.Store) error) error {
	cfg, _, err := setup(getenv, stderr)
	if err != nil {
		return err
	}
	s, err := store.Open(ctx, cfg.Store)
	if err != nil {
		return err
	}
	if err := fn(cfg, s); err != nil {
		s.Close()
		return err
	}
	return s.Close()
}

func adminCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) != 1 || args[0] != "create" {
		return usageError{"usage: nah admin create"}
	}
	return withStore(ctx, getenv, stderr, func(cfg config, s *store.Store) error {
		link, err := app.SetupLink(ctx, s, cfg.publicURL(cfg.Addr))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Open this link within the hour to create a console admin (it works once):\n\n  %s\n", link)
		return nil
	})
}

const personImportUsage = "usage: nah person import [-handle NEW] FILE.tar"

// personCmd is `nah person import`. The person is written to the data
// directory; a server already running on it keeps its in-memory graph of
// people, loaded at start, and so does not see them until it restarts:
// the console's import form is the way on a running server.
func personCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "import" {
		return usageError{personImportUsage}
	}
	fs := flag.NewFlagSet("person import", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	handle := fs.String("handle", "", "the handle here, when the export's is taken")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 1 {
		return usageError{personImportUsage}
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	return withStore(ctx, getenv, stderr, func(cfg config, s *store.Store) error {
		res, err := s.ImportPerson(ctx, f, store.ImportOptions{Handle: *handle, MaxMomentBytes: cfg.App.MaxMomentBytes, MaxMediaBytes: cfg.App.MaxMediaBytes, QuotaBytes: cfg.App.QuotaBytes})
		var e *nah.Error
		if errors.As(err, &e) && e.Reason == "handle_taken" {
			return fmt.Errorf("%s (-handle NEW)", e.Message)
		}
		if err != nil {
			return err
		}
		markMediaWaiting(cfg, res.Person.ID)
		fmt.Fprintf(stdout, "Imported %s as %s with %d moments.\n", res.Person.Handle, res.Person.ID, res.Moments)
		fmt.Fprintf(stdout, "Give them this link to set their password (valid 24h, it works once):\n\n  %s\n\n",
			app.ResetLink(cfg.publicURL(cfg.Addr), res.Link))
		if len(res.Connections) == 0 {
			fmt.Fprintln(stdout, "None of their former connections has an account here.")
		} else {
			fmt.Fprintf(stdout, "Former connections with an account here (connections are not recreated: each asks again): %s\n", strings.Join(res.Connections, ", "))
		}
		fmt.Fprintln(stdout, "A server already running on this data directory sees them only after a restart.")
		return nil
	})
}
