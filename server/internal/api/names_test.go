package api

import (
	"net/http"
	"strings"
	"testing"
)

// Configure created queues named "" and " ", which push refuses; and push
// took "." and "..", which no URL client can address (they drop such path
// segments). Every route that creates a queue or partition applies one rule.
func TestNamesNoRouteCouldAddressAreRefusedEverywhere(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	cases := []struct {
		name, method, path, body, code, about string
	}{
		{"configure empty queue", "POST", "/api/v1/configure", `{"queue":""}`, CodeBadRequest, "non-empty"},
		{"configure blank queue", "POST", "/api/v1/configure", `{"queue":" "}`, CodeBadRequest, "non-empty"},
		{"configure dot queue", "POST", "/api/v1/configure", `{"queue":"."}`, CodeBadRequest, `".."`},
		{"push dot-dot queue", "POST", "/api/v1/push", `{"items":[{"queue":"..","payload":1}]}`, CodeBadRequest, `".."`},
		{"push dot partition", "POST", "/api/v1/push", `{"items":[{"queue":"` + q + `","partition":".","payload":1}]}`, CodeBadRequest, `".."`},
		{"transaction dot-dot queue", "POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"..","payload":1}]}]}`, CodeBadRequest, `".."`},
		{"transaction blank queue", "POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"  ","payload":1}]}]}`, CodeBadRequest, "non-empty"},
		{"timer to a dot queue", "POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":".","timerKey":"` + q + `","delayMs":0}]}`, "timers_bad_request", `".."`},
		{"timer to a blank queue", "POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":" ","timerKey":"` + q + `","delayMs":0}]}`, "timers_bad_request", "queue"},
		{"timer to a dot-dot partition", "POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"` + q + `","partition":"..","timerKey":"k","delayMs":0}]}`, "timers_bad_request", `".."`},
		{"pop with a dot-dot group", "GET", "/api/v1/pop/queue/" + q + "?consumerGroup=..&batch=1", "", CodeBadRequest, `".."`},
	}
	before := b.countRows(t, `SELECT count(*) FROM lanes.queues WHERE btrim(name) IN ('', '.', '..')`)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { b.wantBadRequest(t, c.method, c.path, c.body, c.code, c.about) })
	}
	if n := b.countRows(t, `SELECT count(*) FROM lanes.queues WHERE btrim(name) IN ('', '.', '..')`); n != before {
		t.Fatalf("refused requests created %d queues with such names", n-before)
	}
	if n := b.writtenUnder(t, q); n != 0 {
		t.Fatalf("refused requests wrote %d rows", n)
	}
	if n := b.countRows(t, `SELECT count(*) FROM lanes.timers WHERE timer_key = $1`, q); n != 0 {
		t.Fatalf("refused timers stored %d rows", n)
	}
	// Dots inside a name are ordinary.
	var ok []pushResult
	if status, _ := b.call(t, "POST", "/api/v1/push", `{"items":[{"queue":"`+q+`...","partition":".p.","payload":1}]}`, &ok); status != http.StatusCreated || ok[0].Status != "queued" {
		t.Fatalf("push with dots inside names: %d %+v", status, ok)
	}
}

