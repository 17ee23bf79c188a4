package api

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/procfs"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/auth"
	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/failurelog"
	"github.com/lanesmq/lanes/server/internal/metrics"
)

// registerGauges exposes, at scrape time, the numbers other parts own.
func (s *Server) registerGauges() {
	m := s.metrics
	boolGauge := func(f func() bool) func() float64 {
		return func() float64 {
			if f() {
				return 1
			}
			return 0
		}
	}
	if pool := s.engine.Pool(); pool != nil {
		m.Gauge("lanes_db_pool_max_connections", "Pool size (LANES_DB_POOL_SIZE).", nil, func() float64 { return float64(pool.Stat().MaxConns()) })
		m.Gauge("lanes_db_pool_acquired_connections", "Connections in use.", nil, func() float64 { return float64(pool.Stat().AcquiredConns()) })
		m.Gauge("lanes_db_pool_idle_connections", "Idle connections.", nil, func() float64 { return float64(pool.Stat().IdleConns()) })
		m.Counter("lanes_db_pool_empty_acquires_total", "Acquires that had to wait for a connection.", nil, func() float64 { return float64(pool.Stat().EmptyAcquireCount()) })
	}
	if a := s.opts.Admission; a != nil {
		for _, c := range a.Classes() {
			l := prometheus.Labels{"class": c.Name()}
			m.Gauge("lanes_admission_budget", "Concurrent database slots of the class.", l, func() float64 { return float64(c.Stats().Budget) })
			m.Gauge("lanes_admission_inflight", "Slots in use.", l, func() float64 { return float64(c.Stats().InFlight) })
			m.Gauge("lanes_admission_waiting", "Requests queued for a slot.", l, func() float64 { return float64(c.Stats().Waiting) })
			m.Gauge("lanes_admission_max_waiting", "Queue bound; past it requests get 429.", l, func() float64 { return float64(c.Stats().MaxQueue) })
			m.Counter("lanes_admission_rejected_total", "Requests answered 429 (overloaded).", l, func() float64 { return float64(c.Stats().Rejected) })
		}
		m.Counter("lanes_admission_rate_limited_total", "Requests answered 429 by the per-client token bucket.", nil, func() float64 { return float64(a.Clients.Rejected()) })
	}
	if bb := s.opts.BodyBudget; bb != nil {
		m.Gauge("lanes_body_bytes_budget", "Request body bytes that may be held at once (LANES_MAX_INFLIGHT_BODY_BYTES).", nil, func() float64 { return float64(bb.Stats().Budget) })
		m.Gauge("lanes_body_bytes_inflight", "Request body bytes held now, from arrival to answer.", nil, func() float64 { return float64(bb.Stats().Held) })
		m.Gauge("lanes_body_bytes_waiting", "Requests waiting for room in the body budget.", nil, func() float64 { return float64(bb.Stats().Waiting) })
		m.Counter("lanes_body_bytes_rejected_total", "Requests answered 429 (overloaded) for want of room in the body budget.", nil, func() float64 { return float64(bb.Stats().Rejected) })
	}
	m.Gauge("lanes_db_healthy", "1 while the database answers and the schema is applied (what /health checks), from the broker's twice-a-second database read, with or without a spool; 0 otherwise.",
		nil, boolGauge(func() bool { return s.databaseUp(context.Background()) }))
	if sp := s.opts.Spool; sp != nil {
		m.Gauge("lanes_spool_pending", "Items (messages, one spool record each, not push requests or files) spooled and not yet drained: neither stored in PostgreSQL nor quarantined in failed/.", nil, func() float64 { return float64(sp.Pending()) })
		m.Gauge("lanes_spool_bytes", "Bytes of the spool files waiting to drain (LANES_SPOOL_MAX_BYTES bounds them).", nil, func() float64 { return float64(sp.Bytes()) })
		m.Gauge("lanes_spool_failed", "Items (spool records) in the files quarantined in failed/, counted from the files at each scrape; a file keeps the items it stored before it was quarantined, which a replay finds as duplicates.", nil, func() float64 { return float64(sp.Failed()) })
		m.Counter("lanes_spool_drained_total", "Items the drain replayed into PostgreSQL, stored or found there already (duplicates count; lanes_messages_pushed_total{source=\"spool\"} counts the stored ones).", nil, func() float64 { return float64(sp.Drained()) })
		m.Gauge("lanes_spool_db_healthy", "1 while the broker's periodic database read succeeds and no spooled push or failed drain has found the database down since; 0 otherwise.", nil, boolGauge(func() bool { return s.databaseHealthy(context.Background()) }))
	}
	for _, source := range engine.StoredSources {
		m.Counter("lanes_messages_pushed_total", "Messages stored, counted at their commit, by source: push, transaction, timer, replay (dead letters) or spool (drain).",
			prometheus.Labels{"source": source.String()}, func() float64 { return float64(s.engine.StoredMessages(source)) })
	}
	s.engine.ObservePopClaims(m.ObservePopClaim)
	s.engine.ObservePushCommits(func(c engine.PushCommit) { m.ObservePushCommit(c.Messages, c.Took, c.Waits) })
	s.engine.ObserveTimerFires(m.ObserveTimerFire)
	m.Gauge("lanes_build_info", "Always 1; the version label is this broker's build.", prometheus.Labels{"version": s.opts.Version}, func() float64 { return 1 })
	m.Gauge("lanes_pop_parked", "Long-poll pops parked on this broker (no connection held).", nil, func() float64 { return float64(s.engine.ParkedPops()) })
	byPath := func(name, help string, oneTrip, general func(engine.HotPathStats) uint64) {
		for path, count := range map[string]func(engine.HotPathStats) uint64{"one_trip": oneTrip, "general": general} {
			m.Counter(name, help, prometheus.Labels{"path": path}, func() float64 { return float64(count(s.engine.HotPathStats())) })
		}
	}
	byPath("lanes_ack_requests_total", "Ack requests committed, by path: one_trip (every item completes a message of one lease this broker granted) or general.",
		func(h engine.HotPathStats) uint64 { return h.AcksOneTrip }, func(h engine.HotPathStats) uint64 { return h.AcksGeneral })
	byPath("lanes_push_commits_total", "Push group commits, by path: one_trip (every partition known, every transaction id new, one statement) or general.",
		func(h engine.HotPathStats) uint64 { return h.PushCommitsOneTrip }, func(h engine.HotPathStats) uint64 { return h.PushCommitsGeneral })
	byPath("lanes_pop_transactions_total", "Pop transactions committed (parked re-checks included), by path: one_trip (on the queue and group state this broker cached from the last pop) or general.",
		func(h engine.HotPathStats) uint64 { return h.PopsOneTrip }, func(h engine.HotPathStats) uint64 { return h.PopsGeneral })
	byPath("lanes_transaction_commits_total", "Transaction bundles committed, by path: one_trip (pushes to known partitions with new transaction ids, acks of one lease this broker granted, no kv or timers) or general.",
		func(h engine.HotPathStats) uint64 { return h.BundlesOneTrip }, func(h engine.HotPathStats) uint64 { return h.BundlesGeneral })
	m.Counter("lanes_pop_hand_offs_total", "Claims for a parked long-poll pop run in the commit round trip of a push or an ack (not counted in lanes_pop_transactions_total).",
		nil, func() float64 { return float64(s.engine.HotPathStats().HandOffs) })
	m.Counter("lanes_pop_hand_offs_continued_total", "Of lanes_pop_hand_offs_total, the acks' hand-offs that leased the next batch of the partition the ack released, which was the only one of its group with work, without the claim statement.",
		nil, func() float64 { return float64(s.engine.HotPathStats().HandOffsContinued) })
	m.Counter("lanes_leases_expired_total", "Partition leases that ran out before their ack, counted when a claim on this broker takes the partition over (one per partition of a pop's lease).",
		nil, func() float64 { return float64(s.engine.LeasesExpired()) })
	for to, count := range map[string]func() uint64{
		"hot":   func() uint64 { hot, _ := s.engine.SessionSwitches(); return hot },
		"plain": func() uint64 { _, plain := s.engine.SessionSwitches(); return plain },
	} {
		m.Counter("lanes_db_session_switches_total", "Pooled connections whose session was switched, in a round trip, to the push, pop and ack planner settings (to=hot) or back to PostgreSQL's defaults for another statement (to=plain).",
			prometheus.Labels{"to": to}, func() float64 { return float64(count()) })
	}
	m.Counter("lanes_push_unprobed_conflicts_total", "Push writes that skipped the dedup probe, met a stored transaction id and ran again probed.",
		nil, func() float64 { return float64(s.engine.HotPathStats().UnprobedPushConflicts) })
	m.Gauge("lanes_maintenance_push", "1 while push maintenance diverts pushes to the spool.", nil, boolGauge(s.maintenance.push.Load))
	m.Gauge("lanes_maintenance_pop", "1 while pop maintenance answers every pop 204.", nil, boolGauge(s.maintenance.pop.Load))
	if v := s.opts.Auth; v != nil {
		for i, set := range v.KeySets() {
			status := func() auth.KeySetStatus { return v.KeySets()[i] }
			url := prometheus.Labels{"url": set.URL}
			m.Gauge("lanes_jwks_keys", "Keys a JSON Web Key Set held after its last successful fetch; they keep verifying while the set is unreachable.",
				url, func() float64 { return float64(status().Keys) })
			m.Counter("lanes_jwks_refresh_failures_total", "Failed fetches of a JSON Web Key Set (at startup, periodic, or for a kid no held key verifies).",
				url, func() float64 { return float64(status().Failures) })
			m.Gauge("lanes_jwks_last_refresh_timestamp_seconds", "Unix time of a JSON Web Key Set's last successful fetch (0 = none yet).",
				url, func() float64 {
					if at := status().LastRefresh; !at.IsZero() {
						return float64(at.UnixNano()) / 1e9
					}
					return 0
				})
		}
	}
}

