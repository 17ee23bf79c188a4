package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/google/uuid"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/auth"
	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/metrics"
	"github.com/lanesmq/lanes/server/internal/spool"
)

// Push stores a list of items; every item carries its own verdict.
func (s *Server) Push(ctx context.Context, req gen.PushRequestObject) (gen.PushResponseObject, error) {
	if req.Body.Items == nil {
		return gen.Push400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{
			Error: "bad body: items is required and must be an array", Code: CodeValidation}}, nil
	}
	items := make([]engine.PushItem, len(req.Body.Items))
	for i, it := range req.Body.Items {
		items[i] = engine.PushItem{
			Queue:         it.Queue,
			Partition:     deref(it.Partition),
			TransactionID: deref(it.TransactionId),
			Payload:       it.Payload,
		}
	}
	results, err := s.storePush(ctx, items)
	if errors.Is(err, errPushesPausedNoSpool) {
		return pushRefusedForMaintenance{}, nil
	}
	if err != nil {
		return nil, err
	}
	return pushAnswer(results), nil
}

// storePush is the push path behind the handler: the token subject is stamped
// on every item; pushes go to the spool in push maintenance, while this
// broker's older spooled pushes are still draining (so no push through this
// broker overtakes them in a partition; one through another broker, whose
// spool is empty, can: docs/operations.md, "Order across brokers"), and when
// PostgreSQL cannot be reached.
func (s *Server) storePush(ctx context.Context, items []engine.PushItem) ([]engine.PushResult, error) {
	if sub := producerSub(ctx); sub != "" {
		for i := range items {
			items[i].ProducerSub = sub
		}
	}
	sp := s.opts.Spool
	if sp == nil && s.maintenance.pushEnabled() {
		// Push maintenance keeps writes off the database, and without a
		// spool there is nowhere else to put them: a 503 the clients wait
		// out and resend, as a bundle with pushes gets.
		if err := engine.NormalizePushItems(items); err != nil {
			return nil, err
		}
		return nil, errPushesPausedNoSpool
	}
	if sp != nil && (!s.schemaReady() || s.maintenance.pushEnabled() || sp.Pending() > 0) {
		if !s.schemaReady() {
			sp.MarkDBDown()
		}
		return s.spoolPush(items)
	}
	if sp != nil {
		// Minted before the database attempt, so a push that goes to the spool
		// after its commit landed unseen (the connection died before the
		// answer) is answered with the id it was stored under; the replay then
		// finds it by transaction id.
		for i := range items {
			if items[i].MessageID == uuid.Nil {
				items[i].MessageID = engine.NewMessageID()
			}
		}
	}
	pushCtx, cancel := context.WithTimeout(ctx, s.opts.PushTimeout)
	defer cancel()
	results, err := s.engine.Push(pushCtx, items)
	if err != nil && sp != nil && ctx.Err() == nil && spool.IsUnavailable(err) {
		if pushCtx.Err() != nil {
			// The database may answer everything else: a locked partition or a
			// stalled commit is no outage.
			s.spoolTimeouts.Failed(err, "items", len(items), "timeout", s.opts.PushTimeout)
		} else {
			s.spoolFallbacks.Failed(err, "items", len(items))
		}
		sp.MarkDBDown()
		return s.spoolPush(items)
	}
	if err != nil {
		return nil, err
	}
	countPushVerdicts(s.metrics, results)
	return results, nil
}

// producerSub is the subject of the request's token, stamped on what it
// pushes (plain pushes, transaction pushes, timers); "" when auth is off.
func producerSub(ctx context.Context) string {
	if id := auth.FromContext(ctx); id != nil {
		return id.Subject
	}
	return ""
}

func (s *Server) spoolPush(items []engine.PushItem) ([]engine.PushResult, error) {
	if err := engine.NormalizePushItems(items); err != nil {
		return nil, err
	}
	// The answer's message ids travel with the records, so the drain stores
	// each message under the id this reply gives the client.
	for i := range items {
		if items[i].MessageID == uuid.Nil {
			items[i].MessageID = engine.NewMessageID()
		}
	}
	status, errText := engine.PushBuffered, ""
	if err := s.opts.Spool.Append(items); err != nil {
		s.spoolWriteFailures.Failed(err, "items", len(items))
		status, errText = engine.PushFailed, err.Error()
	} else {
		s.spoolWriteFailures.Succeeded()
	}
	results := make([]engine.PushResult, len(items))
	for i, it := range items {
		results[i] = engine.PushResult{Index: i, MessageID: it.MessageID, TransactionID: it.TransactionID, Queue: it.Queue, Status: status, Error: errText}
	}
	s.metrics.CountPush(string(status), len(items))
	return results, nil
}

// errPushesPausedNoSpool refuses a push under push maintenance on a broker
// without a spool: nothing is stored.
var errPushesPausedNoSpool = errors.New("push maintenance is on and this broker has no disk spool; send the push again once maintenance is off")

// pushRefusedForMaintenance is the 503 of errPushesPausedNoSpool: code
// maintenance and the Retry-After of a bundle refused under maintenance.
type pushRefusedForMaintenance struct{}

func (pushRefusedForMaintenance) VisitPushResponse(w http.ResponseWriter) error {
	w.Header().Set("Retry-After", strconv.Itoa(maintenanceRetryAfterSeconds))
	return gen.Push503JSONResponse{ServiceUnavailableJSONResponse: gen.ServiceUnavailableJSONResponse{
		Error: errPushesPausedNoSpool.Error(), Code: CodeMaintenance}}.VisitPushResponse(w)
}

// countPushVerdicts counts a push's items by verdict: the usual all-queued
// push with one counter update, not a label lookup per item.
func countPushVerdicts(m *metrics.Metrics, results []engine.PushResult) {
	queued := 0
	for _, r := range results {
		if r.Status == engine.PushQueued {
			queued++
		} else {
			m.CountPush(string(r.Status), 1)
		}
	}
	if queued > 0 {
		m.CountPush(string(engine.PushQueued), queued)
	}
}