// Push, pop, seek and timers stored partitions and consumer groups named " ",
// and a pop a queue so named, though push refuses such a queue and
// openapi.yaml says names hold more than white space. Every route that creates
// a queue, partition or group refuses a blank one; "" keeps meaning the
// default partition or queue mode.
func TestBlankPartitionAndGroupNamesAreRefusedWhereTheyAreCreated(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	var pushed []pushResult
	if status, _ := b.call(t, "POST", "/api/v1/push", `{"items":[{"queue":"`+q+`","payload":1}]}`, &pushed); status != http.StatusCreated {
		t.Fatalf("seeding push: %d %+v", status, pushed)
	}
	cases := []struct {
		name, method, path, body, code string
	}{
		{"push blank partition", "POST", "/api/v1/push", `{"items":[{"queue":"` + q + `","partition":" ","payload":1}]}`, CodeBadRequest},
		{"push tab partition", "POST", "/api/v1/push", `{"items":[{"queue":"` + q + `","partition":"\t","payload":1}]}`, CodeBadRequest},
		{"transaction push blank partition", "POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"` + q + `","partition":"  ","payload":1}]}]}`, CodeBadRequest},
		{"pop blank queue", "GET", "/api/v1/pop/queue/%20?batch=1", "", CodeBadRequest},
		{"pop blank group", "GET", "/api/v1/pop/queue/" + q + "?consumerGroup=%20&batch=1", "", CodeBadRequest},
		{"pop blank partition", "GET", "/api/v1/pop/queue/" + q + "/partition/%20?batch=1", "", CodeBadRequest},
		{"discovery pop blank group", "GET", "/api/v1/pop?namespace=" + q + "&consumerGroup=%20&batch=1", "", CodeBadRequest},
		{"seek blank group", "POST", "/api/v1/consumer-groups/%20/queues/" + q + "/seek", `{"toEnd":true}`, CodeBadRequest},
		{"partition seek blank group", "POST", "/api/v1/consumer-groups/%20/queues/" + q + "/partitions/Default/seek", `{"toEnd":true}`, CodeBadRequest},
		{"timer to a blank partition", "POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"` + q + `","partition":" ","timerKey":"` + q + `","delayMs":0}]}`, "timers_bad_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { b.wantBadRequest(t, c.method, c.path, c.body, c.code, "white space") })
	}
	if n := b.countRows(t, `SELECT count(*) FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND p.name <> 'Default'`, q); n != 0 {
		t.Fatalf("refused requests created %d partitions", n)
	}
	if n := b.countRows(t, `SELECT count(*) FROM lanes.queues WHERE name <> '' AND btrim(name) = ''`); n != 0 {
		t.Fatalf("refused requests created %d blank-named queues", n)
	}
	if n := b.countRows(t, `SELECT (SELECT count(*) FROM lanes.consumers WHERE consumer_group <> '' AND btrim(consumer_group) = '')
		+ (SELECT count(*) FROM lanes.consumer_groups WHERE consumer_group <> '' AND btrim(consumer_group) = '')
		+ (SELECT count(*) FROM lanes.discovery_subscriptions WHERE consumer_group <> '' AND btrim(consumer_group) = '')`); n != 0 {
		t.Fatalf("refused requests stored %d blank-named group rows", n)
	}
	if n := b.countRows(t, `SELECT count(*) FROM lanes.timers WHERE timer_key = $1`, q); n != 0 {
		t.Fatalf("refused timers stored %d rows", n)
	}
	// Empty is the default partition and queue mode; white space around a name is part of it.
	if status, _ := b.call(t, "POST", "/api/v1/push", `{"items":[{"queue":"`+q+`","partition":"","payload":2},{"queue":"`+q+`","partition":" p ","payload":3}]}`, &pushed); status != http.StatusCreated || pushed[0].Status != "queued" || pushed[1].Status != "queued" {
		t.Fatalf("push with an empty and a padded partition: %d %+v", status, pushed)
	}
	var popped popBody
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?consumerGroup=&batch=1", nil, &popped); status != http.StatusOK {
		t.Fatalf("queue-mode pop with an empty consumerGroup: %d", status)
	}
}

