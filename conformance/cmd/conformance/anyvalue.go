package main

import "github.com/getkin/kin-openapi/openapi3"

// acceptAnyJSONValueUnread rewrites, in the proxy's copy of the spec, every
// response schema that accepts any JSON value (a popped payload, a KV value, a
// dead letter's payload: an anyOf of every JSON type, each nullable) into one
// that accepts it without reading it. kin-openapi converts a number to float64
// before it checks a schema, so a payload pushed as a bare 1e400, which the
// broker stores and answers verbatim, was flagged as a violation. The broker
// does the same for requests (server/internal/api/anyvalue.go, which this
// module cannot import); every other field keeps its schema.
func acceptAnyJSONValueUnread(doc *openapi3.T) {
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
					readAnyJSONValuesUnread(media.Schema, seen)
				}
			}
		}
	}
}

func readAnyJSONValuesUnread(ref *openapi3.SchemaRef, seen map[*openapi3.Schema]bool) {
	if ref == nil || ref.Value == nil || seen[ref.Value] {
		return
	}
	s := ref.Value
	seen[s] = true
	if acceptsEveryJSONValue(s) {
		// The boolean schema true: kin-openapi's validator returns on it
		// before it reads the value. Any schema with a keyword converts a
		// number, and the empty one {} refuses null, which these accept.
		accept := true
		*s = openapi3.Schema{Always: &accept}
		return
	}
	for _, p := range s.Properties {
		readAnyJSONValuesUnread(p, seen)
	}
	readAnyJSONValuesUnread(s.Items, seen)
	readAnyJSONValuesUnread(s.AdditionalProperties.Schema, seen)
	readAnyJSONValuesUnread(s.Not, seen)
	for _, list := range []openapi3.SchemaRefs{s.AllOf, s.AnyOf, s.OneOf} {
		for _, r := range list {
			readAnyJSONValuesUnread(r, seen)
		}
	}
}

// acceptsEveryJSONValue reports whether s is an anyOf of branches that each
// add nothing but one or more types and nullable, whose types together cover
// every JSON value, with no constraint of its own beside it.
func acceptsEveryJSONValue(s *openapi3.Schema) bool {
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
