package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/lanesmq/lanes/server/internal/failurelog"
)

// KV operation names, as on the wire.
const (
	KVGet         = "get"
	KVGetMany     = "getMany"
	KVGetPrefix   = "getPrefix"
	KVPut         = "put"
	KVPutIfAbsent = "putIfAbsent"
	KVDelete      = "delete"
	KVIncr        = "incr"
)

// Why a KV write did not apply (closed set).
const (
	KVReasonExists  = "exists"
	KVReasonAbsent  = "absent"
	KVReasonVersion = "version"
	KVReasonLimit   = "limit"
	KVReasonType    = "type"
)

// Limits of the KV surface.
const (
	kvPrefixDefaultLimit = 100
	kvPrefixMaxLimit     = 1000
	// kvMaxReadBytes bounds the values one call reads; a page still carries
	// its first row when that alone is larger, so a pager always moves on.
	kvMaxReadBytes = 4 << 20
	// KVMaxTTLSeconds (100 years) keeps an expiry inside what a time.Time sum
	// holds; beyond it a key lives forever:true.
	KVMaxTTLSeconds = 100 * 365 * 24 * 3600
	// A transaction's kv rider is bounded so a bundle stays a few round trips.
	kvBundleMaxOps  = 64
	kvBundleMaxKeys = 256
	kvMaxKeyBytes   = 1024
	// kvLockClass is the first key of the advisory locks taken on written keys,
	// so they never collide with other advisory locks of the database.
	kvLockClass = 0x4b56 // "KV"
)

// KVOp is one KV operation. Expect, Delta, Min and Max are nil when absent.
type KVOp struct {
	Op         string
	Namespace  string
	Key        string
	Keys       []string // getMany
	Prefix     string   // getPrefix
	After      string   // getPrefix
	Limit      int      // getPrefix
	KeysOnly   bool     // getPrefix
	Value      json.RawMessage
	TTLSeconds int
	Forever    bool
	// Expect: nil = unconditional; 0 = must not exist; N = current version must be N.
	Expect   *int64
	Required bool
	Delta    *int64
	Min, Max *int64
}

// KVRow is one stored key.
type KVRow struct {
	Key       string
	Value     json.RawMessage // nil with keysOnly
	Version   int64
	ExpiresAt *time.Time
	UpdatedAt time.Time
	Expired   bool
}

// KVResult reports one operation; which fields matter depends on Op.
type KVResult struct {
	Index     int
	Op        string
	Key       string
	Found     bool   // get
	Applied   bool   // writes
	Reason    string // writes that did not apply
	Value     json.RawMessage
	Version   int64 // 0: the key does not exist
	ExpiresAt *time.Time
	UpdatedAt *time.Time
	Rows      []KVRow  // getMany, getPrefix
	Missing   []string // getMany
	Truncated bool
	NextAfter string
	Prefix    string
	Error     string
	// RolledBack: another op of the call lost a required precondition, so
	// nothing this op read or wrote stands; only Index, Op, Key, Prefix and
	// Error are set.
	RolledBack bool
}

// KVIsWrite reports whether op writes.
func KVIsWrite(op string) bool {
	switch op {
	case KVPut, KVPutIfAbsent, KVDelete, KVIncr:
		return true
	}
	return false
}

// KVPreconditionError reports a `required` operation whose precondition lost;
// nothing of the call was committed. Value and Version are the committed
// winner's (empty when the key is absent or the winner is this call's own write).
type KVPreconditionError struct {
	Index   int
	Key     string
	Reason  string
	Value   json.RawMessage
	Version int64
}

func (e *KVPreconditionError) Error() string {
	return fmt.Sprintf("kv operation %d (key %q) lost its required precondition: %s", e.Index, e.Key, e.Reason)
}

// Wire codes of KV input errors.
const (
	CodeKVBadRequest         = "kv_bad_request"
	CodeKVExpiryNotSpecified = "kv_expiry_not_specified"
	CodeKVPrefixRequired     = "kv_prefix_required"
	CodeKVGetPrefixInBundle  = "kv_get_prefix_in_transaction"
	CodeKVTooManyOpsInBundle = "kv_rider_too_large"
)