// storedMessages counts the messages this broker stored, every source.
func (s *Server) storedMessages() int64 {
	var n int64
	for _, source := range engine.StoredSources {
		n += s.engine.StoredMessages(source)
	}
	return n
}

// GetMetrics answers GET /metrics with the reference's JSON snapshot.
func (s *Server) GetMetrics(context.Context, gen.GetMetricsRequestObject) (gen.GetMetricsResponseObject, error) {
	return gen.GetMetrics200JSONResponse(s.metricsSnapshot()), nil
}

// GetPrometheusMetrics answers GET /metrics/prometheus in the text exposition format.
func (s *Server) GetPrometheusMetrics(context.Context, gen.GetPrometheusMetricsRequestObject) (gen.GetPrometheusMetricsResponseObject, error) {
	families, err := s.metrics.Registry.Gather()
	if err != nil {
		return nil, err
	}
	return prometheusText(families), nil
}

// prometheusText is a gathered registry, written as Prometheus text.
type prometheusText []*dto.MetricFamily

func (p prometheusText) VisitGetPrometheusMetricsResponse(w http.ResponseWriter) error {
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	w.Header().Set("Content-Type", string(format))
	enc := expfmt.NewEncoder(w, format)
	for _, f := range p {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	return nil
}

// metricsSnapshot is the reference's snapshot shape plus admission, spool and
// maintenance sections.
func (s *Server) metricsSnapshot() gen.Metrics {
	uptime := s.metrics.Uptime().Seconds()
	rate := func(n int64) float64 {
		if uptime <= 0 {
			return 0
		}
		return float64(n) / uptime
	}
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	pushed := s.storedMessages()
	body := gen.Metrics{
		Uptime:   uptime,
		Requests: gen.RateCounter{Total: int(s.metrics.RequestsTotal()), Rate: rate(s.metrics.RequestsTotal())},
		Messages: gen.MetricsMessages{
			Total: int(pushed), Rate: rate(pushed), Pushed: int(pushed), Popped: int(s.metrics.PoppedTotal()),
			Acked: int(s.metrics.AckedTotal()), DeadLettered: int(s.metrics.DeadLetteredTotal()),
			LeasesGivenBack: int(s.metrics.LeasesGivenBack()), LeasesExpired: int(s.engine.LeasesExpired()),
		},
		Retention:   wireRetention(s.metrics.Retention()),
		Lag:         lagSummary(s.metrics.LagSnapshot()),
		ParkedPops:  s.engine.ParkedPops(),
		Memory:      memorySnapshot(&mem),
		Cpu:         gen.MetricsCpu{Cores: runtime.NumCPU()},
		Maintenance: gen.MetricsMaintenance{Push: s.maintenance.push.Load(), Pop: s.maintenance.pop.Load()},
	}
	commits := s.metrics.PushCommitTotals()
	body.PushCommits = &gen.MetricsPushCommits{Committers: s.engine.PushCommitters(), Commits: int(commits.Commits),
		Messages: int(commits.Messages), Seconds: commits.Seconds, Requests: int(commits.Requests), WaitSeconds: commits.WaitSeconds}
	if pool := s.engine.Pool(); pool != nil {
		st := pool.Stat()
		body.Database = &gen.MetricsDatabase{PoolSize: int(st.MaxConns()), IdleConnections: int(st.IdleConns()),
			Acquired: int(st.AcquiredConns()), EmptyAcquires: int(st.EmptyAcquireCount())}
	}
	if a := s.opts.Admission; a != nil {
		classes := map[string]gen.AdmissionClassStats{}
		waiting := 0
		for _, c := range a.Classes() {
			st := c.Stats()
			classes[c.Name()] = gen.AdmissionClassStats{Class: st.Class, Budget: st.Budget, InFlight: st.InFlight, Waiting: st.Waiting,
				MaxWaiting: st.MaxQueue, Admitted: int(st.Admitted), Rejected: int(st.Rejected)}
			waiting += st.Waiting
		}
		if body.Database != nil {
			body.Database.WaitingRequests = waiting
		}
		body.Admission = &gen.MetricsAdmission{Classes: classes, RateLimited: int(a.Clients.Rejected())}
	}
	if bb := s.opts.BodyBudget; bb != nil {
		st := bb.Stats()
		body.BodyBytes = &gen.MetricsBodyBytes{Budget: int(st.Budget), Held: int(st.Held), Waiting: int(st.Waiting), Rejected: int(st.Rejected)}
	}
	if sp := s.opts.Spool; sp != nil {
		body.Spool = &gen.MetricsSpool{Pending: int(sp.Pending()), Failed: int(sp.Failed()), Drained: int(sp.Drained()),
			DbHealthy: s.databaseHealthy(context.Background()), Dir: sp.Dir()}
	}
	return body
}

func wireRetention(r metrics.RetentionSnapshot) gen.MetricsRetention {
	return gen.MetricsRetention{Passes: int(r.Passes), Sweeps: int(r.Sweeps), Errors: int(r.Errors),
		SegmentsDeleted: int(r.SegmentsDeleted), MessagesDeleted: int(r.MessagesDeleted), TxnsPurged: int(r.TxnsPurged),
		LastPassSeconds: r.LastPassSeconds, LastPassAt: r.LastPassAt}
}

// lagTop is how many of the largest backlogs the JSON metrics list.
const lagTop = 10

func lagSummary(l metrics.LagSnapshot) gen.MetricsLag {
	var total int64
	top := make([]gen.LagSample, 0, min(len(l.Samples), lagTop))
	for i, x := range l.Samples {
		total += x.Messages
		if i < lagTop {
			top = append(top, gen.LagSample{Queue: x.Queue, Group: x.Group, Messages: int(x.Messages)})
		}
	}
	out := gen.MetricsLag{Series: len(l.Samples), TotalMessages: int(total), Top: top, RefreshSeconds: l.RefreshSeconds}
	if !l.RefreshedAt.IsZero() {
		at := l.RefreshedAt.UTC()
		out.RefreshedAt = &at
	}
	if l.Err != "" {
		out.LastError = &l.Err
	}
	if l.IntervalSeconds > 0 {
		out.IntervalSeconds = &l.IntervalSeconds
	}
	return out
}

// RunLagCollector recomputes the per-queue lag gauges every interval (at most
// maxSeries of them, largest first) until ctx ends; scrapes read the last result.
func (s *Server) RunLagCollector(ctx context.Context, interval time.Duration, maxSeries int) {
	failures := failurelog.New(s.log, slog.LevelWarn, "lag refresh failed; the backlog gauges keep their last values", "")
	s.metrics.RunLagCollector(ctx, interval, s.lagFetch(maxSeries), func(err error) {
		if err != nil {
			failures.Failed(err)
		} else {
			failures.Succeeded()
		}
	})
}

// RefreshLag recomputes the lag gauges once.
func (s *Server) RefreshLag(ctx context.Context, maxSeries int) error {
	return s.metrics.RefreshLag(ctx, s.lagFetch(maxSeries))
}

func (s *Server) lagFetch(maxSeries int) func(context.Context) (metrics.Backlog, error) {
	if maxSeries <= 0 {
		maxSeries = 1000
	}
	return func(ctx context.Context) (metrics.Backlog, error) {
		if !s.schemaReady() {
			return metrics.Backlog{}, errSchemaNotReady
		}
		timeout := s.opts.DBTimeout
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		b, err := s.engine.Backlog(ctx, maxSeries)
		if err != nil {
			return metrics.Backlog{}, err
		}
		out := metrics.Backlog{Lags: make([]metrics.LagSample, len(b.Lags)),
			Pending: perQueueSamples(b.Pending), DeadLetters: perQueueSamples(b.DeadLetters),
			TimersWaiting: b.Timers.Waiting, TimersDue: b.Timers.Due}
		for i, l := range b.Lags {
			out.Lags[i] = metrics.LagSample{Queue: l.Queue, Group: l.Group, Messages: l.Messages}
		}
		return out, nil
	}
}

func perQueueSamples(counts []engine.QueueCount) []metrics.QueueSample {
	out := make([]metrics.QueueSample, len(counts))
	for i, c := range counts {
		out[i] = metrics.QueueSample{Queue: c.Queue, Messages: c.Messages}
	}
	return out
}

type schemaNotReadyError struct{}

func (schemaNotReadyError) Error() string { return "schema not applied yet" }

var errSchemaNotReady error = schemaNotReadyError{}

// RetentionObserver returns the engine hook that feeds retention progress into m.
func RetentionObserver(m *metrics.Metrics, log *slog.Logger) func(engine.RetentionStats, time.Duration, error) {
	return func(st engine.RetentionStats, took time.Duration, err error) {
		if err != nil && log != nil {
			log.Debug("retention pass failed", "err", err)
		}
		m.ObserveRetention(st.Leader, st.Segments, st.Messages, st.TxnsPurged, took, err != nil)
	}
}

// memorySnapshot is the reference's memory section: rss (resident bytes, the
// figure an operator compares with a container limit; absent where /proc is
// not) and the Go runtime's view beside it.
func memorySnapshot(mem *runtime.MemStats) gen.MetricsMemory {
	out := gen.MetricsMemory{HeapAlloc: int(mem.HeapAlloc), Sys: int(mem.Sys), Goroutines: runtime.NumGoroutine()}
	if self, err := procfs.Self(); err == nil {
		if st, err := self.Stat(); err == nil {
			rss := st.ResidentMemory()
			out.Rss = &rss
		}
	}
	return out
}
