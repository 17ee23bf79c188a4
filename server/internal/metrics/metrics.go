// Package metrics holds the broker's Prometheus registry: request counts and
// latencies per route, push verdicts, and gauges read at scrape time from the
// parts that own the numbers (pool, admission, spool, maintenance).
package metrics

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is one broker's registry. Create it with New.
type Metrics struct {
	Registry *prometheus.Registry
	started  time.Time

	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	pushItems *prometheus.CounterVec

	requestsTotal atomic.Int64
	pushedTotal   atomic.Int64
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
			Help:    "HTTP request latency by route template and method (long-poll pops included).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "method"}),
		pushItems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lanes_push_items_total",
			Help: "Pushed items by verdict: queued, duplicate, buffered, failed.",
		}, []string{"status"}),
	}
	reg.MustRegister(m.requests, m.latency, m.pushItems,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ObserveRequest records one finished request.
func (m *Metrics) ObserveRequest(route, method string, status int, took time.Duration) {
	m.requestsTotal.Add(1)
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(route, method).Observe(took.Seconds())
}

// CountPush records n items answered with status.
func (m *Metrics) CountPush(status string, n int) {
	if status == "queued" || status == "buffered" {
		m.pushedTotal.Add(int64(n))
	}
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

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// Uptime is the time since New.
func (m *Metrics) Uptime() time.Duration { return time.Since(m.started) }

// RequestsTotal counts every observed request.
func (m *Metrics) RequestsTotal() int64 { return m.requestsTotal.Load() }

// PushedTotal counts items accepted (queued or buffered).
func (m *Metrics) PushedTotal() int64 { return m.pushedTotal.Load() }
