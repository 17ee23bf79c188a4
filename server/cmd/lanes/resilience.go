package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/admission"
	"github.com/lanesmq/lanes/server/internal/api"
	"github.com/lanesmq/lanes/server/internal/auth"
	"github.com/lanesmq/lanes/server/internal/config"
	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/failurelog"
	"github.com/lanesmq/lanes/server/internal/spool"
)

// newAdmission sizes the budgets; pop and ack default to the pool size since
// each of their checks holds one connection.
func newAdmission(cfg *config.Config) *admission.Controller {
	orPool := func(n int) int {
		if n > 0 {
			return n
		}
		return max(cfg.PoolSize, 1)
	}
	limits := func(inFlight int) admission.Limits {
		return admission.Limits{InFlight: inFlight, Waiting: cfg.AdmissionMaxWaiting, MaxWait: cfg.AdmissionMaxWait}
	}
	return &admission.Controller{
		Push:    admission.NewClass("push", limits(cfg.AdmissionPushInFlight)),
		Pop:     admission.NewClass("pop", limits(orPool(cfg.AdmissionPopInFlight))),
		Ack:     admission.NewClass("ack", limits(orPool(cfg.AdmissionAckInFlight))),
		Clients: admission.NewClientLimiter(cfg.RateLimitPerClient, cfg.RateLimitBurst),
	}
}

// clientBodyShareDivisor: one client may hold a quarter of the body budget,
// or one body of the largest size if that is more (else it could never send one).
const clientBodyShareDivisor = 4

// newBodyBudget bounds the request body bytes held at once, and those of any
// one client; a body waits for room as long as a request waits for an
// admission slot.
func newBodyBudget(cfg *config.Config) *admission.ByteBudget {
	share := max(cfg.MaxBodyBytes, cfg.MaxInflightBodyBytes/clientBodyShareDivisor)
	return admission.NewByteBudget(cfg.MaxInflightBodyBytes, cfg.AdmissionMaxWait).LimitPerClient(share)
}

// newVerifier returns nil when JWT auth is off.
func newVerifier(cfg *config.Config, log *slog.Logger) (*auth.Verifier, error) {
	if !cfg.JWTEnabled {
		return nil, nil
	}
	v, err := auth.NewVerifier(auth.Config{
		Algorithm: cfg.JWTAlgorithm,
		Secret:    []byte(cfg.JWTSecret),
		PublicKey: cfg.JWTPublicKey,
		Issuer:    cfg.JWTIssuer,
		Audience:  cfg.JWTAudience,
		Leeway:    cfg.JWTLeeway,
		// Without the requirement a token lacking exp never expires.
		AllowNoExpiry:         !cfg.JWTRequireExp,
		JWKSURLs:              cfg.JWTJWKSURLs,
		JWKSRefresh:           cfg.JWTJWKSRefresh,
		JWKSUnknownKIDRefresh: cfg.JWTJWKSUnknownKIDRefresh,
		JWKSTimeout:           cfg.JWTJWKSTimeout,
		Logger:                log,
		RoleClaims:            cfg.JWTRoleClaims,
		RoleNames:             cfg.JWTRoleNames,
		SkipPaths:             cfg.JWTSkipPaths,
	})
	if err != nil {
		return nil, unusableSetting{fmt.Errorf("LANES_JWT_*: %w", err)}
	}
	return v, nil
}

// minHMACSecretBytes is the shortest HMAC key RFC 7518 §3.2 allows for HS256
// (the hash's output size; HS384 and HS512 ask for 48 and 64).
const minHMACSecretBytes = 32

// warnShortJWTSecret logs a warning, without refusing to start, when JWT auth
// verifies HMAC tokens with a secret shorter than RFC 7518 allows: a short
// secret can be brute-forced from any one token.
func warnShortJWTSecret(cfg *config.Config, log *slog.Logger) {
	if cfg.JWTEnabled && cfg.JWTSecret != "" && len(cfg.JWTSecret) < minHMACSecretBytes {
		log.Warn("LANES_JWT_SECRET is shorter than 32 bytes, the minimum RFC 7518 sets for HS256 (48 for HS384, 64 for HS512): "+
			"tokens signed with it can be forged by guessing it; use a longer random secret", "minBytes", minHMACSecretBytes)
	}
}

