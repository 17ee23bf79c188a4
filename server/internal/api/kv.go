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

// KvBatch runs KV operations in one transaction; a lost `required`
// precondition fails the whole call (kv_precondition), still 200 as the
// transaction route answers its rollbacks.
func (s *Server) KvBatch(ctx context.Context, req gen.KvBatchRequestObject) (gen.KvBatchResponseObject, error) {
	ops := kvOpsFromWire(req.Body.Operations)
	results, lost, err := s.engine.KV(ctx, ops)
	if body, ok := codedBadRequest(err); ok {
		return gen.KvBatch400JSONResponse{BadRequestJSONResponse: body}, nil
	}
	if err != nil {
		return nil, err
	}
	out := gen.KvBatch200JSONResponse{Success: valuePtr(lost == nil), Results: kvResultsToWire(results)}
	if lost != nil {
		reason, kvReason := gen.KvBatchResultReasonKvPrecondition, gen.KvBatchResultKvReason(lost.Reason)
		index, message := lost.Index, lost.Error()
		out.Reason, out.KvReason, out.FailedIndex, out.Error = &reason, &kvReason, &index, &message
	}
	return out, nil
}

// KvGet reads one key; the ETag is its quoted version.
func (s *Server) KvGet(ctx context.Context, req gen.KvGetRequestObject) (gen.KvGetResponseObject, error) {
	results, _, err := s.engine.KV(ctx, []engine.KVOp{{Op: engine.KVGet, Namespace: req.Ns, Key: req.Key}})
	if body, ok := codedBadRequest(err); ok {
		return gen.KvGet400JSONResponse{BadRequestJSONResponse: body}, nil
	}
	if err != nil {
		return nil, err
	}
	out := gen.KvGet200JSONResponse{Body: kvResultToWire(results[0])}
	out.Body.Index, out.Body.Op = nil, nil
	if results[0].Found {
		etag := `"` + strconv.FormatInt(results[0].Version, 10) + `"`
		out.Headers.ETag = &etag
	}
	return out, nil
}

// refuseKVPathQueryString answers 400 to a KV path route carrying a query
// string: the path routes take none, and ignoring one would turn
// DELETE …?expect=5 into an unconditional delete (reference §1.14).
func refuseKVPathQueryString(f gen.StrictHandlerFunc, operationID string) gen.StrictHandlerFunc {
	switch operationID {
	case "KvGet", "KvPut", "KvDelete":
	default:
		return f
	}
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, request any) (any, error) {
		if r.URL.RawQuery == "" {
			return f(ctx, w, r, request)
		}
		body := gen.BadRequestJSONResponse{Code: CodeKVBadRequest,
			Error: r.Method + " /api/v1/kv/{ns}/{key} takes no query string; conditional operations go through POST /api/v1/kv"}
		switch operationID {
		case "KvGet":
			return gen.KvGet400JSONResponse{BadRequestJSONResponse: body}, nil
		case "KvPut":
			return gen.KvPut400JSONResponse{BadRequestJSONResponse: body}, nil
		}
		return gen.KvDelete400JSONResponse{BadRequestJSONResponse: body}, nil
	}
}

// kvPathForbiddenFields may not appear in a path-route body: the path names the key.
var kvPathForbiddenFields = []string{"op", "ns", "namespace", "key"}

// KvPut writes one key (upsert, or conditional with expect).
func (s *Server) KvPut(ctx context.Context, req gen.KvPutRequestObject) (gen.KvPutResponseObject, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(rawBody(ctx), &fields); err == nil {
		for _, f := range kvPathForbiddenFields {
			if _, ok := fields[f]; ok {
				return gen.KvPut400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{
					Error: "the body of PUT /api/v1/kv/{ns}/{key} must not carry " + strconv.Quote(f) + "; the path names the key",
					Code:  CodeKVBadRequest}}, nil
			}
		}
	}
	b := req.Body
	op := engine.KVOp{Op: engine.KVPut, Namespace: req.Ns, Key: req.Key, Value: b.Value,
		TTLSeconds: deref(b.TtlSeconds), Forever: deref(b.Forever), Required: deref(b.Required), Expect: int64Ptr(b.Expect)}
	results, _, err := s.engine.KV(ctx, []engine.KVOp{op})
	if body, ok := codedBadRequest(err); ok {
		return gen.KvPut400JSONResponse{BadRequestJSONResponse: body}, nil
	}
	if err != nil {
		return nil, err
	}
	out := kvResultToWire(results[0])
	out.Index, out.Op = nil, nil
	return gen.KvPut200JSONResponse(out), nil
}

// KvDelete deletes one key; a miss is applied:false, reason absent.
func (s *Server) KvDelete(ctx context.Context, req gen.KvDeleteRequestObject) (gen.KvDeleteResponseObject, error) {
	results, _, err := s.engine.KV(ctx, []engine.KVOp{{Op: engine.KVDelete, Namespace: req.Ns, Key: req.Key}})
	if body, ok := codedBadRequest(err); ok {
		return gen.KvDelete400JSONResponse{BadRequestJSONResponse: body}, nil
	}
	if err != nil {
		return nil, err
	}
	out := kvResultToWire(results[0])
	out.Index, out.Op = nil, nil
	return gen.KvDelete200JSONResponse(out), nil
}

