package api

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/lanesmq/lanes/server/internal/admission"
	"github.com/lanesmq/lanes/server/internal/auth"
	"github.com/lanesmq/lanes/server/internal/metrics"
)

// documentedMetric is one row of the metrics table in docs/operations.md.
type documentedMetric struct {
	kind   string
	labels []string
}

// metricsTable reads the table of the "## Metrics" section of docs/operations.md.
func metricsTable(t *testing.T) map[string]documentedMetric {
	t.Helper()
	raw, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(raw), "\n## Metrics\n")
	if !found {
		t.Fatal("docs/operations.md has no ## Metrics section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\| ([a-z]+) \\| ([^|]*) \\|")
	label := regexp.MustCompile("`([a-z_]+)`")
	out := map[string]documentedMetric{}
	for _, line := range strings.Split(section, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if _, dup := out[m[1]]; dup {
			t.Errorf("%s has two rows", m[1])
		}
		d := documentedMetric{kind: m[2], labels: []string{}}
		for _, l := range label.FindAllStringSubmatch(m[3], -1) {
			d.labels = append(d.labels, l[1])
		}
		slices.Sort(d.labels)
		out[m[1]] = d
	}
	return out
}

// Every lanes_* metric a fully wired broker registers is in the table of
// docs/operations.md with its type and labels, and the table names nothing
// the broker does not export.
func TestMetricsTableMatchesTheRegistry(t *testing.T) {
	reg := metrics.New()
	limits := admission.Limits{InFlight: 4, Waiting: 4}
	// Auth with a key set exports the JWKS series; every path is skipped, so the calls below need no token.
	verifier := newJWKSVerifier(t, auth.Config{JWKSURLs: []string{newJWKSServer(t).URL}, SkipPaths: []string{"/api/"}})
	b := newBrokerWith(t, testDSN, Options{Metrics: reg, Admission: &admission.Controller{
		Push: admission.NewClass("push", limits), Pop: admission.NewClass("pop", limits), Ack: admission.NewClass("ack", limits),
		Clients: admission.NewClientLimiter(1000, 1000),
	}, BodyBudget: admission.NewByteBudget(1<<20, time.Second), Auth: verifier}, t.TempDir())
	// Labeled series appear once they have a value: a push, a dead letter and
	// a backlog refresh give every family one.
	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/push", pushItems(q, 1), nil)
	b.deadLetter(t, q, "dead", "dead-1")
	if err := b.Server.RefreshLag(t.Context(), 1000); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[dto.MetricType]string{dto.MetricType_COUNTER: "counter", dto.MetricType_GAUGE: "gauge", dto.MetricType_HISTOGRAM: "histogram"}
	table := metricsTable(t)
	exported := map[string]bool{}
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "lanes_") {
			continue
		}
		exported[name] = true
		doc, ok := table[name]
		if !ok {
			t.Errorf("%s is exported but missing from the metrics table in docs/operations.md", name)
			continue
		}
		if kinds[f.GetType()] != doc.kind {
			t.Errorf("%s: table says %s, registry has %s", name, doc.kind, kinds[f.GetType()])
		}
		labels := []string{}
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		if !slices.Equal(labels, doc.labels) {
			t.Errorf("%s: table lists labels %v, registry has %v", name, doc.labels, labels)
		}
	}
	for name := range table {
		if !exported[name] {
			t.Errorf("the metrics table names %s, which the broker does not export", name)
		}
	}
}
