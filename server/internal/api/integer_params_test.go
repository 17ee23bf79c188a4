package api

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// Every integer parameter states its range, so a client generated from
// openapi.yaml never sends one the broker cannot read: a maximum, or
// format int64 where any 64-bit value is taken. A number past 64 bits
// answers 400 validation_failed; without a stated range a spec-valid value.
func TestIntegerParametersStateTheirRange(t *testing.T) {
	spec := loadSpec(t)
	for path, item := range spec.Paths.Map() {
		ops := item.Operations()
		for _, method := range slices.Sorted(func(yield func(string) bool) {
			for m := range ops {
				if !yield(m) {
					return
				}
			}
		}) {
			params := append(openapi3.Parameters{}, item.Parameters...)
			params = append(params, ops[method].Parameters...)
			for _, ref := range params {
				p := ref.Value
				if s := p.Schema.Value; s.Type.Is("integer") && s.Max == nil && s.Format != "int64" {
					t.Errorf("%s %s: integer parameter %s states no maximum and no format int64", method, path, p.Name)
				}
			}
		}
	}
}

// The largest 64-bit value of each parameter that takes any is read, not
// refused. Listings are scoped to this test's queue: other tests leave rows
// (a deliberately corrupt segment among them) that are not this test's.
func TestInt64ParametersTakeTheLargestValue(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	for _, path := range []string{
		"/api/v1/consumer-groups/lagging?minLagSeconds=%d",
		"/api/v1/dlq?queue=" + q + "&offset=%d",
		"/api/v1/messages?queue=" + q + "&offset=%d",
		"/api/v1/resources/queues?namespace=" + q + "&offset=%d",
		"/api/v1/status/queues?queue=" + q + "&offset=%d",
		"/api/v1/pop/queue/" + q + "?partitions=%d",
		"/api/v1/pop/queue/" + q + "?partitions=-%d",
		"/api/v1/pop/queue/" + q + "?leaseSeconds=%d",
		"/api/v1/pop/queue/" + q + "/partition/p?leaseSeconds=-%d",
	} {
		url := fmt.Sprintf(path, int64(math.MaxInt64))
		status, _ := b.call(t, "GET", url, nil, nil)
		if status != http.StatusOK && status != http.StatusNoContent {
			t.Errorf("GET %s: %d", url, status)
		}
	}
}
