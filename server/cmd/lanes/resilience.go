package main

import (
	"fmt"
	"log/slog"

	"github.com/lanesmq/lanes/server/internal/admission"
	"github.com/lanesmq/lanes/server/internal/auth"
	"github.com/lanesmq/lanes/server/internal/config"
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

// newVerifier returns nil when JWT auth is off.
func newVerifier(cfg *config.Config) (*auth.Verifier, error) {
	if !cfg.JWTEnabled {
		return nil, nil
	}
	v, err := auth.NewVerifier(auth.Config{
		Algorithm: cfg.JWTAlgorithm,
		Secret:    []byte(cfg.JWTSecret),
		PublicKey: cfg.JWTPublicKey,
		Issuer:    cfg.JWTIssuer,
		Audience:  cfg.JWTAudience,
	})
	if err != nil {
		return nil, fmt.Errorf("LANES_JWT_*: %w", err)
	}
	return v, nil
}

// openSpool opens the disk spool; the broker runs without one (pushes fail
// while the database is down) only if the directory cannot be used.
func openSpool(cfg *config.Config, push spool.PushFunc, paused func() bool, log *slog.Logger) *spool.Spool {
	sp, err := spool.Open(spool.Options{Dir: cfg.SpoolDir, Push: push, Paused: paused, Logger: log})
	if err != nil {
		log.Error("disk spool unavailable: pushes will fail while PostgreSQL is down", "dir", cfg.SpoolDir, "err", err)
		return nil
	}
	return sp
}
