package api

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// pushMaintenanceRefusal is the 503 body of a replay refused under push
// maintenance: a replay writes a message and deletes a dead letter, and push
// maintenance holds every write off the database.
func pushMaintenanceRefusal(requestedID string) gen.DlqReplayError {
	return gen.DlqReplayError{Error: "push maintenance is on; replay again once it is off", Code: CodeMaintenance,
		Result: "maintenance", DlqId: optional(requestedID)}
}

// pushMaintenanceOn reads the switch from the database rather than the cached
// view, which may be a second old: a replay is rare and must not write after
// another broker switched maintenance on. A failed read keeps the cached view.
func (s *Server) pushMaintenanceOn(ctx context.Context) bool {
	_ = s.maintenance.refresh(ctx)
	return s.maintenance.push.Load()
}

// ListDlq pages through dead letters, newest failure first, by offset or by key.
func (s *Server) ListDlq(ctx context.Context, req gen.ListDlqRequestObject) (gen.ListDlqResponseObject, error) {
	p := req.Params
	limit := 100
	if p.Limit != nil {
		limit = *p.Limit
	}
	place, err := keyedRowPage(&limit, p.Offset, p.After, 2)
	if err != nil {
		return nil, err
	}
	filter := engine.DLQFilter{Queue: deref(p.Queue), Group: deref(p.ConsumerGroup), Partition: deref(p.Partition),
		From: p.From, To: p.To, Limit: limit, Offset: place.Offset}
	if place.After != nil {
		if filter.After, err = parseDeadLetterKey(place.After); err != nil {
			return nil, err
		}
	}
	page, err := s.engine.ListDeadLetters(ctx, filter)
	if err != nil {
		return nil, err
	}
	out := gen.ListDlq200JSONResponse{Messages: make([]gen.DlqMessage, len(page.Rows)), Total: len(page.Rows),
		Pagination: gen.Pagination{Limit: limit, Offset: place.Offset}}
	out.Truncated = &page.Truncated
	if page.Truncated {
		out.NextAfter, out.NextOffset = nextPlaces(place, len(page.Rows), deadLetterKeyNames(page.Rows[len(page.Rows)-1].Key())...)
	}
	for i := range page.Rows {
		out.Messages[i] = wireDeadLetter(&page.Rows[i])
	}
	return out, nil
}

// oldestTimestampMicros is PostgreSQL's earliest timestamptz (4714-11-24 BC)
// in microseconds since the epoch: a key before it names no row.
const oldestTimestampMicros = -210866803200000000

// deadLetterKeyNames are the names of a dead letter's key in an after: when
// it failed, in microseconds since the epoch (the database's precision, as an
// integer that no float or text format rounds), and its id.
func deadLetterKeyNames(k engine.DeadLetterKey) []string {
	return []string{strconv.FormatInt(k.FailedAt.UnixMicro(), 10), k.ID.String()}
}

// parseDeadLetterKey reads the names of deadLetterKeyNames back.
func parseDeadLetterKey(names []string) (*engine.DeadLetterKey, error) {
	micros, err := strconv.ParseInt(names[0], 10, 64)
	id, idErr := uuid.Parse(names[1])
	if err != nil || idErr != nil || micros < oldestTimestampMicros {
		return nil, badAfter()
	}
	return &engine.DeadLetterKey{FailedAt: time.UnixMicro(micros), ID: id}, nil
}

func wireDeadLetter(d *engine.DeadLetter) gen.DlqMessage {
	id, pid := d.ID.String(), d.PartitionID.String()
	failed := d.FailedAt.UTC()
	encrypted := false
	return gen.DlqMessage{
		Id: id, TransactionId: d.TransactionID, PartitionId: pid, Queue: d.Queue, Partition: d.Partition,
		ConsumerGroup: d.Group, ErrorMessage: optional(d.Error), RetryCount: d.RetryCount, Data: d.Payload,
		ProducerSub: optional(d.ProducerSub), CreatedAt: failed, FailedAt: failed, IsEncrypted: encrypted,
	}
}

// PurgeDlq deletes every dead letter of a queue, optionally of one group.
func (s *Server) PurgeDlq(ctx context.Context, req gen.PurgeDlqRequestObject) (gen.PurgeDlqResponseObject, error) {
	n, err := s.engine.PurgeDeadLetters(ctx, req.Params.Queue, deref(req.Params.ConsumerGroup))
	var bad *engine.InvalidInputError
	if errors.As(err, &bad) && bad.Field == "queue" {
		return gen.PurgeDlq400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{
			Error: bad.Message, Code: CodeQueueRequired}}, nil
	}
	if err != nil {
		return nil, err
	}
	return gen.PurgeDlq200JSONResponse{Success: true, Deleted: int(n), Queue: req.Params.Queue, ConsumerGroup: req.Params.ConsumerGroup}, nil
}

