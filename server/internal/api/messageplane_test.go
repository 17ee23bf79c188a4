package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

type pushResult struct {
	Index         int    `json:"index"`
	MessageID     string `json:"message_id"`
	TransactionID string `json:"transaction_id"`
	QueueName     string `json:"queueName"`
	Status        string `json:"status"`
}

type popBody struct {
	LeaseID  string `json:"leaseId"`
	Messages []struct {
		ID            string `json:"id"`
		TransactionID string `json:"transactionId"`
		PartitionID   string `json:"partitionId"`
		Data          any    `json:"data"`
	} `json:"messages"`
}

func TestPushPopAckRoundTrip(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	var pushed []pushResult
	status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": q, "partition": "customer-42", "payload": map[string]any{"orderId": 9137}, "transactionId": "order-9137"},
	}}, &pushed)
	if status != http.StatusCreated || len(pushed) != 1 || pushed[0].Status != "queued" || pushed[0].QueueName != q {
		t.Fatalf("push: %d %+v", status, pushed)
	}
	var dup []pushResult
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": q, "partition": "customer-42", "payload": 1, "transactionId": "order-9137"},
	}}, &dup)
	if dup[0].Status != "duplicate" || dup[0].MessageID != pushed[0].MessageID {
		t.Fatalf("duplicate: %+v", dup)
	}
	var popped popBody
	status, _ = b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=10", nil, &popped)
	if status != http.StatusOK || len(popped.Messages) != 1 || popped.Messages[0].ID != pushed[0].MessageID {
		t.Fatalf("pop: %d %+v", status, popped)
	}
	// The reference answers a single ack as /ack/batch does: an array holding the one result.
	var acked []map[string]any
	status, _ = b.call(t, "POST", "/api/v1/ack", map[string]any{
		"transactionId": "order-9137", "partitionId": popped.Messages[0].PartitionID, "leaseId": popped.LeaseID,
	}, &acked)
	if status != http.StatusOK || len(acked) != 1 || acked[0]["success"] != true || acked[0]["leaseReleased"] != true ||
		acked[0]["index"] != float64(0) || acked[0]["transactionId"] != "order-9137" {
		t.Fatalf("ack: %d %+v; want an array of one result", status, acked)
	}
	status, hdr := b.call(t, "GET", "/api/v1/pop/queue/"+q, nil, nil)
	if status != http.StatusNoContent || hdr.Get("Content-Length") != "" {
		t.Fatalf("empty pop must be a bare 204: %d %v", status, hdr)
	}
}

// pushAndPop pushes one message to a fresh queue and pops it under a lease.
func (b *testBroker) pushAndPop(t *testing.T, q string) (transactionID, partitionID, leaseID string) {
	t.Helper()
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1, "transactionId": q + "-m"}}}, nil)
	var popped popBody
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q, nil, &popped); status != http.StatusOK || len(popped.Messages) != 1 {
		t.Fatalf("pop: %d %+v", status, popped)
	}
	m := popped.Messages[0]
	return m.TransactionID, m.PartitionID, popped.LeaseID
}

// queueModeCursor reads the queue-mode consumer row of a partition.
func (b *testBroker) queueModeCursor(t *testing.T, partitionID string) (committed int64, retries int) {
	t.Helper()
	if err := b.Pool.QueryRow(t.Context(), `SELECT committed, retry_count FROM lanes.consumers
		WHERE partition_id = $1 AND consumer_group = '__QUEUE_MODE__'`, partitionID).Scan(&committed, &retries); err != nil {
		t.Fatal(err)
	}
	return committed, retries
}