// validateKVOps checks every op before any database work; field names the
// array on the wire ("operations" or "kv").
func validateKVOps(ops []KVOp, field string, inBundle bool) error {
	keys := 0
	for i := range ops {
		op := &ops[i]
		at := fmt.Sprintf("%s[%d]", field, i)
		if op.Namespace == "" {
			return codedInvalid(CodeKVBadRequest, "%s.ns is required", at)
		}
		if err := checkCodedText(CodeKVBadRequest, at+".ns", op.Namespace, MaxNameBytes); err != nil {
			return err
		}
		if err := checkCodedText(CodeKVBadRequest, at+".prefix", op.Prefix, kvMaxKeyBytes); err != nil {
			return err
		}
		if err := checkCodedText(CodeKVBadRequest, at+".after", op.After, kvMaxKeyBytes); err != nil {
			return err
		}
		switch op.Op {
		case KVGet, KVPut, KVPutIfAbsent, KVDelete, KVIncr:
			if err := checkKVKey(op.Key, at+".key"); err != nil {
				return err
			}
			keys++
		case KVGetMany:
			if len(op.Keys) == 0 {
				return codedInvalid(CodeKVBadRequest, "%s.keys must be a non-empty array", at)
			}
			for j, k := range op.Keys {
				if err := checkKVKey(k, fmt.Sprintf("%s.keys[%d]", at, j)); err != nil {
					return err
				}
			}
			keys += len(op.Keys)
		case KVGetPrefix:
			if inBundle {
				return codedInvalid(CodeKVGetPrefixInBundle, "%s: getPrefix is not allowed inside a transaction", at)
			}
			if op.Prefix == "" {
				return codedInvalid(CodeKVPrefixRequired, "%s.prefix must be a non-empty string", at)
			}
			if op.Limit <= 0 {
				op.Limit = kvPrefixDefaultLimit
			}
			op.Limit = min(op.Limit, kvPrefixMaxLimit)
		default:
			return codedInvalid(CodeKVBadRequest, "%s.op %q is not a KV operation", at, op.Op)
		}
		if err := checkStoredKVName(op, at); err != nil {
			return err
		}
		switch op.Op {
		case KVPut, KVPutIfAbsent, KVIncr:
			if (op.TTLSeconds > 0) == op.Forever {
				return codedInvalid(CodeKVExpiryNotSpecified, "%s: exactly one of ttlSeconds (> 0) or forever:true is required", at)
			}
			if op.TTLSeconds > KVMaxTTLSeconds {
				return codedInvalid(CodeKVBadRequest, "%s.ttlSeconds is at most %d (100 years); a key that should outlive that is forever:true", at, KVMaxTTLSeconds)
			}
		}
		switch op.Op {
		case KVPut, KVPutIfAbsent:
			if len(op.Value) == 0 {
				return codedInvalid(CodeKVBadRequest, "%s.value is required", at)
			}
			if !json.Valid(op.Value) {
				return codedInvalid(CodeKVBadRequest, "%s.value is not JSON", at)
			}
			if problem := jsonbProblem(op.Value); problem != "" {
				// Values are stored as jsonb.
				return codedInvalid(CodeKVBadRequest, "%s.value %s", at, problem)
			}
			if op.Op == KVPutIfAbsent {
				zero := int64(0)
				op.Expect = &zero
			}
		case KVDelete:
			if op.Expect != nil && *op.Expect == 0 {
				return codedInvalid(CodeKVBadRequest, "%s.expect must be a version (>= 1) on delete", at)
			}
		case KVIncr:
			if op.Delta == nil {
				one := int64(1)
				op.Delta = &one
			}
			if op.Min != nil && op.Max != nil && *op.Min > *op.Max {
				return codedInvalid(CodeKVBadRequest, "%s: min is greater than max", at)
			}
		}
		if op.Expect != nil && *op.Expect < 0 {
			return codedInvalid(CodeKVBadRequest, "%s.expect must be >= 0", at)
		}
	}
	if inBundle && (len(ops) > kvBundleMaxOps || keys > kvBundleMaxKeys) {
		return codedInvalid(CodeKVTooManyOpsInBundle, "%s: a transaction carries at most %d KV operations and %d keys", field, kvBundleMaxOps, kvBundleMaxKeys)
	}
	return nil
}

