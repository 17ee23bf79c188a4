package api

import (
	"net/http"
	"net/url"
	"testing"
)

// The answer echoes from and to; a year JSON cannot write made it a 500.
func TestStatusRangeOutsideFourDigitYearsIs400(t *testing.T) {
	b := newTestBroker(t)
	for _, query := range []string{"to=0000-01-01T00:00:00Z", "to=0001-01-01T00:30:00Z", "from=0000-12-31T00:00:00Z&to=0001-01-02T00:00:00Z",
		"to=9999-12-31T23:59:59-05:00"} {
		var e errorBody
		if status, _ := b.call(t, "GET", "/api/v1/status?"+query, nil, &e); status != http.StatusBadRequest || e.Code != CodeBadRequest {
			t.Fatalf("%s: want 400 bad_request, got %d %+v", query, status, e)
		}
	}
	var ok map[string]any
	if status, _ := b.call(t, "GET", "/api/v1/status?from=0001-01-01T00:00:00Z&to=9999-12-31T23:59:59Z", nil, &ok); status != http.StatusOK {
		t.Fatalf("the widest range: %d %+v", status, ok)
	}
}

// Every section of the status answer honors the queue, namespace and task
// filters; the lease totals counted every live lease of the cluster.
func TestStatusLeasesHonorTheFilters(t *testing.T) {
	b := newTestBroker(t)
	ns := uniqueQueue(t)
	leased, idle := ns+".work.a", ns+"-idle.rest.b"
	b.push(t, leased, "p", "m1")
	b.push(t, idle, "p", "m2")
	if p := b.pop(t, "/api/v1/pop/queue/"+leased+"?leaseSeconds=600"); len(p.Messages) != 1 {
		t.Fatalf("fixture pop: %+v", p)
	}
	for _, c := range []struct {
		query  string
		leases int
	}{
		{"queue=" + url.QueryEscape(leased), 1},
		{"queue=" + url.QueryEscape(idle), 0},
		{"namespace=" + url.QueryEscape(ns), 1},
		{"namespace=" + url.QueryEscape(ns+"-idle"), 0},
		{"namespace=" + url.QueryEscape(ns) + "&task=work", 1},
		{"namespace=" + url.QueryEscape(ns) + "&task=rest", 0},
	} {
		var s struct {
			Leases struct {
				Active           int `json:"active"`
				PartitionsLocked int `json:"partitionsLocked"`
			} `json:"leases"`
		}
		if status, _ := b.call(t, "GET", "/api/v1/status?"+c.query, nil, &s); status != http.StatusOK ||
			s.Leases.Active != c.leases || s.Leases.PartitionsLocked != c.leases {
			t.Errorf("%s: %d leases %+v; want %d active on %d partitions", c.query, status, s.Leases, c.leases, c.leases)
		}
	}
}
