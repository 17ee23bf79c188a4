package api

import (
	"net/http"
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