// checkStoredKVName refuses "." and ".." as the namespace or key of an op
// that stores a key: the key routes (/api/v1/kv/{ns}/{key}) could never
// address it. Reads and deletes take them, so keys stored before this check
// can still be read and removed through POST /api/v1/kv.
func checkStoredKVName(op *KVOp, at string) error {
	switch op.Op {
	case KVPut, KVPutIfAbsent, KVIncr:
	default:
		return nil
	}
	for _, f := range [...]struct{ field, value string }{{at + ".ns", op.Namespace}, {at + ".key", op.Key}} {
		if msg := dotNameProblem(f.value); msg != "" {
			return codedInvalid(CodeKVBadRequest, "%s %s, so the key routes could not address the key", f.field, msg)
		}
	}
	return nil
}

func checkKVKey(key, field string) error {
	if key == "" {
		return codedInvalid(CodeKVBadRequest, "%s must be a non-empty string", field)
	}
	return checkCodedText(CodeKVBadRequest, field, key, kvMaxKeyBytes)
}

// KV runs a batch of operations in one transaction. Results are index-aligned.
// When a `required` op loses, nothing is written: the failing op's result
// says why, every other result is marked RolledBack, and the precondition
// error is returned beside them.
func (e *Engine) KV(ctx context.Context, ops []KVOp) ([]KVResult, *KVPreconditionError, error) {
	if err := validateKVOps(ops, "operations", false); err != nil {
		return nil, nil, err
	}
	var results []KVResult
	var lost *KVPreconditionError
	err := e.retryTx(ctx, func(tx pgx.Tx) error {
		var err error
		results, lost, err = applyKV(ctx, tx, ops)
		if err != nil {
			return err
		}
		if lost != nil {
			return errRollback
		}
		return nil
	})
	if errors.Is(err, errRollback) {
		markRolledBack(results, lost)
		return results, lost, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return results, nil, nil
}

// markRolledBack rewrites the results of a call that lost's op rolled back:
// nothing of it committed, so no result may show a value, version or
// found:true the call itself produced. The failing op keeps its reason and,
// when it lost to a committed key, that key's value and version.
func markRolledBack(results []KVResult, lost *KVPreconditionError) {
	note := fmt.Sprintf("rolled back: operation %d lost a required precondition", lost.Index)
	for i := range results {
		r := &results[i]
		if i == lost.Index {
			r.Applied, r.Error = false, lost.Error()
			if lost.Version == 0 {
				r.Value, r.Version, r.ExpiresAt, r.UpdatedAt = nil, 0, nil, nil
			}
			continue
		}
		*r = KVResult{Index: r.Index, Op: r.Op, Key: r.Key, Prefix: r.Prefix, Error: note, RolledBack: true}
	}
}

// errRollback makes retryTx roll back without reporting a failure.
var errRollback = errors.New("rollback requested")

// retryTx runs fn in a transaction, retrying serialization failures and deadlocks.
func (e *Engine) retryTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return retryTransient(func() error { return pgx.BeginFunc(ctx, e.pool, fn) })
}

type kvKey struct{ ns, key string }

// kvState is a key as the batch sees it while applying its ops in order.
type kvState struct {
	exists    bool
	value     json.RawMessage
	version   int64
	expiresAt *time.Time
	createdAt time.Time
	updatedAt time.Time
	dirty     bool
}

