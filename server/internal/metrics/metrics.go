// Package metrics holds the broker's Prometheus registry: request counts and
// latencies per route, push verdicts, the backlog gauges the lag collector
// sets, and gauges read at scrape time from the parts that own the numbers
// (pool, engine, admission and the body budget, spool, JWKS, maintenance).
package metrics

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// Metrics is one broker's registry. Create it with New.
type Metrics struct {
	Registry *prometheus.Registry
	started  time.Time

	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	pushItems *prometheus.CounterVec

	requestsTotal atomic.Int64
	popClaim      prometheus.Histogram
	pushCommit    prometheus.Histogram
	pushMessages  prometheus.Histogram
	pushWait      prometheus.Histogram

	popped, acked, deadLettered, leasesGivenBack, autoAckedUndelivered atomic.Int64
	retention                                                          retentionProgress

	lag       *prometheus.GaugeVec
	pending   *prometheus.GaugeVec
	dlq       *prometheus.GaugeVec
	lagMu     sync.Mutex
	lagLatest LagSnapshot

	timersWaiting, timersDue prometheus.Gauge
	timersFired              prometheus.Counter
	timerFireLag             prometheus.Histogram
}

// retentionProgress accumulates the retention passes of this broker.
type retentionProgress struct {
	mu                               sync.Mutex
	passes, errors, sweeps, segments int64
	messages, txnsPurged             int64
	lastDuration                     time.Duration
	lastAt                           time.Time
}

// RetentionSnapshot is the retention progress for the JSON metrics.
type RetentionSnapshot struct {
	Passes          int64
	Sweeps          int64
	Errors          int64
	SegmentsDeleted int64
	MessagesDeleted int64
	TxnsPurged      int64
	LastPassSeconds float64
	LastPassAt      *time.Time
}

// LagSample is the backlog of one consumer group on one queue.
type LagSample struct {
	Queue    string `json:"queue"`
	Group    string `json:"group"`
	Messages int64  `json:"messages"`
}

// QueueSample is a per-queue backlog figure.
type QueueSample struct {
	Queue    string
	Messages int64
}

// Backlog is one answer of the backlog fetch.
type Backlog struct {
	Lags        []LagSample
	Pending     []QueueSample
	DeadLetters []QueueSample
	// TimersWaiting counts the cluster's timers not fired yet, TimersDue
	// those of them past their deliver time.
	TimersWaiting, TimersDue int64
}

// LagSnapshot is the last lag refresh.
type LagSnapshot struct {
	Samples        []LagSample
	RefreshedAt    time.Time
	RefreshSeconds float64
	Err            string
	// IntervalSeconds is how long after the last refresh's start the
	// collector starts the next (lagRefreshInterval); 0 without a collector.
	IntervalSeconds float64
}