// ReplayDlq moves one dead letter back into a queue.
func (s *Server) ReplayDlq(ctx context.Context, req gen.ReplayDlqRequestObject) (gen.ReplayDlqResponseObject, error) {
	id, err := uuid.Parse(req.Id)
	if err != nil {
		return gen.ReplayDlq400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{
			Error: "id must be a DLQ row id (UUID), got " + req.Id, Code: CodeInvalidID}}, nil
	}
	if s.pushMaintenanceOn(ctx) {
		return gen.ReplayDlq503JSONResponse{DlqReplayMaintenanceJSONResponse: gen.DlqReplayMaintenanceJSONResponse(pushMaintenanceRefusal(req.Id))}, nil
	}
	var target engine.ReplayTarget
	if req.Body != nil {
		target = engine.ReplayTarget{Queue: req.Body.Queue, Partition: req.Body.Partition}
	}
	res, err := s.engine.ReplayDeadLetter(ctx, id, target)
	out, failure, err := replayAnswer(res, err, req.Id)
	switch {
	case err != nil:
		return nil, err
	case failure != nil && failure.status == 400:
		return gen.ReplayDlq400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{
			Error: failure.body.Error, Code: failure.body.Code}}, nil
	case failure != nil:
		return gen.ReplayDlq404JSONResponse{DlqReplayErrorJSONResponse: gen.DlqReplayErrorJSONResponse(failure.body)}, nil
	}
	return gen.ReplayDlq200JSONResponse(out), nil
}

// RetryMessage replays the newest dead letter at a message address.
func (s *Server) RetryMessage(ctx context.Context, req gen.RetryMessageRequestObject) (gen.RetryMessageResponseObject, error) {
	pid, bad := parsePartitionID(req.PartitionId)
	if bad != nil {
		return gen.RetryMessage400JSONResponse{BadRequestJSONResponse: *bad}, nil
	}
	if s.pushMaintenanceOn(ctx) {
		return gen.RetryMessage503JSONResponse{DlqReplayMaintenanceJSONResponse: gen.DlqReplayMaintenanceJSONResponse(pushMaintenanceRefusal(""))}, nil
	}
	res, err := s.engine.RetryDeadLetter(ctx, pid, req.TransactionId)
	out, failure, err := replayAnswer(res, err, "")
	switch {
	case err != nil:
		return nil, err
	case failure != nil && failure.status == 400:
		return gen.RetryMessage400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{
			Error: failure.body.Error, Code: failure.body.Code}}, nil
	case failure != nil:
		return gen.RetryMessage404JSONResponse{DlqReplayErrorJSONResponse: gen.DlqReplayErrorJSONResponse(failure.body)}, nil
	}
	return gen.RetryMessage200JSONResponse(out), nil
}

type replayFailure struct {
	status int
	body   gen.DlqReplayError
}

// replayAnswer turns an engine replay outcome into the 200 body or a failure body.
func replayAnswer(res *engine.ReplayResult, err error, requestedID string) (gen.DlqReplayResult, *replayFailure, error) {
	var bad *engine.InvalidInputError
	switch {
	case errors.As(err, &bad):
		return gen.DlqReplayResult{}, &replayFailure{400, gen.DlqReplayError{Error: bad.Message, Code: CodeBadRequest,
			Result: "failed"}}, nil
	case errors.Is(err, engine.ErrReplayDestinationGone):
		return gen.DlqReplayResult{}, &replayFailure{404, gen.DlqReplayError{Error: err.Error(), Code: CodeDestinationGone,
			Result: "failed", DlqId: optional(requestedID)}}, nil
	case err != nil:
		return gen.DlqReplayResult{}, nil, err
	case res.Outcome == engine.ReplayGone:
		return gen.DlqReplayResult{}, &replayFailure{404, gen.DlqReplayError{
			Error: "Dead letter not found (already replayed or deleted)", Code: CodeGone, Result: "gone",
			DlqId: optional(requestedID)}}, nil
	}
	dlqID := res.Row.ID.String()
	messageID := res.MessageID.String()
	status := gen.ReplayedAsStatus(res.Outcome)
	if res.Outcome == engine.ReplayMoved {
		status = "queued"
	}
	index := 0
	moved := res.Outcome == engine.ReplayMoved
	out := gen.DlqReplayResult{
		Success: moved, Result: gen.DlqReplayResultResult(res.Outcome),
		Queue: res.Queue, Partition: res.Partition, ConsumerGroup: res.Row.Group, DlqId: dlqID,
		OriginalTransactionId: res.Row.TransactionID, DlqRowRemoved: &moved,
		ReplayedAs: gen.ReplayedAs{Index: index, MessageId: messageID, TransactionId: res.TransactionID,
			QueueName: res.Queue, Status: status},
	}
	if !moved {
		msg := "the dedup window already holds " + res.TransactionID + "; nothing written, the dead letter stays"
		out.Error = &msg
	}
	return out, nil, nil
}
