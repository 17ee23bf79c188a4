package api

import (
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// boolQueryRoute is one operation of the spec that takes boolean query
// parameters: its method, its path template split into segments ("" for a
// path parameter) and the names of those parameters.
type boolQueryRoute struct {
	method   string
	segments []string
	names    map[string]bool
}

// boolQueryRoutes lists every operation in the spec with a boolean query
// parameter, so that a new one is covered without touching this file.
func boolQueryRoutes(spec *openapi3.T) []boolQueryRoute {
	var routes []boolQueryRoute
	paths := spec.Paths.InMatchingOrder()
	sort.Strings(paths)
	for _, path := range paths {
		item := spec.Paths.Value(path)
		for method, op := range item.Operations() {
			names := map[string]bool{}
			for _, params := range []openapi3.Parameters{item.Parameters, op.Parameters} {
				for _, ref := range params {
					p := ref.Value
					if p != nil && p.In == openapi3.ParameterInQuery && p.Schema != nil && p.Schema.Value != nil &&
						p.Schema.Value.Type.Is(openapi3.TypeBoolean) {
						names[p.Name] = true
					}
				}
			}
			if len(names) == 0 {
				continue
			}
			segments := strings.Split(strings.TrimPrefix(path, "/"), "/")
			for i, s := range segments {
				if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
					segments[i] = ""
				}
			}
			routes = append(routes, boolQueryRoute{method: method, segments: segments, names: names})
		}
	}
	return routes
}

// match reports whether the (escaped) request path fits the route's template.
func (b boolQueryRoute) match(method, escapedPath string) bool {
	if method != b.method {
		return false
	}
	rest := strings.TrimPrefix(escapedPath, "/")
	for i, seg := range b.segments {
		part, tail, found := strings.Cut(rest, "/")
		if (seg != "" && part != seg) || (seg == "" && part == "") {
			return false
		}
		if !found {
			return i == len(b.segments)-1
		}
		rest = tail
	}
	return false
}

// normaliseBoolQuery rewrites `yes`/`no` (any case) to `true`/`false` in the
// boolean query parameters of management routes, before the spec validator
// and the generated binders read them (both take only true/false/1/0): the
// reference reads management booleans as strings and accepts 1/0/yes/no
// (http-api-v1.md §1.1). Message-plane query strings skip the work: their
// booleans take what the validator takes, which the reference's true/false is
// part of (docs/wire-compatibility.md). Every other byte of the query string is
// left as it came.
func normaliseBoolQuery(routes []boolQueryRoute, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery == "" || isMessagePlane(r) {
			next.ServeHTTP(w, r)
			return
		}
		var names map[string]bool
		for _, route := range routes {
			if route.match(r.Method, r.URL.EscapedPath()) {
				names = route.names
				break
			}
		}
		if names == nil {
			next.ServeHTTP(w, r)
			return
		}
		pairs := strings.Split(r.URL.RawQuery, "&")
		changed := false
		for i, pair := range pairs {
			rawKey, rawValue, found := strings.Cut(pair, "=")
			if !found {
				continue
			}
			key, err := url.QueryUnescape(rawKey)
			if err != nil || !names[key] {
				continue
			}
			value, err := url.QueryUnescape(rawValue)
			if err != nil {
				continue
			}
			switch strings.ToLower(value) {
			case "yes":
				pairs[i] = rawKey + "=true"
				changed = true
			case "no":
				pairs[i] = rawKey + "=false"
				changed = true
			}
		}
		if changed {
			r = r.Clone(r.Context())
			r.URL.RawQuery = strings.Join(pairs, "&")
		}
		next.ServeHTTP(w, r)
	})
}