// warnUnusedJWTSettings logs a warning when JWT keys or claims are set but
// LANES_JWT_ENABLED is off: no request is authenticated, which the operator
// who set a secret may not expect.
func warnUnusedJWTSettings(cfg *config.Config, log *slog.Logger) {
	if unused := cfg.UnusedJWTSettings(); len(unused) > 0 {
		log.Warn("JWT settings are set but LANES_JWT_ENABLED is false: they are ignored and no request needs a token; set LANES_JWT_ENABLED=true to require one",
			"settings", strings.Join(unused, ","))
	}
}

// warnSkipPathPrefixes logs each LANES_JWT_SKIP_PATHS entry that opens a
// whole subtree, so an entry such as /api/ cannot open the API unnoticed.
func warnSkipPathPrefixes(cfg *config.Config, log *slog.Logger) {
	if !cfg.JWTEnabled {
		return
	}
	for _, p := range cfg.JWTSkipPaths {
		if p != "/" && strings.HasSuffix(p, "/") {
			log.Warn("LANES_JWT_SKIP_PATHS: every path under this entry needs no token", "prefix", p)
		}
	}
}

// spoolMinBatchBytes is the least a drain batch may carry in bytes, whatever
// LANES_MAX_BODY_BYTES says.
const spoolMinBatchBytes = 4 << 20

// openSpool opens the disk spool; the broker runs without one (pushes fail
// while the database is down) only if the directory cannot be used.
func openSpool(cfg *config.Config, push spool.PushFunc, paused func() bool, log *slog.Logger) *spool.Spool {
	sp, err := spool.Open(spool.Options{
		Dir: cfg.SpoolDir, Push: push, Paused: paused, Logger: log,
		// A batch fits one push body of the largest accepted size.
		MaxBatchBytes: max(cfg.MaxBodyBytes, spoolMinBatchBytes),
		ReplayTimeout: cfg.SpoolReplayTimeout, MaxBytes: cfg.SpoolMaxBytes,
	})
	if err != nil {
		log.Error("disk spool unavailable: pushes will fail while PostgreSQL is down or push maintenance is on; "+
			"set LANES_SPOOL_DIR to a directory this broker can create and write", "dir", cfg.SpoolDir, "err", err)
		return nil
	}
	return sp
}

// limitsOf is the request caps of the configuration.
func limitsOf(cfg *config.Config) api.Limits {
	return api.Limits{
		MaxPushItems: cfg.MaxPushItems, MaxAckItems: cfg.MaxAckItems,
		MaxTxnOperations: cfg.MaxTxnOperations, MaxPopBatch: cfg.MaxPopBatch,
	}
}

// schemaAttemptTimeout bounds one schema attempt (an unreachable host would
// otherwise hang on the TCP connect).
const schemaAttemptTimeout = 10 * time.Second

// minVersionCheckTimeout bounds the boot's read of the minimum broker version
// with LANES_APPLY_SCHEMA=false, which otherwise does no database work at boot.
const minVersionCheckTimeout = 2 * time.Second