// New builds a registry with the Go runtime and process collectors.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		started:  time.Now(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lanes_http_requests_total",
			Help: "HTTP requests by route template, method and status code.",
		}, []string{"route", "method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lanes_http_request_duration_seconds",
			Help:    "HTTP request latency by route template and method; a pop's includes its long-poll parking (lanes_pop_claim_duration_seconds is the claim alone).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"route", "method"}),
		pushItems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lanes_push_items_total",
			Help: "Pushed items by verdict: queued, duplicate, buffered, failed.",
		}, []string{"status"}),
		popClaim: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lanes_pop_claim_duration_seconds",
			Help:    "Duration of a pop's database claim (one per claim, parked re-checks included), without the long-poll parking.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		pushCommit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lanes_push_commit_duration_seconds",
			Help:    "Duration of one push group commit (pushes and the spool's drain), from its start to its answer, retries included; a committer is busy for their sum.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		pushMessages: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lanes_push_commit_messages",
			Help:    "Messages one push group commit took (the items of the push requests it gathered).",
			Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000},
		}),
		pushWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lanes_push_commit_wait_seconds",
			Help:    "Time a push request waited for its group commit to start: the committer was busy with the commit before.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
	}
	m.lag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lanes_queue_lag_messages",
		Help: "Messages past a consumer group's cursors on a queue (watermark arithmetic), refreshed by a background collector; largest LANES_LAG_MAX_SERIES only.",
	}, []string{"queue", "group"})
	m.pending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lanes_queue_pending_messages",
		Help: "Messages of a queue not yet completed in queue mode (all retained messages when no group-less pop ran yet), refreshed with the lag; largest LANES_LAG_MAX_SERIES only.",
	}, []string{"queue"})
	m.dlq = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lanes_dlq_messages",
		Help: "Dead-letter rows of a queue, refreshed with the lag; largest LANES_LAG_MAX_SERIES only.",
	}, []string{"queue"})
	m.timersWaiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lanes_timers_waiting",
		Help: "Timers scheduled and not fired yet, due ones included; cluster-wide (every broker reads the same table), refreshed with the lag.",
	})
	m.timersDue = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lanes_timers_due",
		Help: "Of lanes_timers_waiting, the timers past their deliver time; cluster-wide, refreshed with the lag.",
	})
	m.timersFired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lanes_timers_fired_total",
		Help: "Timers this broker fired (each timer fires once, on one broker: sum over brokers for the cluster).",
	})
	m.timerFireLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "lanes_timer_fire_lag_seconds",
		Help:    "Lateness of each timer this broker fired: seconds from its deliver time to its firing, by the database's clock; within about LANES_TIMERS_INTERVAL_MS while the firing keeps up.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	})
	reg.MustRegister(m.requests, m.latency, m.pushItems, m.popClaim, m.pushCommit, m.pushMessages, m.pushWait, m.lag, m.pending, m.dlq, m.timersWaiting, m.timersDue, m.timersFired, m.timerFireLag,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	count := func(name, help string, v *atomic.Int64) {
		m.Counter(name, help, nil, func() float64 { return float64(v.Load()) })
	}
	count("lanes_messages_popped_total", "Messages delivered by pops (leased or auto-acked).", &m.popped)
	count("lanes_messages_acked_total", "Acknowledgements executed (ack, ack batch, transaction), any status.", &m.acked)
	count("lanes_messages_dead_lettered_total", "Messages moved to the dead-letter queue by acknowledgements.", &m.deadLettered)
	count("lanes_pop_leases_given_back_total", "Claims released again because the client left before the answer.", &m.leasesGivenBack)
	count("lanes_pop_auto_acked_undelivered_total", "Messages an autoAck pop committed whose client left before the answer: consumed for the group, never delivered (at-most-once).", &m.autoAckedUndelivered)
	r := &m.retention
	read := func(f func() float64) func() float64 {
		return func() float64 { r.mu.Lock(); defer r.mu.Unlock(); return f() }
	}
	m.Counter("lanes_retention_passes_total", "Retention passes run by this broker (swept or not).", nil, read(func() float64 { return float64(r.passes) }))
	m.Counter("lanes_retention_sweeps_total", "Retention passes in which this broker held the sweeper lease.", nil, read(func() float64 { return float64(r.sweeps) }))
	m.Counter("lanes_retention_errors_total", "Retention passes that failed.", nil, read(func() float64 { return float64(r.errors) }))
	m.Counter("lanes_retention_segments_deleted_total", "Segments deleted by retention.", nil, read(func() float64 { return float64(r.segments) }))
	m.Counter("lanes_retention_messages_deleted_total", "Messages in segments deleted by retention.", nil, read(func() float64 { return float64(r.messages) }))
	m.Counter("lanes_retention_txns_purged_total", "Transaction-index rows purged by retention.", nil, read(func() float64 { return float64(r.txnsPurged) }))
	m.Gauge("lanes_retention_last_pass_seconds", "Duration of the last retention pass.", nil, read(func() float64 { return r.lastDuration.Seconds() }))
	m.Gauge("lanes_retention_last_pass_timestamp_seconds", "Unix time the last retention pass ended (0 = none yet).", nil, read(func() float64 {
		if r.lastAt.IsZero() {
			return 0
		}
		return float64(r.lastAt.UnixNano()) / 1e9
	}))
	lagRead := func(f func(LagSnapshot) float64) func() float64 {
		return func() float64 { return f(m.LagSnapshot()) }
	}
	m.Gauge("lanes_queue_lag_refresh_seconds", "Duration of the last lag refresh.", nil, lagRead(func(l LagSnapshot) float64 { return l.RefreshSeconds }))
	m.Gauge("lanes_queue_lag_refresh_interval_seconds", "Seconds from the last lag refresh's start to the next one's: LANES_LAG_REFRESH_MS, or 20 times the last refresh's duration when that is longer (0 = no collector).",
		nil, lagRead(func(l LagSnapshot) float64 { return l.IntervalSeconds }))
	m.Gauge("lanes_queue_lag_refresh_timestamp_seconds", "Unix time of the last successful lag refresh (0 = none yet).", nil, lagRead(func(l LagSnapshot) float64 {
		if l.RefreshedAt.IsZero() {
			return 0
		}
		return float64(l.RefreshedAt.UnixNano()) / 1e9
	}))
	return m
}

