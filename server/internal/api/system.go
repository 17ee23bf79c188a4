package api

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/failurelog"
)

// Keys of the maintenance switches in lanes.system_state.
const (
	pushMaintenanceKey = "maintenance.push"
	popMaintenanceKey  = "maintenance.pop"
)

// maintenanceRefresh is how stale a broker's view of another broker's switch may be.
const maintenanceRefresh = time.Second

// databaseReadFresh is how recent the last successful read of the switches
// must be for a broker without a spool to call the database healthy: the
// refresh loop reads twice a second, and a loaded machine may delay a read.
const databaseReadFresh = 3 * maintenanceRefresh

// maintenance caches the two switches so the hot path reads memory; a read
// older than maintenanceRefresh starts one background refresh and answers the
// cached value meanwhile (kept as is while the database is down).
type maintenance struct {
	engine     *engine.Engine
	push, pop  atomic.Bool
	loadedAt   atomic.Int64 // unix nanos of the last successful read
	readFailed atomic.Bool  // the last read that ended failed
	refreshing atomic.Bool
	mu         sync.Mutex // serializes writes with refreshes
	// readFailures logs the switches' reads failing (the database is
	// unreachable) and its return; requestFailures logs requests failing for
	// want of it, and starts over when a read succeeds again.
	readFailures, requestFailures *failurelog.Reporter
}

func newMaintenance(e *engine.Engine, log *slog.Logger) *maintenance {
	return &maintenance{
		engine:          e,
		readFailures:    failurelog.New(log, slog.LevelWarn, "database unreachable", "database reachable again"),
		requestFailures: failurelog.New(log, slog.LevelError, "database unavailable", ""),
	}
}

func (m *maintenance) pushEnabled() bool {
	m.maybeRefresh()
	return m.push.Load()
}

func (m *maintenance) popEnabled() bool {
	m.maybeRefresh()
	return m.pop.Load()
}

func (m *maintenance) maybeRefresh() {
	if time.Since(time.Unix(0, m.loadedAt.Load())) < maintenanceRefresh || !m.refreshing.CompareAndSwap(false, true) {
		return
	}
	// On the engine, so a shutdown stops it before the pool closes.
	if !m.engine.RunInBackground(m.refreshClaimed) {
		m.refreshing.Store(false)
	}
}

// RunMaintenanceRefresh rereads the switches every half maintenanceRefresh
// until ctx ends, so an idle broker's first request after another broker
// turned maintenance on already sees it: the lazy refresh in maybeRefresh
// answers that request from the stale cache while it reads. A read that
// succeeds also wakes a spool drain waiting for the database.
func (s *Server) RunMaintenanceRefresh(ctx context.Context) {
	tick := time.NewTicker(maintenanceRefresh / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.maintenance.refreshUnlessRunning(ctx)
			if sp := s.opts.Spool; sp != nil && s.maintenance.readRecently() {
				// The database answers again: a drain backing off starts now.
				sp.DatabaseAnswered()
			}
		}
	}
}

// refreshUnlessRunning refreshes, or returns at once while another refresh
// runs, so callers never queue behind a read of a stalled database.
func (m *maintenance) refreshUnlessRunning(ctx context.Context) {
	if m.refreshing.CompareAndSwap(false, true) {
		m.refreshClaimed(ctx)
	}
}

// refreshClaimed is the one refresh running, its claim on m.refreshing taken by the caller.
func (m *maintenance) refreshClaimed(ctx context.Context) {
	defer m.refreshing.Store(false)
	_ = m.refresh(ctx)
}

func (m *maintenance) refresh(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	push, pop, err := m.read(ctx)
	m.readFailed.Store(err != nil)
	if err != nil {
		if ctx.Err() == nil {
			m.readFailures.Failed(err)
		}
		return err
	}
	m.readFailures.Succeeded()
	m.requestFailures.Succeeded()
	m.push.Store(push)
	m.pop.Store(pop)
	m.loadedAt.Store(time.Now().UnixNano())
	return nil
}

func (m *maintenance) read(ctx context.Context) (push, pop bool, err error) {
	if push, err = m.engine.SystemFlag(ctx, pushMaintenanceKey); err != nil {
		return false, false, err
	}
	pop, err = m.engine.SystemFlag(ctx, popMaintenanceKey)
	return push, pop, err
}