// schemaGate applies the schema at boot without making the broker wait for
// PostgreSQL: the first attempt runs before the listener opens; if it fails,
// the broker serves anyway (ready stays false: pushes spool, /health is 503)
// and a background loop retries with backoff until it succeeds, then runs
// start (the loops that need the schema, the spool drain among them).
// A database that admits only later broker versions (engine.BrokerTooOldError)
// is no failure to retry: the broker stops, through refuse once it serves.
type schemaGate struct {
	ready atomic.Bool
	// outcome is what the boot attempt did: applied, unchanged, newer (a later
	// version's schema is recorded, which holds this one's), skipped
	// (LANES_APPLY_SCHEMA=false) or retrying (the database did not answer).
	outcome string
	start   func()
	// unreachable runs when the first attempt fails, before the listener opens.
	unreachable func()
	// refuse stops the serving broker with its error.
	refuse func(error)
	// refusals logs the serving broker's login refusals.
	refusals *loginRefusalLog
	// lastRead is what the database last said of its schema (nil: nothing
	// yet), kept for /health while the database is down.
	lastRead atomic.Pointer[engine.SchemaState]
	mu       sync.Mutex
	closed   bool
}

// noteRead keeps a read of the database's schema state for /health.
func (g *schemaGate) noteRead(state engine.SchemaState) { g.lastRead.Store(&state) }

// schemaState is the last read of the database's schema state; false before one.
func (g *schemaGate) schemaState() (engine.SchemaState, bool) {
	if state := g.lastRead.Load(); state != nil {
		return *state, true
	}
	return engine.SchemaState{}, false
}

// bringUp returns an *engine.BrokerTooOldError when the database admits no
// broker of this version: the broker must not start.
func (g *schemaGate) bringUp(ctx, bg context.Context, pool *pgxpool.Pool, cfg *config.Config, log *slog.Logger) error {
	if !cfg.ApplySchema {
		// A database that does not answer yet is checked by the periodic read.
		cctx, cancel := context.WithTimeout(ctx, minVersionCheckTimeout)
		state, err := engine.ReadSchemaState(cctx, pool)
		cancel()
		if tooOld := (*engine.BrokerTooOldError)(nil); errors.As(err, &tooOld) {
			return err
		}
		if refused := loginRefusal(cfg, err); refused != nil {
			return refused
		}
		if err == nil {
			g.noteRead(state)
		}
		g.outcome = "skipped"
		g.markReady()
		return nil
	}
	attempt := func() (engine.SchemaOutcome, error) {
		actx, cancel := context.WithTimeout(ctx, schemaAttemptTimeout)
		defer cancel()
		return engine.ApplySchemaOutcome(actx, pool)
	}
	done, err := attempt()
	if tooOld := (*engine.BrokerTooOldError)(nil); errors.As(err, &tooOld) {
		return err
	}
	if refused := loginRefusal(cfg, err); refused != nil {
		return refused
	}
	if err == nil {
		switch {
		case done.Applied:
			g.outcome = "applied"
		case done.Newer():
			g.outcome = "newer"
			log.Info("the database's schema is a later version's, which holds this broker's: applying nothing",
				"recordedVersion", done.Recorded, "schemaVersion", done.Version)
		default:
			g.outcome = "unchanged"
		}
		g.noteRead(done.State)
		logMinBrokerVersion(done, log)
		g.markReady()
		return nil
	}
	g.outcome = "retrying"
	if g.unreachable != nil {
		g.unreachable()
	}
	log.Warn("database not ready; serving without it (pushes go to the disk spool, /health answers 503) and retrying the schema in the background", "err", err)
	go func() {
		wait := 250 * time.Millisecond
		maxWait := max(cfg.SchemaRetryMax, 250*time.Millisecond)
		// An outage at boot retries every maxWait for as long as it lasts: its
		// lines follow the rule of every repeating failure, not one per attempt.
		// The success line below says when it ended, so the reporter logs none.
		retries := failurelog.New(log, slog.LevelWarn, "database still not ready; retrying", "")
		for attempts := 1; ; attempts++ {
			select {
			case <-ctx.Done():
				return
			case <-bg.Done():
				return
			case <-time.After(wait):
			}
			done, err := attempt()
			if tooOld := (*engine.BrokerTooOldError)(nil); errors.As(err, &tooOld) {
				g.refuse(err)
				return
			}
			g.refusals.note(err)
			if err == nil {
				log.Info("schema applied; database work resumes and the spool drains", "attempts", attempts+1)
				g.noteRead(done.State)
				logMinBrokerVersion(done, log)
				g.markReady()
				return
			}
			wait = min(wait*2, maxWait)
			retries.Failed(err, "retryIn", wait)
		}
	}()
	return nil
}

