package api

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/auth"
	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/metrics"
	"github.com/lanesmq/lanes/server/internal/spool"
)

// Keys of the maintenance switches in lanes.system_state.
const (
	pushMaintenanceKey = "maintenance.push"
	popMaintenanceKey  = "maintenance.pop"
)

// maintenanceRefresh is how stale a broker's view of another broker's switch may be.
const maintenanceRefresh = time.Second

// maintenance caches the two switches so the hot path reads memory; a read
// older than maintenanceRefresh starts one background refresh and answers the
// cached value meanwhile (kept as is while the database is down).
type maintenance struct {
	engine     *engine.Engine
	push, pop  atomic.Bool
	loadedAt   atomic.Int64 // unix nanos of the last successful read
	refreshing atomic.Bool
	mu         sync.Mutex // serializes writes with refreshes
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
	go func() {
		defer m.refreshing.Store(false)
		_ = m.refresh(context.Background())
	}()
}

// RunMaintenanceRefresh rereads the switches every half maintenanceRefresh
// until ctx ends, so an idle broker's first request after another broker
// turned maintenance on already sees it: the lazy refresh in maybeRefresh
// answers that request from the stale cache while it reads.
func (s *Server) RunMaintenanceRefresh(ctx context.Context) {
	tick := time.NewTicker(maintenanceRefresh / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			_ = s.maintenance.refresh(ctx)
		}
	}
}

func (m *maintenance) refresh(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	push, err := m.engine.SystemFlag(ctx, pushMaintenanceKey)
	if err != nil {
		return err
	}
	pop, err := m.engine.SystemFlag(ctx, popMaintenanceKey)
	if err != nil {
		return err
	}
	m.push.Store(push)
	m.pop.Store(pop)
	m.loadedAt.Store(time.Now().UnixNano())
	return nil
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

// storePush is the push path behind the handler: the token subject is stamped
// on every item; pushes go to the spool in push maintenance, while older
// spooled pushes are still draining (so nothing overtakes them in a
// partition), and when PostgreSQL cannot be reached.
func (s *Server) storePush(ctx context.Context, items []engine.PushItem) ([]engine.PushResult, error) {
	if sub := producerSub(ctx); sub != "" {
		for i := range items {
			items[i].ProducerSub = sub
		}
	}
	sp := s.opts.Spool
	if sp == nil && s.maintenance.pushEnabled() {
		// Push maintenance keeps writes off the database, and without a
		// spool there is nowhere else to put them.
		if err := engine.NormalizePushItems(items); err != nil {
			return nil, err
		}
		return s.failedPushes(items, "push maintenance is on and this broker has no disk spool"), nil
	}
	if sp != nil && (!s.schemaReady() || s.maintenance.pushEnabled() || sp.Pending() > 0) {
		if !s.schemaReady() {
			sp.MarkDBDown()
		}
		return s.spoolPush(items)
	}
	if sp != nil {
		// Minted before the database attempt, so a push that goes to the spool
		// after its commit landed unseen (the connection died before the
		// answer) is answered with the id it was stored under; the replay then
		// finds it by transaction id.
		for i := range items {
			if items[i].MessageID == uuid.Nil {
				items[i].MessageID = engine.NewMessageID()
			}
		}
	}
	pushCtx, cancel := context.WithTimeout(ctx, s.opts.PushTimeout)
	defer cancel()
	results, err := s.engine.Push(pushCtx, items)
	if err != nil && sp != nil && ctx.Err() == nil && spool.IsUnavailable(err) {
		s.log.Warn("database unreachable; push goes to the disk spool", "items", len(items), "err", err)
		sp.MarkDBDown()
		return s.spoolPush(items)
	}
	if err != nil {
		return nil, err
	}
	countPushVerdicts(s.metrics, results)
	return results, nil
}

// producerSub is the subject of the request's token, stamped on what it
// pushes (plain pushes, transaction pushes, timers); "" when auth is off.
func producerSub(ctx context.Context) string {
	if id := auth.FromContext(ctx); id != nil {
		return id.Subject
	}
	return ""
}

func (s *Server) spoolPush(items []engine.PushItem) ([]engine.PushResult, error) {
	if err := engine.NormalizePushItems(items); err != nil {
		return nil, err
	}
	// The answer's message ids travel with the records, so the drain stores
	// each message under the id this reply gives the client.
	for i := range items {
		if items[i].MessageID == uuid.Nil {
			items[i].MessageID = engine.NewMessageID()
		}
	}
	status, errText := engine.PushBuffered, ""
	if err := s.opts.Spool.Append(items); err != nil {
		s.log.Error("spool write failed; push answered failed", "items", len(items), "err", err)
		status, errText = engine.PushFailed, err.Error()
	}
	results := make([]engine.PushResult, len(items))
	for i, it := range items {
		results[i] = engine.PushResult{Index: i, MessageID: it.MessageID, TransactionID: it.TransactionID, Queue: it.Queue, Status: status, Error: errText}
	}
	s.metrics.CountPush(string(status), len(items))
	return results, nil
}

// failedPushes answers every item failed with reason, nothing stored.
func (s *Server) failedPushes(items []engine.PushItem, reason string) []engine.PushResult {
	results := make([]engine.PushResult, len(items))
	for i, it := range items {
		results[i] = engine.PushResult{Index: i, TransactionID: it.TransactionID, Queue: it.Queue, Status: engine.PushFailed, Error: reason}
	}
	s.metrics.CountPush(string(engine.PushFailed), len(items))
	return results
}

// PushMaintenance reports whether push maintenance is on (the spool drain pauses).
func (s *Server) PushMaintenance() bool { return s.maintenance.pushEnabled() }

// GetBufferStatus reports the disk spool.
func (s *Server) GetBufferStatus(ctx context.Context, _ gen.GetBufferStatusRequestObject) (gen.GetBufferStatusResponseObject, error) {
	out := gen.GetBufferStatus200JSONResponse{DbHealthy: true}
	if sp := s.opts.Spool; sp != nil {
		out.SpoolAvailable = true
		out.Pending, out.Failed, out.DbHealthy = int(sp.Pending()), int(sp.Failed()), sp.DBHealthy()
	}
	return out, nil
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

// countPushVerdicts counts a push's items by verdict: the usual all-queued
// push with one counter update, not a label lookup per item.
func countPushVerdicts(m *metrics.Metrics, results []engine.PushResult) {
	queued := 0
	for _, r := range results {
		if r.Status == engine.PushQueued {
			queued++
		} else {
			m.CountPush(string(r.Status), 1)
		}
	}
	if queued > 0 {
		m.CountPush(string(engine.PushQueued), queued)
	}
}
