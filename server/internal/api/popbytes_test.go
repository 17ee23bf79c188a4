package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/lanesmq/lanes/server/internal/engine"
)

// Every pop route answers within the broker's pop byte budget: 10 messages
// of 40 KiB under a 100 KiB budget go out three a pop, and after an ack of
// each answer the next pop takes the next three, until all ten went out once.
func TestEveryPopRouteStopsAtTheByteBudget(t *testing.T) {
	b := newTestBrokerWith(t, engine.Config{PopMaxBytes: 100 << 10})
	for _, route := range []string{"queue", "partition", "discovery", "autoAck"} {
		t.Run(route, func(t *testing.T) {
			ns := strings.ReplaceAll(uniqueQueue(t), ".", "-")
			q := ns + ".task"
			items := make([]map[string]any, 10)
			for i := range items {
				items[i] = map[string]any{"queue": q, "partition": "p", "transactionId": fmt.Sprintf("m%d", i),
					"payload": strings.Repeat("x", 40<<10)}
			}
			if status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": items}, nil); status != http.StatusOK && status != http.StatusCreated {
				t.Fatalf("push: %d", status)
			}
			path := map[string]string{
				"queue":     "/api/v1/pop/queue/" + q + "?batch=200",
				"partition": "/api/v1/pop/queue/" + q + "/partition/p?batch=200",
				"discovery": "/api/v1/pop?namespace=" + ns + "&batch=200",
				"autoAck":   "/api/v1/pop/queue/" + q + "?batch=200&autoAck=true",
			}[route]
			var got []string
			for pops := 0; pops < 6; pops++ {
				var popped popBody
				status, _ := b.call(t, "GET", path+"&wait=false", nil, &popped)
				if status == http.StatusNoContent {
					break
				}
				if status != http.StatusOK || len(popped.Messages) == 0 || len(popped.Messages) > 3 {
					t.Fatalf("pop %d: %d with %d messages, want 1 to 3 (the budget)", pops, status, len(popped.Messages))
				}
				acks := make([]map[string]any, len(popped.Messages))
				for i, m := range popped.Messages {
					got = append(got, m.TransactionID)
					acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
						"leaseId": popped.LeaseID, "status": "completed"}
				}
				if route != "autoAck" {
					if status, _ := b.call(t, "POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}, nil); status != http.StatusOK {
						t.Fatalf("ack: %d", status)
					}
				}
			}
			if want := "m0,m1,m2,m3,m4,m5,m6,m7,m8,m9"; strings.Join(got, ",") != want {
				t.Fatalf("delivered %v, want %s once each", got, want)
			}
		})
	}
}