// databaseReachable is the database's health as the switches' reads see it:
// the last one succeeded within databaseReadFresh. A fresh read costs the
// caller nothing; a stale one is read again here (SystemFlag bounds it), to
// the end even if the caller leaves, so a hang-up is not taken for an outage.
func (m *maintenance) databaseReachable(ctx context.Context) bool {
	if !m.readRecently() {
		m.refreshUnlessRunning(context.WithoutCancel(ctx))
	}
	return m.readRecently()
}

func (m *maintenance) readRecently() bool {
	return !m.readFailed.Load() && time.Since(time.Unix(0, m.loadedAt.Load())) < databaseReadFresh
}

func (m *maintenance) set(ctx context.Context, key string, enabled bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.engine.SetSystemFlag(ctx, key, enabled); err != nil {
		return err
	}
	if key == pushMaintenanceKey {
		m.push.Store(enabled)
	} else {
		m.pop.Store(enabled)
	}
	return nil
}

// PushMaintenance reports whether push maintenance is on (the spool drain pauses).
func (s *Server) PushMaintenance() bool { return s.maintenance.pushEnabled() }

// GetBufferStatus reports the disk spool and dbHealthy (see databaseHealthy).
func (s *Server) GetBufferStatus(ctx context.Context, _ gen.GetBufferStatusRequestObject) (gen.GetBufferStatusResponseObject, error) {
	sp := s.opts.Spool
	if sp == nil {
		return gen.GetBufferStatus200JSONResponse{DbHealthy: s.databaseHealthy(ctx)}, nil
	}
	return gen.GetBufferStatus200JSONResponse{SpoolAvailable: true, Pending: int(sp.Pending()), Failed: int(sp.Failed()), DbHealthy: s.databaseHealthy(ctx)}, nil
}

// databaseHealthy is dbHealthy and lanes_spool_db_healthy: databaseUp, and
// the spool (if any) has not found the database down since its last drain.
func (s *Server) databaseHealthy(ctx context.Context) bool {
	if sp := s.opts.Spool; sp != nil && !sp.DBHealthy() {
		return false
	}
	return s.databaseUp(ctx)
}

// databaseUp is lanes_db_healthy: what /health checks (the database answers,
// the schema is applied), from the maintenance switches' periodic read rather
// than a round trip per call, so an idle broker sees an outage too.
func (s *Server) databaseUp(ctx context.Context) bool {
	return s.schemaReady() && s.maintenance.databaseReachable(ctx)
}

// GetPushMaintenance answers the push maintenance switch as this broker sees it.
func (s *Server) GetPushMaintenance(ctx context.Context, _ gen.GetPushMaintenanceRequestObject) (gen.GetPushMaintenanceResponseObject, error) {
	_ = s.maintenance.refresh(ctx)
	return gen.GetPushMaintenance200JSONResponse{Enabled: s.maintenance.push.Load()}, nil
}

// SetPushMaintenance turns push maintenance on or off for every broker.
func (s *Server) SetPushMaintenance(ctx context.Context, req gen.SetPushMaintenanceRequestObject) (gen.SetPushMaintenanceResponseObject, error) {
	if err := s.maintenance.set(ctx, pushMaintenanceKey, req.Body.Enabled); err != nil {
		return nil, err
	}
	s.log.Info("push maintenance switched", "enabled", req.Body.Enabled)
	return gen.SetPushMaintenance200JSONResponse{Enabled: req.Body.Enabled}, nil
}

// GetPopMaintenance answers the pop maintenance switch as this broker sees it.
func (s *Server) GetPopMaintenance(ctx context.Context, _ gen.GetPopMaintenanceRequestObject) (gen.GetPopMaintenanceResponseObject, error) {
	_ = s.maintenance.refresh(ctx)
	return gen.GetPopMaintenance200JSONResponse{Enabled: s.maintenance.pop.Load()}, nil
}

// SetPopMaintenance turns pop maintenance on or off for every broker.
func (s *Server) SetPopMaintenance(ctx context.Context, req gen.SetPopMaintenanceRequestObject) (gen.SetPopMaintenanceResponseObject, error) {
	if err := s.maintenance.set(ctx, popMaintenanceKey, req.Body.Enabled); err != nil {
		return nil, err
	}
	s.log.Info("pop maintenance switched", "enabled", req.Body.Enabled)
	return gen.SetPopMaintenance200JSONResponse{Enabled: req.Body.Enabled}, nil
}
