// Command lanes runs the Lanes broker.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/api"
	"github.com/lanesmq/lanes/server/internal/auth"
	"github.com/lanesmq/lanes/server/internal/config"
	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/metrics"
	"github.com/lanesmq/lanes/server/internal/spool"
)

// version is stamped by the build (-ldflags "-X main.version=…").
var version = "dev"

func main() {
	// Asked for, the usage goes to stdout ("lanes --help | grep SPOOL");
	// after a bad flag, to stderr with the error.
	var usage bytes.Buffer
	cfg, err := config.Load(os.Args[1:], os.Getenv, &usage)
	if errors.Is(err, flag.ErrHelp) {
		_, _ = os.Stdout.Write(usage.Bytes())
		return
	}
	if errors.Is(err, config.ErrVersion) {
		fmt.Println("lanes", version)
		return
	}
	_, _ = os.Stderr.Write(usage.Bytes())
	if err != nil {
		fmt.Fprintln(os.Stderr, "lanes:", err)
		os.Exit(2)
	}
	log := newLogger(cfg, os.Stderr)
	if unknown := config.UnknownVariables(os.Environ()); len(unknown) > 0 {
		log.Warn("environment variables named LANES_* that are no setting are ignored; check their spelling against lanes --help",
			"variables", strings.Join(unknown, ","))
	}
	if err := run(cfg, log); err != nil {
		log.Error("lanes stopped", "err", err)
		if errors.As(err, new(unusableSetting)) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// unusableSetting is a setting config accepted that the part it configures
// cannot use (a JWT key, the database URL): the broker exits with status 2,
// as for a setting config refuses, since restarting it cannot help.
type unusableSetting struct{ err error }

func (u unusableSetting) Error() string { return u.err.Error() }
func (u unusableSetting) Unwrap() error { return u.err }

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // config admits only slog's four level names
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationAsText}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// httpErrorLog carries what net/http logs itself (a status written twice, a
// panic it recovered, an accept error: each a server fault) into the broker's
// log at ERROR; its default, a bare line on stderr, has no level to alert on
// and breaks LANES_LOG_FORMAT=json.
func httpErrorLog(log *slog.Logger) *stdlog.Logger {
	return slog.NewLogLogger(log.Handler(), slog.LevelError)
}

// durationAsText logs a time.Duration as "200ms" rather than JSON's nanoseconds.
func durationAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// tuneGC applies the broker's GC defaults where the standard GOGC and
// GOMEMLIMIT variables do not say otherwise. A broker's live heap is small
// (tens of MB) and churns fast, so a higher GC target saves CPU (about 15 %
// more push throughput measured), while the soft limit keeps the grown heap
// bounded.
func tuneGC(cfg *config.Config) {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(cfg.GCPercent)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set && cfg.MemoryLimitMiB > 0 {
		debug.SetMemoryLimit(int64(cfg.MemoryLimitMiB) << 20)
	}
}

func run(cfg *config.Config, log *slog.Logger) error {
	tuneGC(cfg)
	// The first signal starts the shutdown; a second one hurries it (see shutdown).
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(signals)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		select {
		case <-signals:
			stop()
		case <-ctx.Done():
		}
	}()

	pool, poolWatch, err := openPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	loopsCtx, stopLoops := context.WithCancel(context.Background())
	defer stopLoops()
	b, err := wire(cfg, log, pool, poolWatch, loopsCtx)
	if err != nil {
		return err
	}
	if err := b.schema.bringUp(ctx, loopsCtx, pool, cfg, log); err != nil {
		return err
	}
	b.eng.StartListener()
	handler, err := b.srv.Handler()
	if err != nil {
		return err
	}
	if cfg.TestFaults {
		log.Warn("test fault scripts are ON (LANES_TEST_FAULTS): /__test/faults can script any response; never run this in production")
	}
	if cfg.PprofAddr != "" {
		// Bound here, not in its goroutine: profiles asked for and not served
		// stop the boot as the broker's own port does, instead of a WARN
		// after a line that said they were served.
		pprofListener, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.PprofAddr)
		if err != nil {
			return fmt.Errorf("LANES_PPROF_ADDR (--pprof-addr): %w", err)
		}
		defer pprofListener.Close()
		go servePprof(pprofListener, log)
	}
	addr := net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.Port))
	running := &inFlight{}
	// Bodies get their own deadline (BodyReadTimeout, in limitBody): a server-wide
	// ReadTimeout would also cut long-poll pops. IdleTimeout closes keep-alive
	// connections nobody uses, past the 90 s clients such as Go's keep them.
	httpServer := &http.Server{Addr: addr, Handler: running.wrap(handler), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		ErrorLog: httpErrorLog(log), ConnContext: api.ConnContext}
	// Parked long polls are released as shutdown begins (net/http runs this
	// once the listeners are closed) so they answer 204 instead of holding it;
	// pops that arrive later do not park.
	httpServer.RegisterOnShutdown(b.eng.ReleaseParkedPops)
	listener, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("LANES_BIND_ADDR, LANES_PORT (--bind-addr, --port): %w", err)
	}
	// The bound port with the configured address (0.0.0.0 rather than Go's [::]).
	listenURL := "http://" + net.JoinHostPort(cfg.BindAddr, strconv.Itoa(listener.Addr().(*net.TCPAddr).Port))
	// The broker's own schema version: "unchanged" alone would not say which.
	schemaVersion, _ := engine.SchemaVersion() // fails only for a misnamed embedded file, which the boot refuses
	log.Info("configuration", append(cfg.LogAttrs(), "listenURL", listenURL, "schema", b.schema.outcome,
		"schemaVersion", schemaVersion, "version", version)...)
	log.Info("lanes listening", "url", listenURL, "version", version)
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpServer.Serve(api.JSONProtocolErrors(listener)) }()

	select {
	case err := <-serveErr:
		return err
	case err := <-b.refused:
		log.Error("the database no longer admits this broker's version; shutting down", "err", err)
		return errors.Join(err, b.shutdown(httpServer, running, stopLoops, signals, cfg, log))
	case <-ctx.Done():
	}
	return b.shutdown(httpServer, running, stopLoops, signals, cfg, log)
}

