package api

import (
	"net/http"
	"net/url"
	"testing"
)

// Management routes read booleans as the reference does (http-api-v1.md
// §1.1): yes/no in any case as well as true/false and 1/0. The message plane
// stays strictly typed.
func TestManagementBooleansAcceptYesNo(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	group := q + "-g"
	b.push(t, q, "p1", "a")
	b.pop(t, "/api/v1/pop/queue/"+url.PathEscape(q)+"?consumerGroup="+group+"&subscriptionMode=all")

	for _, c := range []struct {
		value      string
		partitions bool
	}{{"yes", true}, {"YES", true}, {"1", true}, {"True", true}, {"no", false}, {"No", false}, {"0", false}, {"false", false}} {
		var st struct {
			Partitions []map[string]any `json:"partitions"`
		}
		status, _ := b.call(t, "GET", "/api/v1/status/queues/"+url.PathEscape(q)+"?includePartitions="+c.value, nil, &st)
		if status != http.StatusOK || (len(st.Partitions) == 1) != c.partitions {
			t.Fatalf("includePartitions=%s: %d %+v", c.value, status, st)
		}
	}
	var e errorBody
	if status, _ := b.call(t, "GET", "/api/v1/status/queues/"+url.PathEscape(q)+"?includePartitions=maybe", nil, &e); status != http.StatusBadRequest {
		t.Fatalf("includePartitions=maybe: %d %+v", status, e)
	}

	var del map[string]any
	status, _ := b.call(t, "DELETE", "/api/v1/consumer-groups/"+group+"/queues/"+url.PathEscape(q)+"?deleteMetadata=no", nil, &del)
	if status != http.StatusOK || del["metadataDeleted"] != false {
		t.Fatalf("deleteMetadata=no: %d %+v", status, del)
	}
	status, _ = b.call(t, "DELETE", "/api/v1/consumer-groups/"+group+"?deleteMetadata=Yes", nil, &del)
	if status != http.StatusOK || del["metadataDeleted"] != true {
		t.Fatalf("deleteMetadata=Yes: %d %+v", status, del)
	}

	// The message plane is typed, as in the reference: wait=yes is a bad request.
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+url.PathEscape(q)+"?wait=yes", nil, &e); status != http.StatusBadRequest {
		t.Fatalf("pop wait=yes: %d %+v", status, e)
	}
}