// applyKV applies ops inside tx in a bounded number of round trips:
// (advisory-lock every written key in hash order, read every named key,
// run each getPrefix, print each put's value as jsonb stores it) then
// (upsert and delete what changed). Locking by key
// hash covers keys that do not exist yet, so two writers of the same absent
// key serialize instead of both inserting. Ops are applied in order in memory,
// so a read after a write in the same call sees the write.
func applyKV(ctx context.Context, tx batchTx, ops []KVOp) ([]KVResult, *KVPreconditionError, error) {
	if len(ops) == 0 {
		return nil, nil, nil
	}
	results := make([]KVResult, len(ops))
	var lockNS, lockKey, readNS, readKey []string
	named := map[kvKey]bool{}
	writes := false
	for _, op := range ops {
		keys := []string{op.Key}
		if op.Op == KVGetMany {
			keys = op.Keys
		} else if op.Op == KVGetPrefix {
			continue
		}
		for _, k := range keys {
			kk := kvKey{op.Namespace, k}
			if KVIsWrite(op.Op) {
				writes = true
				lockNS, lockKey = append(lockNS, kk.ns), append(lockKey, kk.key)
			}
			if !named[kk] {
				named[kk] = true
				readNS, readKey = append(readNS, kk.ns), append(readKey, kk.key)
			}
		}
	}
	b := &pgx.Batch{}
	if writes {
		// Sorted lock order: concurrent batches and bundles never deadlock on keys.
		b.Queue(`SELECT pg_advisory_xact_lock($1::int4, h) FROM (
				SELECT DISTINCT hashtext(length(ns)::text || ':' || ns || k) AS h
				FROM unnest($2::text[], $3::text[]) AS x(ns, k) ORDER BY 1) s`, int32(kvLockClass), lockNS, lockKey)
	}
	// Expiry is judged, and new stamps taken, when the key locks are held: a
	// write that waited for them must not see a key alive that expired while
	// it waited (the transaction's now() is from before the wait).
	b.Queue(`SELECT clock_timestamp()`)
	lock := ""
	if writes {
		lock = " FOR UPDATE OF kv"
	}
	b.Queue(`SELECT kv.namespace, kv.key, kv.value, kv.version, kv.expires_at, kv.created_at, kv.updated_at,
			kv.expires_at IS NOT NULL AND kv.expires_at <= (SELECT clock_timestamp())
		FROM unnest($1::text[], $2::text[]) AS x(ns, k)
		JOIN lanes.kv ON kv.namespace = x.ns AND kv.key = x.k`+lock, readNS, readKey)
	prefixOps := []int{}
	for i, op := range ops {
		if op.Op != KVGetPrefix {
			continue
		}
		prefixOps = append(prefixOps, i)
		bound, below := prefixRangeEnd(op.Prefix, 6)
		b.Queue(`SELECT key, CASE WHEN $5 THEN NULL ELSE value END, version, expires_at, updated_at FROM lanes.kv
			WHERE namespace = $1 AND key >= $2`+bound+` AND starts_with(key, $2) AND key > $3
			  AND (expires_at IS NULL OR expires_at > (SELECT clock_timestamp()))
			ORDER BY key LIMIT $4`, append([]any{op.Namespace, op.Prefix, op.After, op.Limit + 1, op.KeysOnly}, below...)...)
	}
	// A put answers its value, and a later get in the call reads it, as
	// jsonb stores it: the text every later read shows, not the text sent.
	var putValues []string
	var putAt []int
	for i, op := range ops {
		if op.Op == KVPut || op.Op == KVPutIfAbsent {
			putValues, putAt = append(putValues, string(op.Value)), append(putAt, i)
		}
	}
	if len(putValues) > 0 {
		b.Queue(`SELECT v::jsonb::text FROM unnest($1::text[]) WITH ORDINALITY AS x(v, n) ORDER BY n`, putValues)
	}
	stored := make([]json.RawMessage, len(ops))
	state := map[kvKey]*kvState{}
	prefixRows := map[int][]KVRow{}
	var now time.Time
	br := tx.SendBatch(ctx, b)
	err := func() error {
		defer br.Close()
		if writes {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		if err := br.QueryRow().Scan(&now); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var k kvKey
			var s kvState
			var expired bool
			if err := rows.Scan(&k.ns, &k.key, &s.value, &s.version, &s.expiresAt, &s.createdAt, &s.updatedAt, &expired); err != nil {
				rows.Close()
				return err
			}
			// An expired row is absent for reads and writes alike, but its
			// version stays the base of the next write: restarting at 1 would
			// let a compare-and-set holding a version from before the expiry
			// overwrite the key's new owner.
			s.exists = !expired
			if expired {
				s.value = nil
			}
			state[k] = &s
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, i := range prefixOps {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			for rows.Next() {
				var r KVRow
				if err := rows.Scan(&r.Key, &r.Value, &r.Version, &r.ExpiresAt, &r.UpdatedAt); err != nil {
					rows.Close()
					return err
				}
				prefixRows[i] = append(prefixRows[i], r)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		if len(putValues) > 0 {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			for n := 0; rows.Next(); n++ {
				var text string
				if err := rows.Scan(&text); err != nil {
					rows.Close()
					return err
				}
				stored[putAt[n]] = compactJSON(json.RawMessage(text))
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		return nil, nil, err
	}
	for k := range named {
		if state[k] == nil {
			state[k] = &kvState{}
		}
	}

	budget := kvMaxReadBytes
	var lost *KVPreconditionError
	for i := range ops {
		op := &ops[i]
		res := &results[i]
		res.Index, res.Op, res.Key = i, op.Op, op.Key
		switch op.Op {
		case KVGet:
			s := state[kvKey{op.Namespace, op.Key}]
			res.Found = s.exists
			if s.exists {
				fillKVResult(res, s)
				budget -= len(s.value)
			}
		case KVGetMany:
			res.Rows = []KVRow{}
			res.Missing = []string{}
			for _, k := range op.Keys {
				s := state[kvKey{op.Namespace, k}]
				if !s.exists {
					res.Missing = append(res.Missing, k)
					continue
				}
				if budget < len(s.value) && len(res.Rows) > 0 {
					res.Truncated = true
					break
				}
				budget -= len(s.value)
				res.Rows = append(res.Rows, kvRowOf(k, s))
			}
		case KVGetPrefix:
			applyPrefixPage(res, op, prefixRows[i], state, &budget)
		default:
			s := state[kvKey{op.Namespace, op.Key}]
			reason := applyKVWrite(op, stored[i], s, now)
			res.Applied = reason == ""
			res.Reason = reason
			if s.exists {
				fillKVResult(res, s)
			}
			if reason != "" && op.Required && lost == nil {
				lost = &KVPreconditionError{Index: i, Key: op.Key, Reason: reason}
				if s.exists && !s.dirty { // a winner this call wrote never commits
					lost.Value, lost.Version = s.value, s.version
				}
			}
		}
	}
	if lost != nil {
		return results, lost, nil
	}
	return results, nil, writeKVState(ctx, tx, state)
}

func fillKVResult(res *KVResult, s *kvState) {
	res.Value, res.Version, res.ExpiresAt = s.value, s.version, s.expiresAt
	updated := s.updatedAt
	res.UpdatedAt = &updated
}

func kvRowOf(key string, s *kvState) KVRow {
	return KVRow{Key: key, Value: s.value, Version: s.version, ExpiresAt: s.expiresAt, UpdatedAt: s.updatedAt}
}

// applyPrefixPage turns a getPrefix page into its result. The page was read
// before this call's writes, so keys this call changed are merged in as they
// are now.
func applyPrefixPage(res *KVResult, op *KVOp, page []KVRow, state map[kvKey]*kvState, budget *int) {
	res.Prefix = op.Prefix
	res.Key = ""
	res.Rows = []KVRow{}
	truncated := len(page) > op.Limit
	merged := map[string]KVRow{}
	for _, r := range page {
		merged[r.Key] = r
	}
	for k, s := range state {
		if k.ns != op.Namespace || !s.dirty || !strings.HasPrefix(k.key, op.Prefix) || k.key <= op.After {
			continue
		}
		if !s.exists {
			delete(merged, k.key)
			continue
		}
		if truncated && k.key > page[len(page)-1].Key {
			continue // beyond what the page covers
		}
		merged[k.key] = kvRowOf(k.key, s)
	}
	keys := make([]string, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) > op.Limit {
		keys, truncated = keys[:op.Limit], true
	}
	for _, k := range keys {
		r := merged[k]
		if op.KeysOnly {
			r.Value = nil
		}
		if *budget < len(r.Value) && len(res.Rows) > 0 {
			truncated = true
			break
		}
		*budget -= len(r.Value)
		res.Rows = append(res.Rows, r)
	}
	res.Truncated = truncated
	if truncated && len(res.Rows) > 0 {
		res.NextAfter = res.Rows[len(res.Rows)-1].Key
	}
}

// applyKVWrite applies one write to s, returning why it did not apply ("" if
// it did); value is a put's value as jsonb stores it.
func applyKVWrite(op *KVOp, value json.RawMessage, s *kvState, now time.Time) string {
	if op.Expect != nil {
		switch {
		case *op.Expect == 0 && s.exists:
			return KVReasonExists
		case *op.Expect > 0 && !s.exists:
			return KVReasonAbsent
		case *op.Expect > 0 && s.version != *op.Expect:
			return KVReasonVersion
		}
	}
	expiry := func() *time.Time {
		if op.Forever {
			return nil
		}
		t := now.Add(time.Duration(op.TTLSeconds) * time.Second)
		return &t
	}
	switch op.Op {
	case KVPut, KVPutIfAbsent:
		s.value = value
		s.expiresAt = expiry()
	case KVDelete:
		if !s.exists {
			return KVReasonAbsent
		}
		s.exists, s.dirty = false, true
		return ""
	case KVIncr:
		current := int64(0)
		if s.exists {
			n, ok := jsonInteger(s.value)
			if !ok {
				return KVReasonType
			}
			current = n
		}
		next := current + *op.Delta
		if (*op.Delta > 0 && next < current) || (*op.Delta < 0 && next > current) ||
			(op.Min != nil && next < *op.Min) || (op.Max != nil && next > *op.Max) {
			return KVReasonLimit
		}
		if !s.exists {
			s.expiresAt = expiry() // the TTL applies when incr creates the key only
		}
		s.value = json.RawMessage(strconv.FormatInt(next, 10))
	}
	if !s.exists {
		s.createdAt = now
	}
	s.exists, s.dirty = true, true
	s.version++
	s.updatedAt = now
	return ""
}

// jsonInteger reads a stored value as the integer incr adds to. A string is never one, even
// "5": json.Number would take a quoted number.
func jsonInteger(v json.RawMessage) (int64, bool) {
	if t := bytes.TrimSpace(v); len(t) == 0 || t[0] == '"' {
		return 0, false
	}
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	var n json.Number
	if err := d.Decode(&n); err != nil {
		return 0, false
	}
	i, err := n.Int64()
	if err != nil {
		f, ferr := n.Float64()
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return 0, false
		}
		return int64(f), true
	}
	return i, true
}

func compactJSON(v json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		return v
	}
	return buf.Bytes()
}

// writeKVState writes every changed key in one round trip: one upsert, one delete.
func writeKVState(ctx context.Context, tx batchTx, state map[kvKey]*kvState) error {
	keys := make([]kvKey, 0, len(state))
	for k, s := range state {
		if s.dirty {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].ns != keys[j].ns {
			return keys[i].ns < keys[j].ns
		}
		return keys[i].key < keys[j].key
	})
	var upNS, upKey, upValue, delNS, delKey []string
	var upVersion []int64
	var upExpires []*time.Time
	var upCreated, upUpdated []time.Time
	for _, k := range keys {
		s := state[k]
		if !s.exists {
			delNS, delKey = append(delNS, k.ns), append(delKey, k.key)
			continue
		}
		upNS, upKey = append(upNS, k.ns), append(upKey, k.key)
		upValue = append(upValue, string(s.value))
		upVersion = append(upVersion, s.version)
		upExpires = append(upExpires, s.expiresAt)
		upCreated = append(upCreated, s.createdAt)
		upUpdated = append(upUpdated, s.updatedAt)
	}
	b := &pgx.Batch{}
	if len(upNS) > 0 {
		b.Queue(`INSERT INTO lanes.kv (namespace, key, value, version, expires_at, created_at, updated_at)
			SELECT x.ns, x.k, x.v::jsonb, x.ver, x.exp, x.cr, x.up
			FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::timestamptz[], $6::timestamptz[], $7::timestamptz[])
				AS x(ns, k, v, ver, exp, cr, up)
			ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version,
				expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at, created_at = EXCLUDED.created_at`,
			upNS, upKey, upValue, upVersion, upExpires, upCreated, upUpdated)
	}
	if len(delNS) > 0 {
		b.Queue(`DELETE FROM lanes.kv USING unnest($1::text[], $2::text[]) AS x(ns, k)
			WHERE kv.namespace = x.ns AND kv.key = x.k`, delNS, delKey)
	}
	return tx.SendBatch(ctx, b).Close()
}

// KVNamespace is one namespace with its live key count.
type KVNamespace struct {
	Namespace string
	Keys      int64
}

// KVNamespaces lists one page of the namespaces that hold live keys, by name,
// and says whether more follow.
func (e *Engine) KVNamespaces(ctx context.Context, page RowPage) ([]KVNamespace, bool, error) {
	after, args := page.nameAfter("namespace", page.limitArg(), page.Offset)
	rows, err := e.pool.Query(ctx, `SELECT namespace, count(*) FROM lanes.kv
		WHERE (expires_at IS NULL OR expires_at > now())`+after+` GROUP BY namespace ORDER BY namespace
		LIMIT $1 OFFSET $2`, args...)
	if err != nil {
		return nil, false, err
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (KVNamespace, error) {
		var n KVNamespace
		err := r.Scan(&n.Namespace, &n.Keys)
		return n, err
	})
	if err != nil {
		return nil, false, err
	}
	list, more := cutPage(list, page)
	return list, more, nil
}

// KVListRequest pages through one namespace for the console.
type KVListRequest struct {
	Namespace      string
	Prefix         string
	After          string
	Limit          int
	KeysOnly       bool
	IncludeExpired bool
}

// KVListPage is one page of KVList.
type KVListPage struct {
	Rows      []KVRow
	Truncated bool
	NextAfter string
	Bytes     int
}

// KVList returns keys of a namespace in key order.
func (e *Engine) KVList(ctx context.Context, req KVListRequest) (*KVListPage, error) {
	if req.Namespace == "" {
		return nil, codedInvalid(CodeKVBadRequest, "namespace is required")
	}
	for _, f := range [...]struct{ name, value string }{{"namespace", req.Namespace}, {"prefix", req.Prefix}, {"after", req.After}} {
		if err := checkCodedText(CodeKVBadRequest, f.name, f.value, 0); err != nil {
			return nil, err
		}
	}
	if req.Limit <= 0 {
		req.Limit = kvPrefixDefaultLimit
	}
	req.Limit = min(req.Limit, kvPrefixMaxLimit)
	// The page stops before the value that would take it past the listing
	// byte budget, after at least one row; the sizes are summed in the
	// database, so the values past the budget are never sent to the broker.
	bound, below := prefixRangeEnd(req.Prefix, 8)
	rows, err := e.pool.Query(ctx, `WITH page AS (
			SELECT key, value, version, expires_at, updated_at
			FROM lanes.kv
			WHERE namespace = $1 AND key > $3 AND key >= $2`+bound+` AND starts_with(key, $2)
			  AND ($6 OR expires_at IS NULL OR expires_at > now())
			ORDER BY key LIMIT $4::int8 + 1),
		sized AS (
			SELECT key, count(*) OVER () AS matched, row_number() OVER w AS n,
				sum(CASE WHEN $5 THEN 0 ELSE octet_length(value::text) END) OVER w AS upto
			FROM page WINDOW w AS (ORDER BY key ROWS UNBOUNDED PRECEDING))
		SELECT page.key, CASE WHEN $5 THEN NULL ELSE page.value END, page.version, page.expires_at, page.updated_at,
			page.expires_at IS NOT NULL AND page.expires_at <= now(), sized.matched
		FROM sized JOIN page ON page.key = sized.key
		WHERE sized.n <= $4 AND (sized.n = 1 OR sized.upto <= $7)
		ORDER BY sized.n`, append([]any{req.Namespace, req.Prefix, req.After, req.Limit, req.KeysOnly, req.IncludeExpired,
		e.listMaxBytes()}, below...)...)
	if err != nil {
		return nil, err
	}
	page := &KVListPage{Rows: []KVRow{}}
	matched := 0
	page.Rows, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (KVRow, error) {
		var row KVRow
		err := r.Scan(&row.Key, &row.Value, &row.Version, &row.ExpiresAt, &row.UpdatedAt, &row.Expired, &matched)
		return row, err
	})
	if err != nil {
		return nil, err
	}
	if page.Rows == nil {
		page.Rows = []KVRow{}
	}
	for _, r := range page.Rows {
		page.Bytes += len(r.Value)
	}
	page.Truncated = len(page.Rows) < matched
	if page.Truncated && len(page.Rows) > 0 {
		page.NextAfter = page.Rows[len(page.Rows)-1].Key
	}
	return page, nil
}

// kvSweepStep bounds each delete of the sweeper so it never holds many row locks.
const kvSweepStep = 1000

// SweepExpiredKV deletes expired keys in bounded steps and returns how many
// it deleted. Rows a writer holds are skipped (the writer treats them as absent).
func (e *Engine) SweepExpiredKV(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := e.pool.Exec(ctx, `DELETE FROM lanes.kv WHERE ctid IN (
			SELECT ctid FROM lanes.kv WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)`, kvSweepStep)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < kvSweepStep {
			return total, nil
		}
	}
}