// openPool opens the PostgreSQL pool with the broker's session settings; the
// engine learns from poolWatch when a new connection meets a restarted server.
func openPool(ctx context.Context, cfg *config.Config) (pool *pgxpool.Pool, poolWatch *engine.PoolWatch, err error) {
	poolCfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, nil, unusableSetting{fmt.Errorf("LANES_DATABASE_URL: %w", err)}
	}
	poolCfg.MaxConns = int32(cfg.PoolSize)
	poolWatch = engine.ConfigurePool(poolCfg)
	// The broker's statements are short and index-driven; JIT compilation only adds latency to them.
	poolCfg.ConnConfig.RuntimeParams["jit"] = "off"
	// Every statement of the broker has a server-side deadline too.
	if cfg.StatementTimeout > 0 {
		poolCfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(cfg.StatementTimeout.Milliseconds(), 10)
	}
	pool, err = pgxpool.NewWithConfig(ctx, poolCfg)
	return pool, poolWatch, err
}

// brokerParts is the engine, spool and HTTP layer run starts and shutdown stops.
type brokerParts struct {
	eng    *engine.Engine
	sp     *spool.Spool // nil without a spool
	srv    *api.Server
	schema *schemaGate
	auth   *auth.Verifier // nil with auth off
	// refused carries the error that stops a serving broker whose version the
	// database no longer admits (engine.BrokerTooOldError).
	refused chan error
}

// refuse stops the serving broker with err; a second call adds nothing.
func (b *brokerParts) refuse(err error) {
	select {
	case b.refused <- err:
	default:
	}
}

// wire builds the broker on pool. The loops that need the schema start on
// loopsCtx once it is applied; until then the broker serves (pushes spool,
// /health answers 503).
func wire(cfg *config.Config, log *slog.Logger, pool *pgxpool.Pool, poolWatch *engine.PoolWatch, loopsCtx context.Context) (*brokerParts, error) {
	verifier, err := newVerifier(cfg, log)
	if err != nil {
		return nil, err
	}
	warnShortJWTSecret(cfg, log)
	warnSkipPathPrefixes(cfg, log)
	warnUnusedJWTSettings(cfg, log)
	admit := newAdmission(cfg)
	reg := metrics.New()
	eng := engine.New(pool, engine.Config{
		OnRetentionPass:         api.RetentionObserver(reg, log),
		AdmitPopCheck:           admit.Pop.Acquire,
		AdmitPopRecheck:         admit.Pop.TryAcquire,
		ParkedRecheckRate:       cfg.ParkedRecheckRate,
		PopMaxBytes:             cfg.PopMaxBytes,
		PushCommitters:          cfg.PushCommitters,
		AckSyncCommit:           cfg.AckSyncCommit,
		DefaultSubscriptionMode: cfg.DefaultSubscriptionMode,
		PopAutopilot:            cfg.PopAutopilot,
		ListMaxBytes:            cfg.ListMaxBytes,
		ListenerCheckInterval:   cfg.ListenerCheckInterval,
		PoolWatch:               poolWatch,
		// Once the boot's first attempt was not refused: a refused boot
		// logs its one line, not the listener's warning first.
		ListenLater: true,
		// Twice the statement_timeout: PostgreSQL ends a slow claim first.
		ClaimTimeout: 2 * cfg.StatementTimeout,
		Logger:       log,
	})
	refusals := &loginRefusalLog{log: log, databaseURL: cfg.RedactedDatabaseURL()}
	b := &brokerParts{eng: eng, schema: &schemaGate{refusals: refusals}, auth: verifier, refused: make(chan error, 1)}
	b.schema.refuse = b.refuse
	b.sp = openSpool(cfg, eng.ReplayPush, func() bool { return b.srv != nil && b.srv.PushMaintenance() }, log)
	b.srv = api.NewServer(eng, api.Options{
		Version: version, MaxBodyBytes: cfg.MaxBodyBytes, Logger: log,
		Admission: admit, BodyBudget: newBodyBudget(cfg), Spool: b.sp, Auth: verifier, PushTimeout: cfg.PushTimeout,
		TestFaults: cfg.TestFaults, Metrics: reg, Limits: limitsOf(cfg), DBTimeout: cfg.RequestDBTimeout,
		BodyReadTimeout: cfg.BodyReadTimeout, SchemaReady: b.schema.ready.Load, SchemaState: b.schema.schemaState,
	})
	b.schema.start = func() {
		eng.StartRetention(cfg.RetentionInterval)
		eng.StartTimers(cfg.TimersInterval)
		eng.StartKVSweeper(cfg.KVSweepInterval)
		if b.sp != nil {
			b.sp.MarkDBUp()
			go b.sp.Run(loopsCtx)
		}
		go b.srv.RunLagCollector(loopsCtx, cfg.LagRefreshInterval, cfg.LagMaxSeries)
		go b.srv.RunMaintenanceRefresh(loopsCtx)
		go watchMinBrokerVersion(loopsCtx, pool, minVersionCheckInterval, b.schema.noteRead, refusals, b.refuse)
	}
	// Until the database answers, the spool's dbHealthy (status/buffers, metrics) says it is down.
	b.schema.unreachable = func() {
		if b.sp != nil {
			b.sp.MarkDBDown()
		}
	}
	return b, nil
}

