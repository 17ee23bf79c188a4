package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

func popResponse(resp any) *gen.PopResponse {
	a, ok := resp.(popAnswer)
	if !ok {
		return nil
	}
	out := gen.PopResponse(a)
	return &out
}

// deliverPop sends a pop's answer, or gives its claim back when the client
// cannot have it: the client left before the answer went out (checked once it
// is encoded, which takes milliseconds for a large batch), or sending it
// failed. An answer sent into a socket whose client leaves a moment later is
// indistinguishable from one a consumer received and then crashed on: its
// lease frees at expiry.
func (s *Server) deliverPop(w http.ResponseWriter, r *http.Request, pop *gen.PopResponse) error {
	buf := takeBuffer()
	defer giveBuffer(buf)
	if err := encodeJSON(buf, pop); err != nil {
		s.giveBack(pop)
		return err
	}
	holdAnswerForFaultScript(r)
	if r.Context().Err() != nil {
		s.giveBack(pop)
		return nil // nobody to answer
	}
	err := sendJSON(w, http.StatusOK, buf)
	if err == nil {
		err = http.NewResponseController(w).Flush()
		if errors.Is(err, http.ErrNotSupported) {
			err = nil // sent when the handler returns
		}
	}
	if err != nil {
		s.giveBack(pop)
		return err
	}
	s.metrics.CountPopped(len(pop.Messages))
	return nil
}

// giveBack releases a claim whose client left before the answer was written:
// one retry acknowledgement of the first message of each claimed partition
// rewinds nothing (the cursor stays), charges no retry budget and clears the
// lease, so the messages are claimable again at once instead of at lease expiry.
// An autoAck pop has no lease and nothing to give back: its messages are
// counted and logged as consumed for the group and never delivered.
func (s *Server) giveBack(pop *gen.PopResponse) {
	seen := map[string]bool{}
	var items []engine.AckItem
	autoAcked := 0
	for _, m := range pop.Messages {
		if m.LeaseId == "" {
			autoAcked++
			continue
		}
		if seen[m.PartitionId] {
			continue
		}
		seen[m.PartitionId] = true
		items = append(items, engine.AckItem{TransactionID: m.TransactionId, PartitionID: m.PartitionId,
			Status: "retry", Group: m.ConsumerGroup, LeaseID: m.LeaseId})
	}
	if autoAcked > 0 {
		s.metrics.CountAutoAckedUndelivered(autoAcked)
		s.autoAckLosses.Failed(context.Canceled, "messages", autoAcked, "group", pop.Messages[0].ConsumerGroup)
	}
	if len(items) == 0 {
		return
	}
	timeout := s.opts.DBTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	results, err := s.engine.Ack(ctx, items)
	if err != nil {
		s.giveBackFailures.Failed(err)
		return
	}
	for _, r := range results {
		if !r.Success || !r.LeaseReleased {
			reason := r.Error
			if reason == "" {
				reason = "lease not released"
			}
			s.giveBackFailures.Failed(errors.New(reason), "transactionId", r.TransactionID)
			return
		}
	}
	s.metrics.CountLeaseGivenBack()
	// Counted in lanes_pop_leases_given_back_total; a client that keeps
	// leaving early would otherwise write a line per pop.
	s.log.Debug("client left during a pop; claim given back", "partitions", len(items), "messages", len(pop.Messages))
}
