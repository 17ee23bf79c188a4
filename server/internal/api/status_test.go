package api

import (
	"net/http"
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