// StartKVSweeper deletes expired keys every interval until the engine closes.
func (e *Engine) StartKVSweeper(interval time.Duration) {
	if interval <= 0 {
		return
	}
	failures := failurelog.New(e.log, slog.LevelWarn, "kv sweep failed", "")
	e.runEvery(interval, func() {
		ctx, cancel := context.WithTimeout(e.halt, time.Minute)
		defer cancel()
		n, err := e.SweepExpiredKV(ctx)
		if err != nil {
			failures.Failed(err)
			return
		}
		failures.Succeeded()
		if n > 0 {
			e.log.Debug("kv sweep", "deleted", n)
		}
	}, nil)
}

// prefixRangeEnd bounds a prefix scan of the byte-ordered key index from
// above: " AND key < $param" with the first string past every key that starts
// with prefix, or nothing when there is none (a prefix of U+10FFFF only, or
// empty). In UTF-8 byte order is code point order, so that string is prefix up
// to its last code point below U+10FFFF, that code point plus one. Appending
// U+10FFFF to the prefix is no such bound: it cut off the keys that continue
// the prefix with U+10FFFF.
func prefixRangeEnd(prefix string, param int) (string, []any) {
	runes := []rune(prefix)
	for i := len(runes) - 1; i >= 0; i-- {
		if runes[i] == utf8.MaxRune {
			continue
		}
		next := runes[i] + 1
		if next == 0xD800 { // surrogates are no text
			next = 0xE000
		}
		return fmt.Sprintf(" AND key < $%d", param), []any{string(runes[:i]) + string(next)}
	}
	return "", nil
}
