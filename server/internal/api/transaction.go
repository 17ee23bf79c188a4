package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// Transaction commits pushes, acks and the kv and timers riders together. A
// rollback is still 200, with success:false and a reason; only input that
// cannot be a bundle at all is a 400.
func (s *Server) Transaction(ctx context.Context, req gen.TransactionRequestObject) (gen.TransactionResponseObject, error) {
	b := req.Body
	if msg := serverOwnedTimerField(rawBody(ctx), "timers"); msg != "" {
		return gen.Transaction400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{
			Error: msg, Code: CodeTimersBadRequest}}, nil
	}
	var bundle engine.TransactionRequest
	sub := producerSub(ctx)
	for i, op := range b.Operations {
		switch op.Type {
		case "push":
			if op.Items != nil {
				for _, it := range *op.Items {
					bundle.Ops = append(bundle.Ops, engine.TxOp{Index: i, Push: &engine.PushItem{
						Queue: deref(it.Queue), Partition: deref(it.Partition), TransactionID: deref(it.TransactionId),
						TraceID: deref(it.TraceId), ProducerSub: sub, Payload: payloadOrData(it.Payload, it.Data)}})
				}
				continue
			}
			bundle.Ops = append(bundle.Ops, engine.TxOp{Index: i, Push: &engine.PushItem{
				Queue: deref(op.Queue), Partition: deref(op.Partition), TransactionID: deref(op.TransactionId),
				TraceID: deref(op.TraceId), ProducerSub: sub, Payload: payloadOrData(op.Payload, op.Data)}})
		case "ack":
			bundle.Ops = append(bundle.Ops, engine.TxOp{Index: i, Ack: &engine.AckItem{
				TransactionID: deref(op.TransactionId), PartitionID: deref(op.PartitionId), Status: ackStatus(op.Status),
				Group: deref(op.ConsumerGroup), LeaseID: deref(op.LeaseId), Error: deref(op.Error)}})
		}
	}
	if b.RequiredLeases != nil {
		bundle.RequiredLeases = *b.RequiredLeases
	}
	if b.Kv != nil {
		bundle.KV = kvOpsFromWire(*b.Kv)
	}
	if b.Timers != nil {
		bundle.Timers = timerOpsFromWire(*b.Timers, sub)
	}
	res, err := s.engine.Transaction(ctx, bundle)
	if errors.Is(err, engine.ErrPushesPaused) {
		return transactionRefusedForMaintenance{}, nil
	}
	if body, ok := codedBadRequest(err); ok {
		return gen.Transaction400JSONResponse{BadRequestJSONResponse: body}, nil
	}
	if err != nil {
		return nil, err
	}
	return gen.Transaction200JSONResponse(transactionResultToWire(res, b.Kv != nil, b.Timers != nil)), nil
}

// maintenanceRetryAfterSeconds is the Retry-After of a bundle refused under
// push maintenance: how long maintenance lasts is unknown, so it paces an
// SDK's few retries over several seconds and stays under its 60 s cap.
const maintenanceRetryAfterSeconds = 5

// transactionRefusedForMaintenance is the 503 of a bundle with pushes under
// push maintenance (engine.ErrPushesPaused): code maintenance, as a DLQ replay
// refused then, plus a Retry-After the spec's shared 503 has no field for.
type transactionRefusedForMaintenance struct{}

func (transactionRefusedForMaintenance) VisitTransactionResponse(w http.ResponseWriter) error {
	w.Header().Set("Retry-After", strconv.Itoa(maintenanceRetryAfterSeconds))
	return gen.Transaction503JSONResponse{ServiceUnavailableJSONResponse: gen.ServiceUnavailableJSONResponse{
		Error: engine.ErrPushesPaused.Error(), Code: CodeMaintenance}}.VisitTransactionResponse(w)
}

// payloadOrData prefers payload, falls back to its alias data; missing stays
// empty and the engine stores {}.
func payloadOrData(payload, data json.RawMessage) json.RawMessage {
	if len(payload) > 0 {
		return payload
	}
	return data
}

func transactionResultToWire(res *engine.TransactionResult, withKV, withTimers bool) gen.TransactionResult {
	out := gen.TransactionResult{TransactionId: res.ID, Success: res.Success, Results: []gen.TransactionOperationResult{}}
	if !res.Success {
		reason := gen.TransactionResultReason(res.Reason)
		out.Reason, out.Error = &reason, &res.Error
		if f := res.KVFailure; f != nil {
			index, kvReason := f.Index, f.Reason
			out.FailedIndex, out.KvReason, out.Value = &index, &kvReason, f.Value
			if f.Version > 0 {
				version := int(f.Version)
				out.Version = &version
			}
		}
		return out
	}
	for _, r := range res.Results {
		if p := r.Push; p != nil {
			id := p.MessageID.String()
			item := gen.TransactionOperationResult{Index: r.Index, Type: "push", Success: true,
				TransactionId: p.TransactionID, MessageId: &id, QueueName: &p.Queue}
			if r.Duplicate {
				dup := true
				item.Duplicate = &dup
			}
			out.Results = append(out.Results, item)
			continue
		}
		a := r.Ack
		dlq := a.DLQ
		out.Results = append(out.Results, gen.TransactionOperationResult{Index: r.Index, Type: "ack", Success: a.Success,
			TransactionId: a.TransactionID, Error: optional(a.Error), Dlq: &dlq})
	}
	if withKV {
		kv := kvResultsToWire(res.KV)
		out.Kv = &kv
	}
	if withTimers {
		timers := timerResultsToWire(res.Timers)
		out.Timers = &timers
	}
	return out
}