// shutdown stops taking requests, waits up to cfg.ShutdownTimeout for the
// running ones (or until another signal arrives on hurry), then stops the
// loops (stopLoops), the spool and the engine, whose group commits get what
// is left of the timeout plus giveBackGrace (nothing after another signal).
// The worst case is the timeout plus giveBackGrace.
func (b *brokerParts) shutdown(httpServer *http.Server, running *inFlight, stopLoops context.CancelFunc, hurry <-chan os.Signal, cfg *config.Config, log *slog.Logger) error {
	log.Info("shutting down: no new requests; finishing in-flight ones (a second signal cuts them)", "timeout", cfg.ShutdownTimeout, "running", running.n.Load())
	budget := cfg.ShutdownTimeout + giveBackGrace
	// Past the budget nothing left to do can lose an answered message (an
	// answered push is committed or in the fsynced spool), but closing the
	// connections to a database host that stopped answering takes pgxpool up
	// to 15 s each: exit then rather than past the grace period the
	// orchestrator was told to allow. forcedExitSlack lets the cancellations
	// the budget itself triggers (group commits, cut requests) finish and
	// log first. Never stopped: it only matters while the process still runs.
	time.AfterFunc(budget+forcedExitSlack, func() {
		log.Error("shutdown budget spent while closing the database connections; exiting without waiting for them", "budget", budget)
		os.Exit(1)
	})
	budgetCtx, cancelBudget := context.WithTimeout(context.Background(), budget)
	defer cancelBudget()
	shutdownCtx, cancel := context.WithTimeout(budgetCtx, cfg.ShutdownTimeout)
	defer cancel()
	go func() {
		select {
		case sig := <-hurry:
			log.Warn("second signal: not waiting for the in-flight requests and group commits any longer", "signal", sig.String())
			cancelBudget()
		case <-budgetCtx.Done():
		}
	}()
	err := httpServer.Shutdown(shutdownCtx)
	if err != nil {
		// Past the timeout, the remaining connections are cut: their requests
		// see their clients gone, so a pop whose claim is still in flight gives
		// it back. That needs the engine, so it closes after them.
		log.Warn("closing the connections of the requests still running", "running", running.n.Load())
		_ = httpServer.Close()
		if !running.waitIdle(giveBackGrace) {
			log.Warn("requests still running after the shutdown grace; their claims free at lease expiry", "running", running.n.Load())
		}
	}
	stopLoops()
	b.schema.close()
	if b.auth != nil {
		b.auth.Close()
	}
	if b.sp != nil {
		_ = b.sp.Close()
		if n := b.sp.Pending(); n > 0 {
			log.Warn("spooled pushes not yet drained; they drain at the next start", "pending", n, "dir", b.sp.Dir())
		}
	}
	b.eng.Shutdown(budgetCtx)
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped cleanly")
	return nil
}

// forcedExitSlack is how long past its budget a shutdown still stuck (on a
// silent database host) runs before the process exits anyway.
const forcedExitSlack = time.Second

// servePprof exposes profiles on a separate, opt-in listener.
func servePprof(listener net.Listener, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: httpErrorLog(log)}
	log.Info("pprof listening", "addr", listener.Addr().String())
	if err := srv.Serve(listener); err != nil && !errors.Is(err, net.ErrClosed) {
		log.Warn("pprof stopped", "err", err)
	}
}
