//nolint:bodyclose // every response is handed to Client.decode (via Client.result), which closes the body.
package lanes

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/lanesmq/lanes/sdk-go/internal/gen"
)

// Forever marks a KV write without expiry, the only ttl that means none: 0, as every ttl that is
// not positive, is refused by the broker (400), so a computed ttl that ran out is never kept forever.
const Forever time.Duration = -1

// KV addresses one KV namespace.
type KV struct {
	c  *Client
	ns string
}

// KV returns helpers for namespace ns.
func (c *Client) KV(ns string) KV { return KV{c: c, ns: ns} }

// DecodeKV decodes a KV value into a T with encoding/json, as Message.Decode decodes a payload:
// a counter Incr answered is lanes.DecodeKV[int](res.Value). It reads any value a KV answer
// carries: a KVResult's, a KVRow's of GetMany, GetPrefix or List, a TransactionError's. Ask for
// int or json.Number to keep every digit (into any, a number is a float64). A result with no
// value (a missing key, a GetMany or GetPrefix result, a delete) is ErrNoKVValue, not T's zero.
func DecodeKV[T any](value json.RawMessage) (T, error) {
	var v T
	if len(value) == 0 {
		return v, ErrNoKVValue
	}
	err := json.Unmarshal(value, &v)
	return v, err
}

// KVPut builds a put op for batches and transaction riders (ttl Forever = no expiry). A value
// that cannot be encoded to JSON is carried in the op: KV.Batch and Commit then return
// *InvalidKVValueError before sending anything.
func KVPut(ns, key string, value any, ttl time.Duration) KVOperation {
	b, err := marshalExact(value)
	if err != nil {
		b = json.RawMessage(unencodableValue + err.Error())
	}
	op := KVOperation{Op: gen.KvOperationOp("put"), Ns: ns, Key: &key, Value: b}
	setTTL(&op.TtlSeconds, &op.Forever, ttl)
	return op
}

// unencodableValue starts the Value of a builder op whose value json.Marshal refused, followed
// by the error's text. It is not JSON, so such an op can never reach the broker.
const unencodableValue = "\x00lanes: unencodable value: "

// encodeKVValue marshals a KV value, naming the key when it cannot.
func encodeKVValue(key string, value any) (json.RawMessage, error) {
	b, err := marshalExact(value)
	if err != nil {
		return nil, &InvalidKVValueError{Key: key, Err: err}
	}
	return b, nil
}

// checkKVValues returns the error a builder carried for a value it could not encode; first is
// the index of ops[0] in the request.
func checkKVValues(ops []KVOperation, first int) error {
	for i, op := range ops {
		if msg, ok := strings.CutPrefix(string(op.Value), unencodableValue); ok {
			key := ""
			if op.Key != nil {
				key = *op.Key
			}
			return &InvalidKVValueError{Index: first + i, Key: key, Err: errors.New(msg)}
		}
	}
	return nil
}

// KVPutIfAbsent builds a putIfAbsent op. With required false (the wire default, as in the other
// SDKs) an existing key leaves the put unapplied and a transaction still commits; required true
// rolls the transaction back (kv_precondition) instead. A value that cannot be encoded is carried
// in the op, as with KVPut.
func KVPutIfAbsent(ns, key string, value any, ttl time.Duration, required bool) KVOperation {
	op := KVPut(ns, key, value, ttl)
	op.Op = gen.KvOperationOp("putIfAbsent")
	if required {
		op.Required = ptr(true)
	}
	return op
}

// KVDelete builds a delete op.
func KVDelete(ns, key string) KVOperation {
	return KVOperation{Op: gen.KvOperationOp("delete"), Ns: ns, Key: &key}
}

// KVDeleteExpect builds a conditional delete op: the key is deleted only if its current version
// is expect (>= 1; the broker answers 400 kv_bad_request otherwise). A lost condition is Applied
// false with Reason "version" (or "absent" when the key does not exist).
func KVDeleteExpect(ns, key string, expect int) KVOperation {
	op := KVDelete(ns, key)
	op.Expect = &expect
	return op
}

// KVGet builds a get op.
func KVGet(ns, key string) KVOperation {
	return KVOperation{Op: gen.KvOperationOp("get"), Ns: ns, Key: &key}
}

// KVGetMany builds a getMany op: the rows of the keys that exist, plus the ones Missing.
func KVGetMany(ns string, keys ...string) KVOperation {
	return KVOperation{Op: gen.KvOperationOp("getMany"), Ns: ns, Keys: &keys}
}

// KVPrefixOpts pages a getPrefix op. After continues after a key (a result's NextAfter), Limit
// is the page size (0 = the broker's default of 100, clamped to 1000) and KeysOnly omits values.
type KVPrefixOpts struct {
	After    string
	Limit    int
	KeysOnly bool
}

