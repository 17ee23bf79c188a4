package api

import (
	"encoding/json"
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

// The largest offset a listing takes (2^63-1) reads an empty page, never a 500: the group listing
// added its page's rows to the offset, and past 2^63-10,002 the sum wrapped to a negative LIMIT.
func TestTheLargestOffsetReadsAnEmptyPage(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1}}}, nil)
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"?consumerGroup=g&subscriptionMode=all&autoAck=true", nil, nil)
	const offset = "9223372036854775807"
	for _, path := range []string{
		"/api/v1/consumer-groups",
		"/api/v1/consumer-groups?limit=1",
		"/api/v1/consumer-groups/lagging?minLagSeconds=0",
		"/api/v1/consumer-groups/g",
		"/api/v1/messages?queue=" + q,
		"/api/v1/dlq?queue=" + q,
		"/api/v1/resources/queues",
		"/api/v1/status/queues",
		"/api/v1/resources/namespaces",
		"/api/v1/resources/tasks",
		"/api/v1/resources/kv/namespaces",
		"/api/v1/resources/queues/" + q,
		"/api/v1/resources/queues/" + q + "/depth",
		"/api/v1/status/queues/" + q + "?includePartitions=true",
	} {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		var answer json.RawMessage
		if status, _ := b.call(t, "GET", path+sep+"offset="+offset, nil, &answer); status != http.StatusOK {
			t.Errorf("%s offset=%s: %d %s; want 200 with an empty page", path, offset, status, answer)
		}
	}
}
