package api

import (
	"net/http"
	"strings"
	"testing"
)

// Every listing pages at most 1000 rows: a larger limit is refused with the
// route's validation code, never served (2^31 once answered 480 MB).
func TestListingLimitsAboveTheMaximumAre400(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1}}}, nil)
	listings := []struct{ path, code string }{
		{"/api/v1/messages?queue=" + q, CodeValidation},
		{"/api/v1/dlq?queue=" + q, CodeValidation},
		{"/api/v1/resources/queues?namespace=none", CodeValidation},
		{"/api/v1/status/queues?queue=" + q, CodeValidation},
		{"/api/v1/timers/" + q, "timers_bad_request"},
	}
	for _, l := range listings {
		for _, limit := range []string{"1001", "2147483648", "9223372036854775807"} {
			var e errorBody
			status, _ := b.call(t, "GET", withLimit(l.path, limit), nil, &e)
			if status != http.StatusBadRequest || e.Code != l.code || !strings.Contains(e.Error, "limit") {
				t.Errorf("%s limit=%s: %d %+v; want 400 %s naming limit", l.path, limit, status, e, l.code)
			}
		}
		if status, _ := b.call(t, "GET", withLimit(l.path, "1000"), nil, nil); status != http.StatusOK {
			t.Errorf("%s limit=1000 (the maximum): %d", l.path, status)
		}
	}
}

func withLimit(path, limit string) string {
	if strings.Contains(path, "?") {
		return path + "&limit=" + limit
	}
	return path + "?limit=" + limit
}