// CountPopped records n delivered messages.
func (m *Metrics) CountPopped(n int) { m.popped.Add(int64(n)) }

// CountAcks records executed acknowledgements and those that dead-lettered.
func (m *Metrics) CountAcks(acked, deadLettered int) {
	m.acked.Add(int64(acked))
	m.deadLettered.Add(int64(deadLettered))
}

// CountLeaseGivenBack records a claim released because its client left.
func (m *Metrics) CountLeaseGivenBack() { m.leasesGivenBack.Add(1) }

// CountAutoAckedUndelivered records n messages an autoAck pop committed for a client that left.
func (m *Metrics) CountAutoAckedUndelivered(n int) { m.autoAckedUndelivered.Add(int64(n)) }

// AutoAckedUndelivered reads lanes_pop_auto_acked_undelivered_total.
func (m *Metrics) AutoAckedUndelivered() int64 { return m.autoAckedUndelivered.Load() }

// PoppedTotal, AckedTotal, DeadLetteredTotal and LeasesGivenBack read the counters.
func (m *Metrics) PoppedTotal() int64 { return m.popped.Load() }

// AckedTotal counts executed acknowledgements.
func (m *Metrics) AckedTotal() int64 { return m.acked.Load() }

// DeadLetteredTotal counts messages moved to the DLQ by acknowledgements.
func (m *Metrics) DeadLetteredTotal() int64 { return m.deadLettered.Load() }

// LeasesGivenBack counts claims released because the client left.
func (m *Metrics) LeasesGivenBack() int64 { return m.leasesGivenBack.Load() }

// ObserveRetention records one retention pass.
func (m *Metrics) ObserveRetention(leader bool, segments int, messages, txnsPurged int64, took time.Duration, failed bool) {
	r := &m.retention
	r.mu.Lock()
	defer r.mu.Unlock()
	r.passes++
	if leader {
		r.sweeps++
	}
	if failed {
		r.errors++
	}
	r.segments += int64(segments)
	r.messages += messages
	r.txnsPurged += txnsPurged
	r.lastDuration = took
	r.lastAt = time.Now()
}

// Retention reads the retention progress.
func (m *Metrics) Retention() RetentionSnapshot {
	r := &m.retention
	r.mu.Lock()
	defer r.mu.Unlock()
	out := RetentionSnapshot{Passes: r.passes, Sweeps: r.sweeps, Errors: r.errors, SegmentsDeleted: r.segments,
		MessagesDeleted: r.messages, TxnsPurged: r.txnsPurged, LastPassSeconds: r.lastDuration.Seconds()}
	if !r.lastAt.IsZero() {
		at := r.lastAt.UTC()
		out.LastPassAt = &at
	}
	return out
}

// RefreshLag runs fetch once and replaces every lag, pending and dead-letter
// series with its answer (series that disappeared are dropped). A failed fetch
// keeps the old series.
func (m *Metrics) RefreshLag(ctx context.Context, fetch func(context.Context) (Backlog, error)) error {
	start := time.Now()
	backlog, err := fetch(ctx)
	m.lagMu.Lock()
	defer m.lagMu.Unlock()
	m.lagLatest.RefreshSeconds = time.Since(start).Seconds()
	if err != nil {
		m.lagLatest.Err = err.Error()
		return err
	}
	m.lag.Reset()
	for _, s := range backlog.Lags {
		m.lag.WithLabelValues(s.Queue, s.Group).Set(float64(s.Messages))
	}
	setPerQueue(m.pending, backlog.Pending)
	setPerQueue(m.dlq, backlog.DeadLetters)
	m.timersWaiting.Set(float64(backlog.TimersWaiting))
	m.timersDue.Set(float64(backlog.TimersDue))
	m.lagLatest = LagSnapshot{Samples: backlog.Lags, RefreshedAt: time.Now(), RefreshSeconds: m.lagLatest.RefreshSeconds,
		IntervalSeconds: m.lagLatest.IntervalSeconds}
	return nil
}

func setPerQueue(g *prometheus.GaugeVec, samples []QueueSample) {
	g.Reset()
	for _, s := range samples {
		g.WithLabelValues(s.Queue).Set(float64(s.Messages))
	}
}

