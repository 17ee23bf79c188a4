// Package anyjson lets kin-openapi validate a document whose "any JSON value"
// fields (a payload, a KV value: an anyOf of every JSON type, each nullable)
// it must not read. kin-openapi converts a number to float64 before it checks
// any schema with a keyword, so such a field refused a bare 1e400 that
// PostgreSQL's jsonb and the broker's byte-exact payloads take. The broker's
// request validator and the conformance proxy's response validator both
// apply it to their copy of openapi.yaml; every other field keeps its schema.
package anyjson

import (
	"github.com/getkin/kin-openapi/openapi3"
)

// LeaveUnreadInRequests rewrites every request-body schema of doc that
// accepts any JSON value into the boolean schema true.
func LeaveUnreadInRequests(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.RequestBody == nil || op.RequestBody.Value == nil {
				continue
			}
			for _, media := range op.RequestBody.Value.Content {
				leaveUnread(media.Schema, seen)
			}
		}
	}
}

// LeaveUnreadInResponses does the same for every response schema of doc.
func LeaveUnreadInResponses(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.Responses == nil {
				continue
			}
			for _, resp := range op.Responses.Map() {
				if resp == nil || resp.Value == nil {
					continue
				}
				for _, media := range resp.Value.Content {
					leaveUnread(media.Schema, seen)
				}
			}
		}
	}
}

func leaveUnread(ref *openapi3.SchemaRef, seen map[*openapi3.Schema]bool) {
	if ref == nil || ref.Value == nil || seen[ref.Value] {
		return
	}
	s := ref.Value
	seen[s] = true
	if acceptsEveryValue(s) {
		// The boolean schema true: kin-openapi's validator returns on it
		// before it reads the value. Any schema with a keyword converts a
		// number, and the empty one {} refuses null, which these accept.
		accept := true
		*s = openapi3.Schema{Always: &accept}
		return
	}
	for _, p := range s.Properties {
		leaveUnread(p, seen)
	}
	leaveUnread(s.Items, seen)
	leaveUnread(s.AdditionalProperties.Schema, seen)
	leaveUnread(s.Not, seen)
	for _, list := range []openapi3.SchemaRefs{s.AllOf, s.AnyOf, s.OneOf} {
		for _, r := range list {
			leaveUnread(r, seen)
		}
	}
}

// acceptsEveryValue reports whether s is an anyOf of branches that each
// add nothing but one or more types and nullable, whose types together cover
// every JSON value, with no constraint of its own beside it.
func acceptsEveryValue(s *openapi3.Schema) bool {
	if len(s.AnyOf) == 0 {
		return false
	}
	outer := *s
	outer.AnyOf = nil
	if !outer.IsEmpty() {
		return false
	}
	types := map[string]bool{}
	for _, ref := range s.AnyOf {
		branch := ref.Value
		if branch == nil || !branch.Nullable || branch.Type == nil {
			return false
		}
		bare := *branch
		bare.Type, bare.Nullable = nil, false
		if !bare.IsEmpty() {
			return false
		}
		for _, t := range branch.Type.Slice() {
			types[t] = true
		}
	}
	for _, t := range []string{openapi3.TypeObject, openapi3.TypeArray, openapi3.TypeString, openapi3.TypeNumber, openapi3.TypeBoolean} {
		if !types[t] {
			return false
		}
	}
	return true
}