// The reference's normalisation table: an absent or null status completes, a
// sent "" fails (charges the retry budget and redelivers), on every ack route.
func TestAckStatusEmptyFailsWhileAbsentOrNullCompletes(t *testing.T) {
	b := newTestBroker(t)
	routes := []struct {
		name string
		send func(t *testing.T, status, txn, partition, lease string)
	}{
		{"ack", func(t *testing.T, status, txn, partition, lease string) {
			b.call(t, "POST", "/api/v1/ack", `{"transactionId":"`+txn+`","partitionId":"`+partition+`","leaseId":"`+lease+`"`+status+`}`, nil)
		}},
		{"ack batch", func(t *testing.T, status, txn, partition, lease string) {
			b.call(t, "POST", "/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"`+txn+`","partitionId":"`+partition+`","leaseId":"`+lease+`"`+status+`}]}`, nil)
		}},
		{"transaction", func(t *testing.T, status, txn, partition, lease string) {
			var res txResultBody
			b.call(t, "POST", "/api/v1/transaction", `{"operations":[{"type":"ack","transactionId":"`+txn+`","partitionId":"`+partition+`","leaseId":"`+lease+`"`+status+`}]}`, &res)
			if !res.Success {
				t.Fatalf("transaction: %+v", res)
			}
		}},
	}
	statuses := []struct {
		name, field string
		fails       bool
	}{
		{"empty string", `,"status":""`, true},
		{"unknown word", `,"status":"done"`, true},
		{"absent", ``, false},
		{"null", `,"status":null`, false},
	}
	for _, r := range routes {
		for _, st := range statuses {
			t.Run(r.name+"/"+st.name, func(t *testing.T) {
				txn, partition, lease := b.pushAndPop(t, uniqueQueue(t))
				r.send(t, st.field, txn, partition, lease)
				committed, retries := b.queueModeCursor(t, partition)
				if st.fails && (committed != -1 || retries != 1) {
					t.Fatalf("a sent \"\" must fail: committed=%d retry_count=%d", committed, retries)
				}
				if !st.fails && (committed != 0 || retries != 0) {
					t.Fatalf("must complete: committed=%d retry_count=%d", committed, retries)
				}
			})
		}
	}
}

// The reference clients spell "new" also new-only, new_only and newonly; the
// mode is read in any letter case on every pop route.
func TestPopSubscriptionModeAcceptsTheReferenceSpellings(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1}}}, nil)
	cases := []struct {
		mode      string
		delivered bool
	}{
		{"new-only", false}, {"new_only", false}, {"newonly", false}, {"NEW", false}, {"New-Only", false},
		{"ALL", true}, {"all", true},
	}
	for i, c := range cases {
		for _, route := range []string{"/api/v1/pop/queue/" + q, "/api/v1/pop/queue/" + q + "/partition/Default"} {
			var e errorBody
			status, _ := b.call(t, "GET", fmt.Sprintf("%s?consumerGroup=g%d-%d&subscriptionMode=%s", route, i, len(route), c.mode), nil, &e)
			if want := map[bool]int{false: http.StatusNoContent, true: http.StatusOK}[c.delivered]; status != want {
				t.Fatalf("%s subscriptionMode=%s: %d %+v, want %d", route, c.mode, status, e, want)
			}
		}
	}
	if status, _ := b.call(t, "GET", "/api/v1/pop?namespace="+q+"&consumerGroup=g&subscriptionMode=new-only", nil, nil); status != http.StatusNoContent {
		t.Fatalf("discovery subscriptionMode=new-only: %d", status)
	}
	var e errorBody
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?consumerGroup=g&subscriptionMode=from_beginning", nil, &e); status != http.StatusBadRequest || !strings.Contains(e.Error, "subscriptionMode") {
		t.Fatalf("an unknown mode must be a 400 naming subscriptionMode: %d %+v", status, e)
	}
}

