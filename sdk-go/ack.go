//nolint:bodyclose // every response is handed to Client.decode (via Client.result), which closes the body.
package lanes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// AckOpts refines Client.Ack.
type AckOpts struct {
	// Group overrides the consumer group (default: the messages' ConsumerGroup).
	Group string
	// Error is the failure reason stored on a dead letter.
	Error string
	// WithoutLease sends lease-less acks (no lease validation; works after expiry).
	WithoutLease bool
}

type ackItemWire struct {
	TransactionID string  `json:"transactionId"`
	PartitionID   string  `json:"partitionId"`
	Status        string  `json:"status"`
	LeaseID       *string `json:"leaseId,omitempty"`
	Error         *string `json:"error,omitempty"`
	ConsumerGroup *string `json:"consumerGroup,omitempty"`
}

// ackEntry is one message with its own status (the consume loop mixes statuses).
type ackEntry struct {
	msg    *Message
	status AckStatus
	err    string
}

// Ack acknowledges messages with one status: one message → POST /api/v1/ack, several →
// POST /api/v1/ack/batch (one call per consumer group). It returns one result per message in
// order and an *AckError when some answered success:false.
func (c *Client) Ack(ctx context.Context, msgs []*Message, status AckStatus, opts ...AckOpts) ([]AckResult, error) {
	var o AckOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	if !status.valid() {
		return nil, fmt.Errorf("lanes: unknown ack status %q", status)
	}
	entries := make([]ackEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = ackEntry{msg: m, status: status, err: o.Error}
	}
	return c.ackEntries(ctx, entries, o)
}

func (c *Client) ackEntries(ctx context.Context, entries []ackEntry, o AckOpts) ([]AckResult, error) {
	if len(entries) == 0 {
		return []AckResult{}, nil
	}
	for _, e := range entries {
		if e.msg == nil || e.msg.TransactionID == "" || e.msg.PartitionID == "" {
			return nil, fmt.Errorf("lanes: ack needs messages with TransactionID and PartitionID")
		}
	}
	groupOf := func(e ackEntry) string {
		if o.Group != "" {
			return o.Group
		}
		return e.msg.ConsumerGroup
	}
	wireOf := func(e ackEntry) ackItemWire {
		w := ackItemWire{TransactionID: e.msg.TransactionID, PartitionID: e.msg.PartitionID, Status: string(e.status)}
		if !o.WithoutLease && e.msg.LeaseID != "" {
			l := e.msg.LeaseID
			w.LeaseID = &l
		}
		if e.err != "" {
			s := e.err
			w.Error = &s
		}
		return w
	}
	results := make([]AckResult, len(entries))
	if len(entries) == 1 {
		w := wireOf(entries[0])
		if g := groupOf(entries[0]); g != "" {
			w.ConsumerGroup = &g
		}
		body, _ := json.Marshal(w)
		var r json.RawMessage
		resp, err := c.gen.AckWithBody(ctx, contentJSON, bytes.NewReader(body))
		if _, err := c.decode(ctx, &r, resp, err); err != nil {
			return nil, err
		}
		res, err := decodeAckResults(r)
		if err != nil {
			return nil, err
		}
		if len(res) != 1 {
			return nil, fmt.Errorf("lanes: ack answered %d results for 1 item", len(res))
		}
		results[0] = res[0]
	} else {
		// one batch call per group, preserving the caller's order in the results
		order := []string{}
		byGroup := map[string][]int{}
		for i, e := range entries {
			g := groupOf(e)
			if _, ok := byGroup[g]; !ok {
				order = append(order, g)
			}
			byGroup[g] = append(byGroup[g], i)
		}
		for _, g := range order {
			idx := byGroup[g]
			items := make([]ackItemWire, len(idx))
			for k, i := range idx {
				items[k] = wireOf(entries[i])
			}
			req := struct {
				ConsumerGroup *string       `json:"consumerGroup,omitempty"`
				Acks          []ackItemWire `json:"acknowledgments"`
			}{Acks: items}
			if g != "" {
				gg := g
				req.ConsumerGroup = &gg
			}
			body, _ := json.Marshal(req)
			var res []AckResult
			if _, err := c.result(ctx, &res)(c.gen.AckBatchWithBody(ctx, contentJSON, bytes.NewReader(body))); err != nil {
				return nil, err
			}
			if len(res) != len(idx) {
				return nil, fmt.Errorf("lanes: ack batch answered %d results for %d items", len(res), len(idx))
			}
			for k, i := range idx {
				results[i] = res[k]
				results[i].Index = i
			}
		}
	}
	var bad []AckResult
	for _, r := range results {
		if !r.Success {
			bad = append(bad, r)
		}
	}
	if len(bad) > 0 {
		return results, &AckError{Items: bad}
	}
	return results, nil
}

// decodeAckResults accepts the single-ack answer as an array or as one object.
func decodeAckResults(b json.RawMessage) ([]AckResult, error) {
	t := strings.TrimSpace(string(b))
	if strings.HasPrefix(t, "[") {
		var out []AckResult
		return out, json.Unmarshal(b, &out)
	}
	var one AckResult
	if err := json.Unmarshal(b, &one); err != nil {
		return nil, err
	}
	return []AckResult{one}, nil
}

// Renew extends leases by seconds (0 = broker default 60). Lease ids are deduplicated; one
// call per lease. A lease that is gone answers Success false (not an error).
func (c *Client) Renew(ctx context.Context, seconds int, leaseIDs ...string) ([]RenewResult, error) {
	seen := map[string]bool{}
	var out []RenewResult
	for _, id := range leaseIDs {
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		var body []byte
		if seconds > 0 {
			body, _ = json.Marshal(map[string]int{"seconds": seconds})
		} else {
			body = []byte("{}")
		}
		var r RenewResult
		if _, err := c.result(ctx, &r)(c.gen.ExtendLeaseWithBody(ctx, id, contentJSON, bytes.NewReader(body))); err != nil {
			return out, err
		}
		if r.LeaseID == "" {
			r.LeaseID = id
		}
		out = append(out, r)
	}
	return out, nil
}

// RenewMessages extends the leases the messages were popped under.
func (c *Client) RenewMessages(ctx context.Context, seconds int, msgs ...*Message) ([]RenewResult, error) {
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		ids = append(ids, m.LeaseID)
	}
	return c.Renew(ctx, seconds, ids...)
}