// lagRefreshSpacing is how many of its own durations a lag refresh waits, at
// least, from its start to the next one's start: the aggregates sum every
// cursor, seconds of database CPU on hundreds of thousands, so a fixed
// interval would let them take any share of a core; this keeps it under 1/20.
const lagRefreshSpacing = 20

// lagRefreshInterval is the time from a refresh's start to the next one's:
// the configured interval, or lagRefreshSpacing times what the refresh took
// when that is longer.
func lagRefreshInterval(interval, took time.Duration) time.Duration {
	return max(interval, lagRefreshSpacing*took)
}

// RunLagCollector refreshes the backlog series until ctx ends, each refresh
// starting lagRefreshInterval after the last one started, so a scrape never
// pays for the aggregates and they never take more than 1/lagRefreshSpacing of
// the time. onResult gets each refresh's error, nil for a success, unless ctx
// ended.
func (m *Metrics) RunLagCollector(ctx context.Context, interval time.Duration, fetch func(context.Context) (Backlog, error), onResult func(error)) {
	if interval <= 0 {
		return
	}
	for {
		start := time.Now()
		err := m.RefreshLag(ctx, fetch)
		took := time.Since(start)
		next := lagRefreshInterval(interval, took)
		m.lagMu.Lock()
		m.lagLatest.IntervalSeconds = next.Seconds()
		m.lagMu.Unlock()
		if ctx.Err() == nil && onResult != nil {
			onResult(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next - took):
		}
	}
}

// LagSnapshot returns the last lag refresh.
func (m *Metrics) LagSnapshot() LagSnapshot {
	m.lagMu.Lock()
	defer m.lagMu.Unlock()
	return m.lagLatest
}

// ObserveRequest records one finished request.
func (m *Metrics) ObserveRequest(route, method string, status int, took time.Duration) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(route, method).Observe(took.Seconds())
	// Last, so a reader that sees the total also sees the labeled series.
	m.requestsTotal.Add(1)
}

// CountPush records n items answered with status.
func (m *Metrics) CountPush(status string, n int) {
	m.pushItems.WithLabelValues(status).Add(float64(n))
}

// Gauge registers a gauge read from f at every scrape.
func (m *Metrics) Gauge(name, help string, labels prometheus.Labels, f func() float64) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f))
}

// Counter registers a counter read from f at every scrape (f must not decrease).
func (m *Metrics) Counter(name, help string, labels prometheus.Labels, f func() float64) {
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, f))
}

// Uptime is the time since New.
func (m *Metrics) Uptime() time.Duration { return time.Since(m.started) }

// RequestsTotal counts every observed request.
func (m *Metrics) RequestsTotal() int64 { return m.requestsTotal.Load() }

// ObserveTimerFire records one timer this broker fired, late after its deliver time.
func (m *Metrics) ObserveTimerFire(late time.Duration) {
	m.timersFired.Inc()
	m.timerFireLag.Observe(late.Seconds())
}

// ObservePopClaim records the duration of one pop's database claim.
func (m *Metrics) ObservePopClaim(took time.Duration) { m.popClaim.Observe(took.Seconds()) }

// ObservePushCommit records one push group commit: the messages it took, how
// long it ran and how long each of its requests waited for it to start.
func (m *Metrics) ObservePushCommit(messages int, took time.Duration, waits []time.Duration) {
	m.pushCommit.Observe(took.Seconds())
	m.pushMessages.Observe(float64(messages))
	for _, w := range waits {
		m.pushWait.Observe(w.Seconds())
	}
}

// PushCommitTotals sums the push group commits since start, as the JSON
// metrics give them.
type PushCommitTotals struct {
	Commits     uint64
	Messages    uint64
	Seconds     float64
	Requests    uint64
	WaitSeconds float64
}

// PushCommitTotals reads the totals from the push commit histograms, so the
// JSON metrics and the Prometheus series cannot disagree.
func (m *Metrics) PushCommitTotals() PushCommitTotals {
	commits, seconds := histogramTotals(m.pushCommit)
	_, messages := histogramTotals(m.pushMessages)
	requests, waited := histogramTotals(m.pushWait)
	return PushCommitTotals{Commits: commits, Messages: uint64(messages), Seconds: seconds, Requests: requests, WaitSeconds: waited}
}

// histogramTotals is a histogram's observation count and sum.
func histogramTotals(h prometheus.Histogram) (count uint64, sum float64) {
	var out dto.Metric
	if err := h.Write(&out); err != nil || out.Histogram == nil {
		return 0, 0
	}
	return out.Histogram.GetSampleCount(), out.Histogram.GetSampleSum()
}