// A discovery pop without namespace or task keeps the reference's 400 body,
// which clients may read, and adds our code.
func TestPopDiscoverWithoutScopeKeepsTheReferenceBody(t *testing.T) {
	b := newTestBroker(t)
	var body map[string]any
	status, _ := b.call(t, "GET", "/api/v1/pop?consumerGroup=g", nil, &body)
	messages, isList := body["messages"].([]any)
	if status != http.StatusBadRequest || body["success"] != false || body["error"] != "namespace or task is required" ||
		!isList || len(messages) != 0 || body["code"] != CodeBadRequest {
		t.Fatalf("%d %v", status, body)
	}
}

func TestBadInputIsRejectedWithACodeAndStoresNothing(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	cases := []struct {
		name, method, path string
		body               any
		status             int
	}{
		{"malformed JSON", "POST", "/api/v1/push", `{"items": [`, 400},
		{"missing items", "POST", "/api/v1/push", `{}`, 400},
		{"missing queue", "POST", "/api/v1/push", `{"items":[{"payload":1}]}`, 400},
		{"missing payload", "POST", "/api/v1/push", `{"items":[{"queue":"` + q + `"}]}`, 400},
		{"one bad item fails the request", "POST", "/api/v1/push", `{"items":[{"queue":"` + q + `","payload":1},{"queue":"` + q + `"}]}`, 400},
		{"batch not a number", "GET", "/api/v1/pop/queue/" + q + "?batch=abc", nil, 400},
		{"negative batch", "GET", "/api/v1/pop/queue/" + q + "?batch=-5", nil, 400},
		{"negative timeout", "GET", "/api/v1/pop/queue/" + q + "?wait=true&timeout=-1", nil, 400},
		{"bad subscription mode", "GET", "/api/v1/pop/queue/" + q + "?subscriptionMode=sometimes", nil, 400},
		{"discovery without namespace or task", "GET", "/api/v1/pop", nil, 400},
		{"ack without partitionId", "POST", "/api/v1/ack", `{"transactionId":"x"}`, 400},
		{"ack with a numeric transactionId", "POST", "/api/v1/ack", `{"transactionId":5,"partitionId":"p"}`, 400},
		{"ack batch without acknowledgments", "POST", "/api/v1/ack/batch", `{}`, 400},
		{"ack batch item without transactionId", "POST", "/api/v1/ack/batch", `{"acknowledgments":[{"partitionId":"p"}]}`, 400},
		{"ack batch not an array", "POST", "/api/v1/ack/batch", `{"acknowledgments":{}}`, 400},
		{"configure bad option", "POST", "/api/v1/configure", `{"queue":"` + q + `","options":{"retryLimit":-1}}`, 400},
		{"configure bad mode", "POST", "/api/v1/configure", `{"queue":"` + q + `","mode":"upsert"}`, 400},
		{"unknown route", "GET", "/api/v1/nothing-here", nil, 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e errorBody
			status, hdr := b.call(t, c.method, c.path, c.body, &e)
			if status != c.status || e.Code == "" || e.Error == "" {
				t.Fatalf("want %d with {error, code}, got %d %+v", c.status, status, e)
			}
			if ct := hdr.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("content type %q", ct)
			}
		})
	}
	if n := b.segmentsOf(t, q); n != 0 {
		t.Fatalf("rejected requests stored %d segments", n)
	}
}

func TestConfigureIsAFullReplaceUnlessMerge(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	type cfg struct {
		Options map[string]any `json:"options"`
	}
	var out cfg
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"leaseTime": 30, "dedupWindowSeconds": 10}}, &out)
	if out.Options["leaseTime"] != float64(30) || out.Options["dedupWindowSeconds"] != float64(10) {
		t.Fatalf("configure: %+v", out.Options)
	}
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "mode": "merge", "options": map[string]any{"retryLimit": 7}}, &out)
	if out.Options["leaseTime"] != float64(30) || out.Options["retryLimit"] != float64(7) {
		t.Fatalf("merge kept omitted options? %+v", out.Options)
	}
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"retryLimit": 5}}, &out)
	if out.Options["leaseTime"] != float64(300) || out.Options["dedupWindowSeconds"] != float64(3600) {
		t.Fatalf("replace must reset omitted options to defaults: %+v", out.Options)
	}
	var detail struct {
		Options map[string]any `json:"options"`
	}
	status, _ := b.call(t, "GET", "/api/v1/resources/queues/"+q, nil, &detail)
	if status != 200 || detail.Options["retryLimit"] != float64(5) || len(detail.Options) != 21 {
		t.Fatalf("queue detail: %d %d keys %+v", status, len(detail.Options), detail.Options)
	}
}

