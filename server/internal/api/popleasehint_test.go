package api

import (
	"net/http"
	"net/url"
	"testing"
	"time"
)

// leaseHint is what a pop's answer says of its lease.
type leaseHint struct {
	LeaseID        string     `json:"leaseId"`
	LeaseSeconds   *int       `json:"leaseSeconds"`
	LeaseExpiresAt *time.Time `json:"leaseExpiresAt"`
	Messages       []struct {
		PartitionID string `json:"partitionId"`
	} `json:"messages"`
}

// storedLeaseExpiry is the earliest expiry the database holds for lease.
func (b *testBroker) storedLeaseExpiry(t *testing.T, lease string) time.Time {
	t.Helper()
	var at time.Time
	if err := b.Pool.QueryRow(t.Context(), `SELECT min(lease_expires_at) FROM lanes.consumers WHERE lease_id = $1::uuid`,
		lease).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// checkLeaseHint fails unless the answer names a lease of want seconds ending
// when the database's earliest expiry of that lease does.
func (b *testBroker) checkLeaseHint(t *testing.T, got leaseHint, want int) {
	t.Helper()
	if got.LeaseSeconds == nil || *got.LeaseSeconds != want {
		t.Fatalf("leaseSeconds %v, want %d", got.LeaseSeconds, want)
	}
	if got.LeaseExpiresAt == nil {
		t.Fatal("no leaseExpiresAt")
	}
	if _, offset := got.LeaseExpiresAt.Zone(); offset != 0 {
		t.Fatalf("leaseExpiresAt %v is not UTC", got.LeaseExpiresAt)
	}
	if stored := b.storedLeaseExpiry(t, got.LeaseID); !got.LeaseExpiresAt.Equal(stored) {
		t.Fatalf("leaseExpiresAt %v, the database holds %v", got.LeaseExpiresAt, stored)
	}
}

// A leased pop's answer says how long its lease runs and when it ends, so a
// consumer need not assume a length: the request's leaseSeconds, else the
// queue's leaseTime, else 60 s, on the queue, partition and discovery pops.
func TestPopAnswerCarriesTheLeaseItWrote(t *testing.T) {
	b := newTestBroker(t)
	cases := []struct {
		name      string
		leaseTime int // 0: a push-created queue
		query     string
		want      int
	}{
		{"push-created queue", 0, "", 60},
		{"queue leaseTime 300", 300, "", 300},
		{"queue leaseTime 20", 20, "", 20},
		{"leaseSeconds over the queue's", 300, "leaseSeconds=45", 45},
		{"leaseSeconds past the cap", 20, "leaseSeconds=999999999", 31536000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := uniqueQueue(t)
			if c.leaseTime > 0 {
				b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"leaseTime": c.leaseTime}}, nil)
			}
			for i, route := range []string{"/api/v1/pop/queue/" + q, "/api/v1/pop/queue/" + q + "/partition/Default"} {
				txn := string(rune('a' + i))
				b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": i, "transactionId": txn}}}, nil)
				var got leaseHint
				if status, _ := b.call(t, "GET", route+"?batch=10&"+c.query, nil, &got); status != http.StatusOK {
					t.Fatalf("%s: %d", route, status)
				}
				b.checkLeaseHint(t, got, c.want)
				b.call(t, "POST", "/api/v1/ack", map[string]any{"transactionId": txn, "partitionId": got.Messages[0].PartitionID,
					"leaseId": got.LeaseID}, nil) // frees the partition for the next route
			}
		})
	}
}

// A discovery pop over queues of different lease times names the shortest
// lease it wrote: every message of the answer is leased at least that long.
func TestDiscoveryPopAnswerNamesItsShortestLease(t *testing.T) {
	b := newTestBroker(t)
	ns := uniqueQueue(t)
	for i, leaseTime := range []int{40, 20} {
		q := ns + "-" + string(rune('a'+i))
		b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "namespace": ns, "options": map[string]any{"leaseTime": leaseTime}}, nil)
		b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": i}}}, nil)
	}
	var got leaseHint
	if status, _ := b.call(t, "GET", "/api/v1/pop?namespace="+url.QueryEscape(ns)+"&batch=10&partitions=10", nil, &got); status != http.StatusOK || len(got.Messages) != 2 {
		t.Fatalf("discovery pop: %d %+v", status, got)
	}
	b.checkLeaseHint(t, got, 20)
	var latest time.Time
	if err := b.Pool.QueryRow(t.Context(), `SELECT max(lease_expires_at) FROM lanes.consumers WHERE lease_id = $1::uuid`,
		got.LeaseID).Scan(&latest); err != nil {
		t.Fatal(err)
	}
	if want := got.LeaseExpiresAt.Add(20 * time.Second); !latest.Equal(want) {
		t.Fatalf("the 40 s queue's lease ends %v, want %v", latest, want)
	}
}

// A pop parked until a push hands it a batch (the push claims for it) says
// the lease as a pop that claimed for itself does.
func TestHandedOffPopAnswerCarriesItsLease(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"leaseTime": 7}}, nil)
	warm := b.pushPop(t, q, "", "warm") // caches the group's pop plan, which hand-offs need
	b.call(t, "POST", "/api/v1/ack", map[string]any{"transactionId": "warm", "partitionId": warm.Messages[0].PartitionID, "leaseId": warm.LeaseID}, nil)
	done := make(chan leaseHint, 1)
	go func() {
		var got leaseHint
		b.call(t, "GET", "/api/v1/pop/queue/"+q+"?wait=true&timeout=10000", nil, &got)
		done <- got
	}()
	time.Sleep(300 * time.Millisecond) // parked
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 2}}}, nil)
	got := <-done
	if len(got.Messages) != 1 {
		t.Fatalf("parked pop got %+v", got)
	}
	b.checkLeaseHint(t, got, 7)
}

// An autoAck pop holds no lease: its answer names none.
func TestAutoAckPopAnswerNamesNoLease(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"leaseTime": 300}}, nil)
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1}}}, nil)
	var got map[string]any
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?autoAck=true&leaseSeconds=30", nil, &got); status != http.StatusOK {
		t.Fatalf("pop: %d", status)
	}
	if got["leaseId"] != "" {
		t.Fatalf("leaseId %v", got["leaseId"])
	}
	for _, field := range []string{"leaseSeconds", "leaseExpiresAt"} {
		if v, ok := got[field]; ok {
			t.Fatalf("autoAck answer carries %s: %v", field, v)
		}
	}
}
