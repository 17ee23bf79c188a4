package api

import (
	"net/http"
	"net/url"
	"testing"
	"time"
)

// Management routes read booleans as the reference does (http-api-v1.md
// §1.1): yes/no in any case as well as true/false and 1/0. The message plane
// refuses yes/no (TestMessagePlaneBooleansTakeGoSpellings).
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

// The message plane's booleans (a pop's autoAck, wait, autopilot) are read by
// the spec validator and the generated binders, which take Go's spellings:
// true/false, 1/0, t/f and T/F, TRUE/FALSE, True/False. The reference takes
// true/false only, so this is more lenient and every reference request still
// reads the same (docs/wire-compatibility.md). Other spellings are refused
// before anything is claimed.
func TestMessagePlaneBooleansTakeGoSpellings(t *testing.T) {
	b := newTestBroker(t)
	for _, c := range []struct {
		value  string
		leased bool
	}{
		{"true", false}, {"True", false}, {"TRUE", false}, {"t", false}, {"T", false}, {"1", false},
		{"false", true}, {"False", true}, {"FALSE", true}, {"f", true}, {"F", true}, {"0", true},
	} {
		q := uniqueQueue(t)
		b.push(t, q, "p", "m")
		p := b.pop(t, "/api/v1/pop/queue/"+url.PathEscape(q)+"?wait=false&autoAck="+c.value)
		if len(p.Messages) != 1 || (p.LeaseID != "") != c.leased {
			t.Fatalf("autoAck=%s: %+v, want one message, leased %v", c.value, p, c.leased)
		}
	}
	for _, value := range []string{"tRuE", "yes", "no", "2"} {
		q := uniqueQueue(t)
		b.push(t, q, "p", "m")
		var e errorBody
		status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+url.PathEscape(q)+"?wait=false&autoAck="+value, nil, &e)
		if status != http.StatusBadRequest || e.Code != "validation_failed" {
			t.Fatalf("autoAck=%s: %d %+v, want 400 validation_failed", value, status, e)
		}
		if p := b.pop(t, "/api/v1/pop/queue/"+url.PathEscape(q)+"?wait=false"); len(p.Messages) != 1 {
			t.Fatalf("autoAck=%s claimed the message it refused: %+v", value, p)
		}
	}
	// wait=1 parks for its timeout on an empty queue; wait=0 answers at once.
	q := uniqueQueue(t)
	start := time.Now()
	b.pop(t, "/api/v1/pop/queue/"+url.PathEscape(q)+"?wait=1&timeout=300")
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("wait=1&timeout=300 answered after %v, want a parked pop", waited)
	}
	start = time.Now()
	b.pop(t, "/api/v1/pop/queue/"+url.PathEscape(q)+"?wait=0&timeout=30000")
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("wait=0 answered after %v, want at once", waited)
	}
}