// docs/wire-compatibility.md: a configure that leaves the labels out, or sends
// them null, keeps them, replace or merge; a string sent changes them.
func TestConfigureKeepsTheLabelsItDoesNotSet(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	type labels struct {
		Namespace string `json:"namespace"`
		Task      string `json:"task"`
	}
	var out labels
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"namespace": "ns", "task": "t"}}, &out)
	if out != (labels{"ns", "t"}) {
		t.Fatalf("labels set: %+v", out)
	}
	for _, body := range []map[string]any{
		{"queue": q, "options": map[string]any{"retryLimit": 5}},
		{"queue": q, "options": map[string]any{"namespace": nil, "task": nil}},
		{"queue": q, "mode": "merge", "options": map[string]any{"namespace": nil}},
	} {
		b.call(t, "POST", "/api/v1/configure", body, &out)
		if out != (labels{"ns", "t"}) {
			t.Fatalf("%v: labels %+v, want them kept", body, out)
		}
	}
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "namespace": ""}, &out)
	if out != (labels{"", "t"}) {
		t.Fatalf("a sent namespace: %+v", out)
	}
}

func TestLeaseExtendAnswersTheThreeExpiryKeys(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1}}}, nil)
	var popped popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"?leaseSeconds=5", nil, &popped)
	var ext map[string]any
	status, _ := b.call(t, "POST", "/api/v1/lease/"+popped.LeaseID+"/extend", map[string]any{"seconds": 120}, &ext)
	if status != 200 || ext["success"] != true || ext["renewed"] != float64(1) {
		t.Fatalf("extend: %d %+v", status, ext)
	}
	for _, k := range []string{"newExpiresAt", "expiresAt", "lease_expires_at"} {
		if ext[k] == nil || ext[k] != ext["expiresAt"] {
			t.Fatalf("%s = %v", k, ext[k])
		}
	}
}

// Lease extension follows the reference: any body renews (what is not a usable
// seconds means 60), below 1 is 1, and a huge value is cut to a year instead
// of overflowing the lease column into a 500.
func TestLeaseExtendDefaultsClampsAndCapsSeconds(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1}}}, nil)
	var popped popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"?leaseSeconds=5", nil, &popped)
	// In this order: a lease never shortens, so each expects at least the last expiry.
	cases := []struct {
		name, body string
		atLeast    time.Duration
	}{
		{"zero is clamped to 1", `{"seconds":0}`, 0},
		{"negative is clamped to 1", `{"seconds":-5}`, 0},
		{"not JSON means 60", `garbage`, 55 * time.Second},
		{"null means 60", `{"seconds":null}`, 55 * time.Second},
		{"a string means 60", `{"seconds":"soon"}`, 55 * time.Second},
		{"empty body means 60", ``, 55 * time.Second},
		{"huge is cut to a year", `{"seconds":9223372036854775807}`, 364 * 24 * time.Hour},
	}
	for _, c := range cases {
		var ext struct {
			Success   bool       `json:"success"`
			Renewed   int        `json:"renewed"`
			ExpiresAt *time.Time `json:"expiresAt"`
		}
		status, _ := b.call(t, "POST", "/api/v1/lease/"+popped.LeaseID+"/extend", c.body, &ext)
		if status != http.StatusOK || !ext.Success || ext.Renewed != 1 || ext.ExpiresAt == nil {
			t.Fatalf("%s: %d %+v", c.name, status, ext)
		}
		if left := time.Until(*ext.ExpiresAt); left < c.atLeast || left > 366*24*time.Hour {
			t.Fatalf("%s: lease expires in %v", c.name, left)
		}
	}
}