// KVGetPrefix builds a getPrefix op: one page of the keys that start with prefix (non-empty), in
// key order; Truncated and NextAfter tell whether and where to continue.
func KVGetPrefix(ns, prefix string, opts KVPrefixOpts) KVOperation {
	return KVOperation{Op: gen.KvOperationOp("getPrefix"), Ns: ns, Prefix: &prefix, After: ptrUnlessZero(opts.After),
		Limit: ptrIfPositive(opts.Limit), KeysOnly: ptrUnlessZero(opts.KeysOnly)}
}

// KVIncrOpts bounds an incr op. Min and Max are inclusive; nil = unbounded. An incr that would
// leave the range is not applied (Applied false, Reason "limit") and the key keeps its value.
type KVIncrOpts struct {
	Min *int
	Max *int
}

// KVIncr builds an incr op: adds delta (may be negative) to a numeric key, creating it at 0 with
// ttl (Forever = no expiry; the TTL applies only when incr creates the key).
func KVIncr(ns, key string, delta int, ttl time.Duration, opts KVIncrOpts) KVOperation {
	op := KVOperation{Op: gen.KvOperationOp("incr"), Ns: ns, Key: &key, Delta: &delta, Min: opts.Min, Max: opts.Max}
	setTTL(&op.TtlSeconds, &op.Forever, ttl)
	return op
}

// KVPutExpect builds a conditional put op: expect 0 = the key must not exist, N = its current
// version must be N. A lost condition is Applied false with Reason "exists" or "version". A value
// that cannot be encoded is carried in the op, as with KVPut.
func KVPutExpect(ns, key string, value any, ttl time.Duration, expect int) KVOperation {
	op := KVPut(ns, key, value, ttl)
	op.Expect = &expect
	return op
}

// setTTL sets a write's expiry, by the rule all three SDKs share: Forever is no expiry; a
// positive ttl is whole seconds, at least 1, so a sub-second one still expires; zero or a
// negative ttl (a computed time.Until that reached or went past its end) is sent as it is, so
// the broker refuses it (400) rather than keeping the key forever.
func setTTL(ttl **int, forever **bool, d time.Duration) {
	switch {
	case d == Forever:
		*forever = ptr(true)
	case d <= 0:
		*ttl = ptr(min(int(d/time.Second), 0))
	default:
		*ttl = ptr(max(int(d/time.Second), 1))
	}
}

// Batch runs KV ops (POST /api/v1/kv) and returns their results, index-aligned; an answer with
// another number of results is an *UnexpectedAnswerError.
func (k KV) Batch(ctx context.Context, ops ...KVOperation) ([]KVResult, error) {
	if err := checkKVValues(ops, 0); err != nil {
		return nil, err
	}
	sendCtx := withFlags(ctx, reqFlags{notIdempotent: !kvOpsIdempotent(ops)})
	out, err := call[gen.KvBatchResult](k.c, ctx, func() (*httpResp, error) {
		return k.c.gen.KvBatch(sendCtx, gen.KvBatchRequest{Operations: ops})
	})
	if err != nil {
		return nil, err
	}
	if len(out.Results) != len(ops) {
		return nil, errResultCount("kv", len(out.Results), len(ops), "operations")
	}
	return out.Results, nil
}

// one runs a single op through the batch route and returns its result.
func (k KV) one(ctx context.Context, op KVOperation) (*KVResult, error) {
	res, err := k.Batch(ctx, op)
	if err != nil {
		return nil, err
	}
	return &res[0], nil
}

// keyRouteless reports a namespace or key the key route cannot carry: net/http drops "." and
// ".." path segments, so such a call would reach another route (a 404). It goes through
// POST /api/v1/kv instead, as TS sends every KV call, and gets the broker's own answer there.
func (k KV) keyRouteless(key string) bool {
	return k.ns == "." || k.ns == ".." || key == "." || key == ".."
}

// Get reads one key.
func (k KV) Get(ctx context.Context, key string) (*KVResult, error) {
	if k.keyRouteless(key) {
		return k.one(ctx, KVGet(k.ns, key))
	}
	return call[KVResult](k.c, ctx, func() (*httpResp, error) { return k.c.gen.KvGet(ctx, k.ns, key) })
}

// Put writes one key (ttl Forever = no expiry).
func (k KV) Put(ctx context.Context, key string, value any, ttl time.Duration) (*KVResult, error) {
	b, err := encodeKVValue(key, value)
	if err != nil {
		return nil, err
	}
	if k.keyRouteless(key) {
		return k.one(ctx, KVPut(k.ns, key, value, ttl))
	}
	body := gen.KvPutRequest{Value: b}
	setTTL(&body.TtlSeconds, &body.Forever, ttl)
	return call[KVResult](k.c, ctx, func() (*httpResp, error) { return k.c.gen.KvPut(ctx, k.ns, key, body) })
}

