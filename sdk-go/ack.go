//nolint:bodyclose // every response is handed to Client.decode (via Client.result), which closes the body.
package lanes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/lanesmq/lanes/sdk-go/internal/gen"
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

// ackEntry is one message with its own status (the consume loop mixes statuses).
type ackEntry struct {
	msg    *Message
	status AckStatus
	err    string
}

// Ack acknowledges messages with one status: one message → POST /api/v1/ack, several →
// POST /api/v1/ack/batch (one call per consumer group). It returns one result per message in
// order and an *AckError when some answered success:false. opts is optional and takes at most
// one AckOpts: a second is an error before any request, since two option structs have no
// obvious merge (which Error wins, can WithoutLease be turned back off?).
func (c *Client) Ack(ctx context.Context, msgs []*Message, status AckStatus, opts ...AckOpts) ([]AckResult, error) {
	var o AckOpts
	switch len(opts) {
	case 0:
	case 1:
		o = opts[0]
	default:
		return nil, fmt.Errorf("lanes: Ack takes at most one AckOpts, got %d; put every option in one", len(opts))
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
		if err := checkGroup(o.groupOf(e.msg)); err != nil {
			return nil, err
		}
	}
	var results []AckResult
	var err error
	if len(entries) == 1 {
		results, err = c.ackOne(ctx, entries[0], o)
	} else {
		results, err = c.ackBatchByGroup(ctx, entries, o)
	}
	if err != nil {
		return nil, err
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

// ackOne acknowledges one message (POST /api/v1/ack), which answers an array of one result;
// brokers before it answered the result object alone, which is read too.
func (c *Client) ackOne(ctx context.Context, e ackEntry, o AckOpts) ([]AckResult, error) {
	item := e.wire(o)
	body := gen.AckRequest{TransactionId: item.TransactionId, PartitionId: item.PartitionId, Status: item.Status,
		LeaseId: item.LeaseId, Error: item.Error, ConsumerGroup: ptrUnlessZero(o.groupOf(e.msg))}
	var answer json.RawMessage
	if _, err := c.result(ctx, &answer)(c.gen.Ack(ctx, body)); err != nil {
		return nil, err
	}
	var results []AckResult
	var err error
	if trimmed := bytes.TrimLeft(answer, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' {
		results = make([]AckResult, 1)
		err = jsonUnmarshal(answer, &results[0])
	} else {
		err = jsonUnmarshal(answer, &results)
	}
	if err != nil || len(results) != 1 {
		return nil, &UnexpectedAnswerError{Status: 200, Body: answer, Err: err,
			Message: fmt.Sprintf("POST /api/v1/ack: want an array of one result, got %d", len(results))}
	}
	return results, nil
}

// ackBatchByGroup sends one POST /api/v1/ack/batch per consumer group (the route takes one group
// per call) and returns the results in the order of entries.
func (c *Client) ackBatchByGroup(ctx context.Context, entries []ackEntry, o AckOpts) ([]AckResult, error) {
	var groups []string
	byGroup := map[string][]int{}
	for i, e := range entries {
		g := o.groupOf(e.msg)
		if _, ok := byGroup[g]; !ok {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], i)
	}
	results := make([]AckResult, len(entries))
	for _, g := range groups {
		idx := byGroup[g]
		body := gen.AckBatchRequest{ConsumerGroup: ptrUnlessZero(g), Acknowledgments: make([]gen.AckItem, len(idx))}
		for k, i := range idx {
			body.Acknowledgments[k] = entries[i].wire(o)
		}
		var res []AckResult
		if _, err := c.result(ctx, &res)(c.gen.AckBatch(ctx, body)); err != nil {
			return nil, err
		}
		if len(res) != len(idx) {
			return nil, errResultCount("ack batch", len(res), len(idx), "items")
		}
		for k, i := range idx {
			results[i] = res[k]
			results[i].Index = i
		}
	}
	return results, nil
}

// wire is the entry as one acknowledgement item; the group travels beside it.
func (e ackEntry) wire(o AckOpts) gen.AckItem {
	item := gen.AckItem{TransactionId: e.msg.TransactionID, PartitionId: e.msg.PartitionID,
		Status: ptr(string(e.status)), Error: ptrUnlessZero(e.err)}
	if !o.WithoutLease {
		item.LeaseId = ptrUnlessZero(e.msg.LeaseID)
	}
	return item
}

// groupOf is the consumer group an ack of m names: the override, else the message's own.
func (o AckOpts) groupOf(m *Message) string {
	if o.Group != "" {
		return o.Group
	}
	return m.ConsumerGroup
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
		body := gen.LeaseExtendRequest{Seconds: ptrIfPositive(seconds)}
		var r RenewResult
		if _, err := c.result(ctx, &r)(c.gen.ExtendLease(ctx, id, body)); err != nil {
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

// loopAcks is the smallest list of acks with the broker effect of entries, a consume loop's or
// iterator's acks of one pop (docs/sdk-design.md, "Loop acks"). An ack is an offset commit, so
// per (partition, lease, group) the `completed` acks before the first nack collapse into the last
// of them; the nacks and anything after them go as they are. A partition whose acks name a
// transaction id twice goes whole: the broker resolves the k-th mention of an id to its k-th
// copy in the lease's span, so dropping a mention could move the offset an ack names.
func loopAcks(entries []ackEntry) []ackEntry {
	type cursorLease struct{ partition, lease, group string }
	type span struct {
		prefix []int // indexes of the completed acks before the first nack
		nacked bool
		ids    map[string]bool
		repeat bool
	}
	spans := map[cursorLease]*span{}
	for i, e := range entries {
		k := cursorLease{e.msg.PartitionID, e.msg.LeaseID, e.msg.ConsumerGroup}
		s := spans[k]
		if s == nil {
			s = &span{ids: map[string]bool{}}
			spans[k] = s
		}
		s.repeat = s.repeat || s.ids[e.msg.TransactionID]
		s.ids[e.msg.TransactionID] = true
		if e.status != AckCompleted {
			s.nacked = true
		} else if !s.nacked {
			s.prefix = append(s.prefix, i)
		}
	}
	drop := map[int]bool{}
	for _, s := range spans {
		if s.repeat {
			continue
		}
		for _, i := range s.prefix[:max(len(s.prefix)-1, 0)] {
			drop[i] = true
		}
	}
	if len(drop) == 0 {
		return entries
	}
	out := make([]ackEntry, 0, len(entries)-len(drop))
	for i, e := range entries {
		if !drop[i] {
			out = append(out, e)
		}
	}
	return out
}