// A pop's leaseSeconds <= 0 means "not given" (the queue's leaseTime) as in
// the reference, and a huge one is cut to a year.
func TestPopLeaseSecondsNegativeIsAbsentAndHugeIsCapped(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"leaseTime": 120}}, nil)
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": q, "partition": "a", "payload": 1}, {"queue": q, "partition": "b", "payload": 2}}}, nil)
	leaseLeft := func(leaseSeconds string) time.Duration {
		t.Helper()
		var popped popBody
		if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?leaseSeconds="+leaseSeconds, nil, &popped); status != http.StatusOK {
			t.Fatalf("leaseSeconds=%s: %d", leaseSeconds, status)
		}
		var left float64
		if err := b.Pool.QueryRow(t.Context(), `SELECT extract(epoch FROM lease_expires_at - now()) FROM lanes.consumers WHERE lease_id = $1`,
			popped.LeaseID).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return time.Duration(left * float64(time.Second))
	}
	if left := leaseLeft("-5"); left < 110*time.Second || left > 121*time.Second {
		t.Fatalf("leaseSeconds=-5 must take the queue's leaseTime (120 s); lease left %v", left)
	}
	if left := leaseLeft("99999999999"); left < 364*24*time.Hour || left > 366*24*time.Hour {
		t.Fatalf("leaseSeconds=99999999999 must be cut to a year; lease left %v", left)
	}
}

// An ack retried after its answer was lost (docs/retries.md §5) finds the
// batch completed and its lease released: a completed ack the cursor already
// covers is a harmless duplicate (noop), while a nack of it stays an error.
func TestARetriedAckOfACompletedBatchIsANoop(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.push(t, q, "p", "m1", "m2")
	p := b.pop(t, "/api/v1/pop/queue/"+q+"?batch=2")
	if len(p.Messages) != 2 {
		t.Fatalf("pop: %+v", p)
	}
	acks := func(status string) []map[string]any {
		out := make([]map[string]any, len(p.Messages))
		for i, m := range p.Messages {
			out[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": p.LeaseID, "status": status}
		}
		return out
	}
	for try := 1; try <= 2; try++ {
		var out []map[string]any
		b.call(t, "POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks("completed")}, &out)
		for _, r := range out {
			if r["success"] != true || (try == 2 && r["noop"] != true) {
				t.Fatalf("try %d of the ack batch: %+v", try, out)
			}
		}
	}
	var one []map[string]any
	if b.call(t, "POST", "/api/v1/ack", acks("completed")[1], &one); len(one) != 1 || one[0]["success"] != true || one[0]["noop"] != true {
		t.Fatalf("single ack retried: %+v", one)
	}
	if b.call(t, "POST", "/api/v1/ack", acks("failed")[0], &one); len(one) != 1 || one[0]["success"] != false {
		t.Fatalf("a nack of the completed batch with its released lease: %+v", one)
	}
}

// Valid JSON holding a value of the wrong type answers validation_failed on
// push, ack and ack batch (whose bodies skip the spec validator) as on every
// other route; malformed JSON answers invalid_json on every route.
func TestAWrongJSONTypeIsValidationFailedOnEveryRoute(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	cases := []struct {
		name, path, body, code string
	}{
		{"push queue a number", "/api/v1/push", `{"items":[{"queue":5,"payload":1}]}`, CodeValidation},
		{"push items an object", "/api/v1/push", `{"items":{}}`, CodeValidation},
		{"push malformed", "/api/v1/push", `{"items": [`, CodeInvalidJSON},
		{"ack transactionId a number", "/api/v1/ack", `{"transactionId":5,"partitionId":"p"}`, CodeValidation},
		{"ack malformed", "/api/v1/ack", `{"transactionId":`, CodeInvalidJSON},
		{"ack batch acknowledgments an object", "/api/v1/ack/batch", `{"acknowledgments":{}}`, CodeValidation},
		{"ack batch item a string", "/api/v1/ack/batch", `{"acknowledgments":["x"]}`, CodeValidation},
		{"ack batch malformed", "/api/v1/ack/batch", `{"acknowledgments":[}`, CodeInvalidJSON},
		{"configure queue a number (spec-validated)", "/api/v1/configure", `{"queue":5}`, CodeValidation},
		{"configure malformed (spec-validated)", "/api/v1/configure", `{"queue":`, CodeInvalidJSON},
		{"transaction operations a string (spec-validated)", "/api/v1/transaction", `{"operations":"` + q + `"}`, CodeValidation},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e errorBody
			if status, _ := b.call(t, "POST", c.path, c.body, &e); status != http.StatusBadRequest || e.Code != c.code {
				t.Fatalf("want 400 %s, got %d %+v", c.code, status, e)
			}
		})
	}
}