// Pops and seeks refused a consumer group named with white space only, but
// acks, the group's detail, its deletes, the subscription update and the
// depth and DLQ filters took it as a group of its own (an ack answered
// success:false, a delete succeeded on nothing). Every route that takes a
// group answers such a name the pop's 400 and changes nothing; "" keeps
// meaning queue mode or no filter where the route takes it so.
func TestBlankGroupNamesAreRefusedOnEveryRouteThatTakesAGroupButTheDeletes(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	var pushed []pushResult
	if status, _ := b.call(t, "POST", "/api/v1/push", `{"items":[{"queue":"`+q+`","payload":1}]}`, &pushed); status != http.StatusCreated {
		t.Fatalf("seeding push: %d %+v", status, pushed)
	}
	var popped popBody
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=1&leaseSeconds=60", nil, &popped); status != http.StatusOK || len(popped.Messages) != 1 {
		t.Fatalf("seeding pop: %d %+v", status, popped)
	}
	m := popped.Messages[0]
	ack := func(group string) string {
		return `"transactionId":"` + m.TransactionID + `","partitionId":"` + m.PartitionID + `","leaseId":"` + popped.LeaseID + `","consumerGroup":"` + group + `"`
	}
	for _, blank := range []struct{ name, json, url string }{{"space", " ", "%20"}, {"tab", `\t`, "%09"}, {"ideographic space", `\u3000`, "%E3%80%80"}} {
		cases := []struct {
			name, method, path, body string
		}{
			{"pop", "GET", "/api/v1/pop/queue/" + q + "?consumerGroup=" + blank.url + "&batch=1", ""},
			{"partition pop", "GET", "/api/v1/pop/queue/" + q + "/partition/Default?consumerGroup=" + blank.url + "&batch=1", ""},
			{"discovery pop", "GET", "/api/v1/pop?namespace=" + q + "&consumerGroup=" + blank.url + "&batch=1", ""},
			{"ack", "POST", "/api/v1/ack", `{` + ack(blank.json) + `}`},
			{"batch ack", "POST", "/api/v1/ack/batch", `{"consumerGroup":"` + blank.json + `","acknowledgments":[{"transactionId":"` + m.TransactionID + `","partitionId":"` + m.PartitionID + `","leaseId":"` + popped.LeaseID + `"}]}`},
			{"transaction ack", "POST", "/api/v1/transaction", `{"operations":[{"type":"ack",` + ack(blank.json) + `}]}`},
			{"group detail", "GET", "/api/v1/consumer-groups/" + blank.url, ""},
			{"subscription update", "POST", "/api/v1/consumer-groups/" + blank.url + "/subscription", `{"subscriptionTimestamp":"2026-01-01T00:00:00Z"}`},
			{"seek", "POST", "/api/v1/consumer-groups/" + blank.url + "/queues/" + q + "/seek", `{"toEnd":true}`},
			{"partition seek", "POST", "/api/v1/consumer-groups/" + blank.url + "/queues/" + q + "/partitions/Default/seek", `{"toEnd":true}`},
			{"depth filter", "GET", "/api/v1/resources/queues/" + q + "/depth?group=" + blank.url, ""},
			{"DLQ listing filter", "GET", "/api/v1/dlq?queue=" + q + "&consumerGroup=" + blank.url, ""},
			{"DLQ purge filter", "DELETE", "/api/v1/dlq?queue=" + q + "&consumerGroup=" + blank.url, ""},
		}
		for _, c := range cases {
			t.Run(blank.name+" "+c.name, func(t *testing.T) { b.wantBadRequest(t, c.method, c.path, c.body, CodeBadRequest, "white space") })
		}
	}
	if n := b.countRows(t, `SELECT (SELECT count(*) FROM lanes.consumers WHERE consumer_group <> '' AND btrim(consumer_group) = '')
		+ (SELECT count(*) FROM lanes.consumer_groups WHERE consumer_group <> '' AND btrim(consumer_group) = '')`); n != 0 {
		t.Fatalf("refused requests stored %d blank-named group rows", n)
	}
	// The refused acks left the lease alone; "" is queue mode on an ack and no filter on depth and the DLQ.
	var acked []struct {
		Success bool `json:"success"`
	}
	if status, _ := b.call(t, "POST", "/api/v1/ack", `{`+ack("")+`}`, &acked); status != http.StatusOK || len(acked) != 1 || !acked[0].Success {
		t.Fatalf("queue-mode ack after the refused ones: %d %+v", status, acked)
	}
	for _, path := range []string{"/api/v1/resources/queues/" + q + "/depth?group=", "/api/v1/dlq?queue=" + q + "&consumerGroup="} {
		if status, _ := b.call(t, "GET", path, nil, nil); status != http.StatusOK {
			t.Fatalf("GET %s: %d", path, status)
		}
	}
}

// A group stored under a white-space-only name by a broker before that rule holds back
// retention like any cursor; the group deletes still take such a name, so it can be removed.
func TestBlankNamedGroupsStoredBeforeTheRuleCanBeDeleted(t *testing.T) {
	b := newTestBroker(t)
	for _, c := range []struct{ name, stored, path string }{
		{"every queue", " ", "/api/v1/consumer-groups/%20"},
		{"one queue", "\t", "/api/v1/consumer-groups/%09/queues/"},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := uniqueQueue(t)
			b.push(t, q, "Default", "t1")
			b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=legacy-"+q+"&batch=1&autoAck=true")
			for _, table := range []string{"lanes.consumers", "lanes.consumer_groups"} {
				if _, err := b.Pool.Exec(t.Context(), "UPDATE "+table+" SET consumer_group = $1 WHERE consumer_group = $2", c.stored, "legacy-"+q); err != nil {
					t.Fatal(err)
				}
			}
			path := c.path
			if strings.HasSuffix(path, "/queues/") {
				path += q
			}
			var deleted struct {
				DeletedPartitions int `json:"deletedPartitions"`
			}
			if status, _ := b.call(t, "DELETE", path+"?deleteMetadata=true", nil, &deleted); status != http.StatusOK || deleted.DeletedPartitions != 1 {
				t.Fatalf("DELETE %s: %d %+v", path, status, deleted)
			}
			if n := b.countRows(t, "SELECT count(*) FROM lanes.consumers WHERE consumer_group = $1", c.stored); n != 0 {
				t.Fatalf("%d cursors left under the blank name", n)
			}
		})
	}
}