// ListKvNamespaces lists one page of namespaces with their live key counts.
func (s *Server) ListKvNamespaces(ctx context.Context, req gen.ListKvNamespacesRequestObject) (gen.ListKvNamespacesResponseObject, error) {
	page, err := keyedRowPage(req.Params.Limit, req.Params.Offset, req.Params.After, 1)
	if err != nil {
		return nil, err
	}
	list, more, err := s.engine.KVNamespaces(ctx, page)
	if err != nil {
		return nil, err
	}
	out := gen.ListKvNamespaces200JSONResponse{Truncated: &more}
	if more {
		out.NextAfter, out.NextOffset = nextPlaces(page, len(list), list[len(list)-1].Namespace)
	}
	out.Namespaces = make([]struct {
		Keys      *int    `json:"keys,omitempty"`
		Namespace *string `json:"namespace,omitempty"`
	}, len(list))
	for i, n := range list {
		keys := int(n.Keys)
		out.Namespaces[i].Keys, out.Namespaces[i].Namespace = &keys, &n.Namespace
	}
	return out, nil
}

// ListKvKeys pages through one namespace for the console.
func (s *Server) ListKvKeys(ctx context.Context, req gen.ListKvKeysRequestObject) (gen.ListKvKeysResponseObject, error) {
	b := req.Body
	page, err := s.engine.KVList(ctx, engine.KVListRequest{Namespace: b.Namespace, Prefix: deref(b.Prefix), After: deref(b.After),
		Limit: deref(b.Limit), KeysOnly: deref(b.KeysOnly), IncludeExpired: deref(b.IncludeExpired)})
	if body, ok := codedBadRequest(err); ok {
		return gen.ListKvKeys400JSONResponse{BadRequestJSONResponse: body}, nil
	}
	if err != nil {
		return nil, err
	}
	rows := make([]gen.KvRow, len(page.Rows))
	for i, r := range page.Rows {
		rows[i] = kvRowToWire(r)
		expired := r.Expired
		rows[i].Expired = &expired
	}
	bytes := page.Bytes
	return gen.ListKvKeys200JSONResponse{Rows: rows, Truncated: page.Truncated, NextAfter: optional(page.NextAfter), Bytes: bytes}, nil
}

// codedBadRequest turns an engine input error into the 400 body with its code.
func codedBadRequest(err error) (gen.BadRequestJSONResponse, bool) {
	var coded *engine.CodedInputError
	if errors.As(err, &coded) {
		return gen.BadRequestJSONResponse{Error: coded.Message, Code: coded.Code}, true
	}
	var invalid *engine.InvalidInputError
	if errors.As(err, &invalid) {
		return gen.BadRequestJSONResponse{Error: invalid.Message, Code: CodeBadRequest}, true
	}
	return gen.BadRequestJSONResponse{}, false
}

func kvOpsFromWire(ops []gen.KvOperation) []engine.KVOp {
	out := make([]engine.KVOp, len(ops))
	for i, o := range ops {
		out[i] = engine.KVOp{Op: string(o.Op), Namespace: o.Ns, Key: deref(o.Key), Prefix: deref(o.Prefix),
			After: deref(o.After), Limit: deref(o.Limit), KeysOnly: deref(o.KeysOnly), Value: o.Value,
			TTLSeconds: deref(o.TtlSeconds), Forever: deref(o.Forever), Required: deref(o.Required),
			Expect: int64Ptr(o.Expect), Delta: int64Ptr(o.Delta), Min: int64Ptr(o.Min), Max: int64Ptr(o.Max)}
		if o.Keys != nil {
			out[i].Keys = *o.Keys
		}
	}
	return out
}

func kvResultsToWire(results []engine.KVResult) []gen.KvResult {
	out := make([]gen.KvResult, len(results))
	for i, r := range results {
		out[i] = kvResultToWire(r)
	}
	return out
}

// kvResultToWire keeps the fields each op answers with.
func kvResultToWire(r engine.KVResult) gen.KvResult {
	index, op := r.Index, r.Op
	out := gen.KvResult{Index: &index, Op: &op}
	if r.RolledBack {
		out.Error = &r.Error
		switch {
		case r.Op == engine.KVGetPrefix:
			out.Prefix = &r.Prefix
		case r.Op != engine.KVGetMany:
			out.Key = &r.Key
		}
		if engine.KVIsWrite(r.Op) {
			applied := false
			out.Applied = &applied
		}
		return out
	}
	withValue := func() {
		if r.Version > 0 {
			version := int(r.Version)
			out.Value, out.Version, out.ExpiresAt, out.UpdatedAt = r.Value, &version, r.ExpiresAt, r.UpdatedAt
		}
	}
	switch r.Op {
	case engine.KVGet:
		found := r.Found
		out.Found, out.Key = &found, &r.Key
		withValue()
	case engine.KVGetMany, engine.KVGetPrefix:
		rows := make([]gen.KvRow, len(r.Rows))
		for i, row := range r.Rows {
			rows[i] = kvRowToWire(row)
		}
		truncated := r.Truncated
		out.Rows, out.Truncated = &rows, &truncated
		if r.Op == engine.KVGetMany {
			missing := r.Missing
			out.Missing = &missing
		} else {
			out.Prefix, out.NextAfter = &r.Prefix, optional(r.NextAfter)
		}
	default:
		applied := r.Applied
		out.Applied, out.Key = &applied, &r.Key
		if r.Reason != "" {
			reason := gen.KvResultReason(r.Reason)
			out.Reason = &reason
		}
		out.Error = optional(r.Error)
		withValue()
	}
	return out
}

func kvRowToWire(r engine.KVRow) gen.KvRow {
	version := int(r.Version)
	updated := r.UpdatedAt
	row := gen.KvRow{Key: r.Key, Value: r.Value, Version: version, ExpiresAt: r.ExpiresAt, UpdatedAt: &updated}
	if row.UpdatedAt.IsZero() {
		row.UpdatedAt = nil
	}
	return row
}