// Bounds the spec states are enforced by its validator, with its code; KV's
// family keeps kv_bad_request, and a queue option invalid_option.
func TestSpecBoundsAnswerTheValidatorsCode(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	cases := []struct {
		name, path, body, code string
	}{
		{"minPopWaitTime above 60000", "/api/v1/configure", `{"queue":"` + q + `","options":{"minPopWaitTime":60001}}`, CodeInvalidOption},
		{"retentionSinkHoldMaxSeconds below 60", "/api/v1/configure", `{"queue":"` + q + `","options":{"retentionSinkHoldMaxSeconds":59}}`, CodeInvalidOption},
		{"retentionSinkHold off its pattern", "/api/v1/configure", `{"queue":"` + q + `","options":{"retentionSinkHold":"a b"}}`, CodeInvalidOption},
		{"getMany without keys", "/api/v1/kv", `{"operations":[{"op":"getMany","ns":"` + q + `","keys":[]}]}`, "kv_bad_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e errorBody
			if status, _ := b.call(t, "POST", c.path, c.body, &e); status != http.StatusBadRequest || e.Code != c.code {
				t.Fatalf("want 400 %s, got %d %+v", c.code, status, e)
			}
		})
	}
	var ok map[string]any
	if status, _ := b.call(t, "POST", "/api/v1/configure", `{"queue":"`+q+`","options":{"minPopWaitTime":60000,"retentionSinkHoldMaxSeconds":60}}`, &ok); status != http.StatusOK {
		t.Fatalf("the bounds themselves: %d %+v", status, ok)
	}
}