// loginRefusal is the boot's error when PostgreSQL answers but refuses the
// database, role or password of LANES_DATABASE_URL: a setting to fix, not an
// outage to wait out, so the broker stops (exit status 2) rather than serve
// and spool. Nil for any other err.
func loginRefusal(cfg *config.Config, err error) error {
	pgErr, ok := engine.LoginRefused(err)
	if !ok {
		return nil
	}
	return unusableSetting{fmt.Errorf("LANES_DATABASE_URL (--database-url) %s: PostgreSQL refuses the connection (SQLSTATE %s: %s): "+
		"check the database name, role and password in it and pg_hba.conf; waiting will not help", cfg.RedactedDatabaseURL(), pgErr.Code, pgErr.Message)}
}

// loginRefusalLog logs, at ERROR and once until a read succeeds again, that
// PostgreSQL refuses the login of LANES_DATABASE_URL while the broker serves:
// the broker keeps retrying (a dropped database or role, a changed password
// can be undone), but the outage's WARN lines would not say what to fix.
type loginRefusalLog struct {
	log         *slog.Logger
	databaseURL string // redacted
	logged      atomic.Bool
}

// note takes the outcome of one database read; nil ends the episode.
func (l *loginRefusalLog) note(err error) {
	if l == nil {
		return
	}
	if err == nil {
		l.logged.Store(false)
		return
	}
	pgErr, ok := engine.LoginRefused(err)
	if !ok || !l.logged.CompareAndSwap(false, true) {
		return
	}
	l.log.Error("PostgreSQL refuses the login of LANES_DATABASE_URL (--database-url): check its database name, role and password and pg_hba.conf; "+
		"pushes go to the disk spool and the broker retries until it is admitted", "databaseURL", l.databaseURL, "sqlstate", pgErr.Code, "err", pgErr.Message)
}

// logMinBrokerVersion logs a boot that raised the oldest broker version the
// database admits: older brokers (from 140 on) stop or refuse to start.
func logMinBrokerVersion(done engine.SchemaOutcome, log *slog.Logger) {
	// On a new database (no schema recorded before) no broker ran to be shut
	// out: the line would only alarm whoever installs Lanes.
	if done.RaisedMinBrokerVersion() && done.Recorded > 0 {
		log.Info("raised the oldest broker schema version this database admits; brokers below it (from schema version 140 on) refuse to start, and running ones stop",
			"minBrokerVersion", done.MinBrokerVersion, "was", done.MinBrokerVersionWas, "schemaVersion", done.Version)
	}
}

// minVersionCheckInterval is how often a running broker reads the minimum
// broker version, so it stops soon after a later version raised it past it.
const minVersionCheckInterval = time.Second

// watchMinBrokerVersion reads the database's minimum broker version and
// schema record every interval until ctx ends, hands each read to note (for
// /health) and its error to refusals, and calls refuse once the minimum is
// above this broker's version. A read that fails is left to the next one:
// outages are logged elsewhere.
func watchMinBrokerVersion(ctx context.Context, pool *pgxpool.Pool, interval time.Duration, note func(engine.SchemaState), refusals *loginRefusalLog, refuse func(error)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, interval+minVersionCheckTimeout)
		state, err := engine.ReadSchemaState(cctx, pool)
		cancel()
		if !state.ReadAt.IsZero() {
			note(state)
		}
		refusals.note(err)
		if tooOld := (*engine.BrokerTooOldError)(nil); errors.As(err, &tooOld) {
			refuse(err)
			return
		}
	}
}

func (g *schemaGate) markReady() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	g.ready.Store(true)
	if g.start != nil {
		g.start()
	}
}

// close stops a later markReady from starting anything (shutdown is under way).
func (g *schemaGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
}
