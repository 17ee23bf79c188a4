package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// ScheduleTimers schedules, reschedules or cancels timers in one transaction.
func (s *Server) ScheduleTimers(ctx context.Context, req gen.ScheduleTimersRequestObject) (gen.ScheduleTimersResponseObject, error) {
	if msg := serverOwnedTimerField(rawBody(ctx), "operations"); msg != "" {
		return gen.ScheduleTimers400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{
			Error: msg, Code: CodeTimersBadRequest}}, nil
	}
	results, err := s.engine.ScheduleTimers(ctx, timerOpsFromWire(req.Body.Operations, producerSub(ctx)))
	if body, ok := codedBadRequest(err); ok {
		switch body.Code {
		case CodeTimerHorizonExceeded:
			return gen.ScheduleTimers403JSONResponse{ForbiddenJSONResponse: gen.ForbiddenJSONResponse{Body: gen.Error(body)}}, nil
		case CodePayloadTooLarge:
			return gen.ScheduleTimers413JSONResponse{PayloadTooLargeJSONResponse: gen.PayloadTooLargeJSONResponse(body)}, nil
		}
		return gen.ScheduleTimers400JSONResponse{BadRequestJSONResponse: body}, nil
	}
	if err != nil {
		return nil, err
	}
	return gen.ScheduleTimers200JSONResponse{Results: timerResultsToWire(results)}, nil
}

// ListTimers pages through a queue's timers, or counts them with mode=count.
func (s *Server) ListTimers(ctx context.Context, req gen.ListTimersRequestObject) (gen.ListTimersResponseObject, error) {
	p := req.Params
	if p.Mode != nil {
		n, err := s.engine.CountTimers(ctx, req.Queue, deref(p.Prefix))
		if err != nil {
			return nil, err
		}
		return bareTimerAnswer(`{"count":` + strconv.FormatInt(n, 10) + `}`), nil
	}
	list, truncated, err := s.engine.ListTimers(ctx, req.Queue, deref(p.Prefix), deref(p.After), deref(p.Limit))
	if err != nil {
		return nil, err
	}
	rows := make([]gen.Timer, len(list))
	for i := range list {
		rows[i] = timerToWire(&list[i])
	}
	out := gen.ListTimers200JSONResponse{Rows: &rows, Truncated: &truncated}
	if truncated && len(list) > 0 {
		out.NextAfter = &list[len(list)-1].TimerKey
	}
	return out, nil
}

// GetTimer reads one timer; a miss is 200 found:false.
func (s *Server) GetTimer(ctx context.Context, req gen.GetTimerRequestObject) (gen.GetTimerResponseObject, error) {
	tm, err := s.engine.GetTimer(ctx, req.Queue, req.TimerKey)
	if err != nil {
		return nil, err
	}
	if tm == nil {
		return bareTimerAnswer(`{"found":false}`), nil
	}
	return gen.GetTimer200JSONResponse(timerToWire(tm)), nil
}

// bareTimerAnswer is a 200 body written as is, for the reference's bare
// answers ({"found":false} for a miss, {"count":N}) that the generated types
// would pad: gen.Timer always carries producerSub and lastError, gen.TimerList
// nextAfter (null when unset).
type bareTimerAnswer string

func (a bareTimerAnswer) write(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, err := io.WriteString(w, string(a)+"\n")
	return err
}

func (a bareTimerAnswer) VisitGetTimerResponse(w http.ResponseWriter) error   { return a.write(w) }
func (a bareTimerAnswer) VisitListTimersResponse(w http.ResponseWriter) error { return a.write(w) }

// CancelTimer cancels one timer (only one carrying ?txn= when given).
func (s *Server) CancelTimer(ctx context.Context, req gen.CancelTimerRequestObject) (gen.CancelTimerResponseObject, error) {
	res, err := s.engine.CancelTimer(ctx, req.Queue, req.TimerKey, deref(req.Params.Txn))
	if body, ok := codedBadRequest(err); ok {
		return gen.CancelTimer400JSONResponse{BadRequestJSONResponse: body}, nil
	}
	if err != nil {
		return nil, err
	}
	return gen.CancelTimer200JSONResponse(timerResultToWire(res)), nil
}

// serverOwnedTimerFields are set by the broker, never by a client.
var serverOwnedTimerFields = []string{"producerSub", "messageId", "tenant"}

// serverOwnedTimerField names the first server-owned field in the timer ops
// of body[key], or returns "".
func serverOwnedTimerField(body []byte, key string) string {
	var doc map[string]json.RawMessage
	if json.Unmarshal(body, &doc) != nil {
		return ""
	}
	var ops []map[string]json.RawMessage
	if json.Unmarshal(doc[key], &ops) != nil {
		return ""
	}
	for _, op := range ops {
		for f := range op {
			owned := strings.HasPrefix(f, "_")
			for _, o := range serverOwnedTimerFields {
				owned = owned || f == o
			}
			if owned {
				return key + ": " + f + " is set by the broker and may not be sent"
			}
		}
	}
	return ""
}

// delayFromMillis converts a wire delay without overflow: a delay past the
// horizon stays past it (so it is refused), however large.
func delayFromMillis(ms int) time.Duration {
	limit := int(engine.TimerHorizon/time.Millisecond) + 1
	return time.Duration(min(max(ms, -limit), limit)) * time.Millisecond
}

// timerOpsFromWire translates timer operations; sub is the scheduling token's
// subject, stamped on the message each timer pushes when it fires.
func timerOpsFromWire(ops []gen.TimerOperation, sub string) []engine.TimerOp {
	out := make([]engine.TimerOp, len(ops))
	for i, o := range ops {
		out[i] = engine.TimerOp{Op: string(o.Op), Queue: o.Queue, TimerKey: o.TimerKey, Partition: deref(o.Partition),
			TransactionID: deref(o.Txn), ProducerSub: sub, Delay: delayFromMillis(deref(o.DelayMs)),
			Payload: deref(o.Payload), PayloadZstd: deref(o.PayloadZstd), Encrypted: deref(o.Encrypted)}
	}
	return out
}

func timerResultsToWire(results []engine.TimerResult) []gen.TimerResult {
	out := make([]gen.TimerResult, len(results))
	for i, r := range results {
		out[i] = timerResultToWire(r)
	}
	return out
}

func timerResultToWire(r engine.TimerResult) gen.TimerResult {
	out := gen.TimerResult{Ok: r.OK, Status: gen.TimerResultStatus(r.Status), Queue: r.Queue, TimerKey: r.TimerKey,
		Txn: optional(r.TransactionID), DeliverAt: r.DeliverAt}
	if r.MessageID != uuid.Nil {
		id := r.MessageID.String()
		out.MessageId = &id
	}
	return out
}

func timerToWire(t *engine.Timer) gen.Timer {
	id := t.MessageID.String()
	payload := []byte(t.Payload)
	notClaimed, plain := false, false
	return gen.Timer{Found: true, Queue: &t.Queue, TimerKey: &t.TimerKey, Partition: &t.Partition, DeliverAt: &t.DeliverAt,
		Txn: &t.TransactionID, MessageId: &id, Payload: &payload, PayloadZstd: &plain, Encrypted: &plain,
		Attempts: &t.Attempts, LastError: optional(t.LastError), Claimed: &notClaimed, CreatedAt: &t.CreatedAt, UpdatedAt: &t.UpdatedAt,
		ProducerSub: optional(t.ProducerSub)}
}