// An id that repeats in a partition, over HTTP. Re-sent after a one-second
// dedup window, the leased ack of the copy a group's pop delivered completes
// it (it answered unresolvable and redelivered forever). With dedup off, the
// leased ack of x out of [x, y, x] commits the first x only, so y is still
// delivered (it was skipped as if acked).
func TestAckOfARepeatedTransactionIDNamesTheDeliveredCopy(t *testing.T) {
	b := newTestBroker(t)
	ackOne := func(t *testing.T, p popBody, i int, group string) map[string]any {
		t.Helper()
		var out []map[string]any
		body := map[string]any{"transactionId": p.Messages[i].TransactionID, "partitionId": p.Messages[i].PartitionID,
			"leaseId": p.LeaseID}
		if group != "" {
			body["consumerGroup"] = group
		}
		if status, _ := b.call(t, "POST", "/api/v1/ack", body, &out); status != http.StatusOK || len(out) != 1 {
			t.Fatalf("ack: %d %+v", status, out)
		}
		return out[0]
	}
	popN := func(t *testing.T, path string) popBody {
		t.Helper()
		var p popBody
		if status, _ := b.call(t, "GET", path, nil, &p); status != http.StatusOK && status != http.StatusNoContent {
			t.Fatalf("GET %s: %d", path, status)
		}
		return p
	}
	t.Run("re-sent after the dedup window", func(t *testing.T) {
		q := uniqueQueue(t)
		b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"dedupWindowSeconds": 1}}, nil)
		send := func(payload string) {
			b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
				{"queue": q, "partition": "p", "transactionId": "evt-1", "payload": payload}}}, nil)
		}
		send("first")
		time.Sleep(1300 * time.Millisecond)
		send("second")
		path := "/api/v1/pop/queue/" + q + "?consumerGroup=g&subscriptionMode=all&batch=1"
		p := popN(t, path)
		if len(p.Messages) != 1 || p.Messages[0].Data != "first" {
			t.Fatalf("first pop: %+v", p)
		}
		if out := ackOne(t, p, 0, "g"); out["success"] != true || out["leaseReleased"] != true {
			t.Fatalf("ack of the delivered copy: %+v", out)
		}
		if next := popN(t, path); len(next.Messages) != 1 || next.Messages[0].Data != "second" {
			t.Fatalf("after the ack the next pop delivers %+v, want the second copy", next)
		}
	})
	t.Run("dedup off", func(t *testing.T) {
		q := uniqueQueue(t)
		b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"dedupWindowSeconds": 0}}, nil)
		b.push(t, q, "p", "x", "y", "x")
		p := popN(t, "/api/v1/pop/queue/"+q+"?batch=3")
		if len(p.Messages) != 3 {
			t.Fatalf("pop: %+v", p)
		}
		if out := ackOne(t, p, 0, ""); out["success"] != true || out["leaseReleased"] != false {
			t.Fatalf("ack of the first x: %+v", out)
		}
		if committed, _ := b.queueModeCursor(t, p.Messages[0].PartitionID); committed != 0 {
			t.Fatalf("the ack of the first x committed through offset %d, want 0", committed)
		}
	})
}

// A misspelled option is refused, in either form of the body: under the default
// replace it would otherwise reset the option it meant to set, silently.
func TestConfigureRefusesUnknownOptions(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	var out struct {
		Options map[string]any `json:"options"`
	}
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"dedupWindowSeconds": 10}}, &out)
	for name, body := range map[string]map[string]any{
		"options object": {"queue": q, "options": map[string]any{"dedupWindowSecs": 0, "retryLimit": 2}},
		"top level":      {"queue": q, "mode": "replace", "dedupWindowSecs": 0},
	} {
		var bad struct {
			Code    string `json:"code"`
			Invalid string `json:"invalid"`
		}
		status, _ := b.call(t, "POST", "/api/v1/configure", body, &bad)
		if status != 400 || bad.Code != "invalid_option" || bad.Invalid != "dedupWindowSecs" {
			t.Fatalf("%s: %d %+v", name, status, bad)
		}
	}
	var detail struct {
		Options map[string]any `json:"options"`
	}
	b.call(t, "GET", "/api/v1/resources/queues/"+q, nil, &detail)
	if detail.Options["dedupWindowSeconds"] != float64(10) || detail.Options["retryLimit"] != float64(3) {
		t.Fatalf("a refused configure changed the queue: %+v", detail.Options)
	}
	status, _ := b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "namespace": "n", "task": "t", "retryLimit": 4}, &out)
	if status != 200 || out.Options["retryLimit"] != float64(4) {
		t.Fatalf("top-level options beside the body's own fields: %d %+v", status, out.Options)
	}
	// namespace and task are options in the reference's table too.
	var labeled struct {
		Namespace string `json:"namespace"`
		Task      string `json:"task"`
	}
	status, _ = b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"namespace": "n2", "task": "t2"}}, &labeled)
	if status != 200 || labeled.Namespace != "n2" || labeled.Task != "t2" {
		t.Fatalf("namespace and task inside options: %d %+v", status, labeled)
	}
}