// PutExpect writes one key only if its version matches: expect 0 = the key must not exist, N =
// its current version must be N (optimistic concurrency). A lost condition is not an error: the
// result has Applied false, Reason "exists" or "version", and the current Value and Version.
func (k KV) PutExpect(ctx context.Context, key string, value any, ttl time.Duration, expect int) (*KVResult, error) {
	b, err := encodeKVValue(key, value)
	if err != nil {
		return nil, err
	}
	if k.keyRouteless(key) {
		return k.one(ctx, KVPutExpect(k.ns, key, value, ttl, expect))
	}
	body := gen.KvPutRequest{Value: b, Expect: &expect}
	setTTL(&body.TtlSeconds, &body.Forever, ttl)
	sendCtx := withFlags(ctx, reqFlags{notIdempotent: true}) // a conditional write
	return call[KVResult](k.c, ctx, func() (*httpResp, error) { return k.c.gen.KvPut(sendCtx, k.ns, key, body) })
}

// PutIfAbsent writes one key only when it does not exist (ttl Forever = no expiry). When it
// exists, the result has Applied false, Reason "exists", and the current Value and Version.
func (k KV) PutIfAbsent(ctx context.Context, key string, value any, ttl time.Duration) (*KVResult, error) {
	return k.one(ctx, KVPutIfAbsent(k.ns, key, value, ttl, false))
}

// GetMany reads several keys in one call: Rows holds the keys that exist (with values and
// versions), Missing the ones that do not.
func (k KV) GetMany(ctx context.Context, keys ...string) (*KVResult, error) {
	return k.one(ctx, KVGetMany(k.ns, keys...))
}

// GetPrefix reads one page of the keys that start with prefix (non-empty), in key order. When
// Truncated is true, pass NextAfter as opts.After to read the next page.
func (k KV) GetPrefix(ctx context.Context, prefix string, opts KVPrefixOpts) (*KVResult, error) {
	return k.one(ctx, KVGetPrefix(k.ns, prefix, opts))
}

// Incr adds delta (may be negative) to a numeric key atomically and returns the new Value and
// Version. A missing key starts at 0 and gets ttl (Forever = no expiry). With bounds in opts, an
// incr that would leave [Min, Max] is not applied: Applied false, Reason "limit".
func (k KV) Incr(ctx context.Context, key string, delta int, ttl time.Duration, opts KVIncrOpts) (*KVResult, error) {
	return k.one(ctx, KVIncr(k.ns, key, delta, ttl, opts))
}

// KVListQuery selects a page of List: keys with Prefix (empty = all), after After (a page's
// NextAfter), Limit rows (0 = the broker's default), KeysOnly to omit values, and
// IncludeExpired to also return expired rows (marked Expired).
type KVListQuery struct {
	Prefix         string
	After          string
	Limit          int
	KeysOnly       bool
	IncludeExpired bool
}

// List pages through the namespace's keys in key order (POST /api/v1/resources/kv/list, the
// console route). Unlike GetPrefix it takes an empty prefix and can include expired rows.
func (k KV) List(ctx context.Context, q KVListQuery) (*KVListResult, error) {
	body := gen.KvListRequest{Namespace: k.ns, Prefix: ptrUnlessZero(q.Prefix), After: ptrUnlessZero(q.After),
		Limit: ptrIfPositive(q.Limit), KeysOnly: ptrUnlessZero(q.KeysOnly), IncludeExpired: ptrUnlessZero(q.IncludeExpired)}
	return call[KVListResult](k.c, ctx, func() (*httpResp, error) { return k.c.gen.ListKvKeys(ctx, body) })
}

// Delete removes one key.
func (k KV) Delete(ctx context.Context, key string) (*KVResult, error) {
	if k.keyRouteless(key) {
		return k.one(ctx, KVDelete(k.ns, key))
	}
	return call[KVResult](k.c, ctx, func() (*httpResp, error) { return k.c.gen.KvDelete(ctx, k.ns, key) })
}

// DeleteExpect removes one key only if its current version is expect (>= 1), for optimistic
// concurrency: read, decide, delete what was read. A lost condition is not an error: the result
// has Applied false and Reason "version" (with the current Value and Version) or "absent".
func (k KV) DeleteExpect(ctx context.Context, key string, expect int) (*KVResult, error) {
	return k.one(ctx, KVDeleteExpect(k.ns, key, expect))
}
