package auth

import (
	"net/http"
	"slices"
	"strings"
)

// Level is what a route demands of a token.
type Level int

const (
	Public Level = iota
	ReadOnly
	WriteOnly
	ReadWrite
	Admin
)

func (l Level) String() string {
	return [...]string{"public", "read-only", "write-only", "read-write", "admin"}[l]
}

// satisfiedBy lists, per level, the roles that meet it (http-api-v1.md §1.1).
var satisfiedBy = map[Level][]string{
	ReadOnly:  {RoleReadOnly, RoleReadWrite, RoleAdmin},
	WriteOnly: {RoleWriteOnly, RoleReadWrite, RoleAdmin},
	ReadWrite: {RoleReadWrite, RoleAdmin},
	Admin:     {RoleAdmin},
}

// Allows reports whether any of roles meets the level.
func (l Level) Allows(roles []string) bool {
	if l == Public {
		return true
	}
	for _, r := range roles {
		if slices.Contains(satisfiedBy[l], r) {
			return true
		}
	}
	return false
}

// PublicPaths need no token even with auth on.
var PublicPaths = []string{"/health", "/metrics", "/metrics/prometheus"}

// readOnlyGetPrefixes are the resource reads; any other GET (pops, unknown paths) is read-write.
var readOnlyGetPrefixes = []string{
	"/status", "/api/v1/status", "/api/v1/resources", "/api/v1/messages", "/api/v1/dlq",
	"/api/v1/consumer-groups", "/api/v1/kv", "/api/v1/timers", "/api/v1/system",
	"/api/v1/analytics", "/api/v1/traces",
}

// RouteLevel is the access level of a request. Unknown routes are read-write.
func RouteLevel(method, path string) Level {
	if slices.Contains(PublicPaths, path) {
		return Public
	}
	switch method {
	case http.MethodGet, http.MethodHead:
		if hasPrefix(path, "/api/v1/pop") {
			return ReadWrite
		}
		for _, p := range readOnlyGetPrefixes {
			if hasPrefix(path, p) {
				return ReadOnly
			}
		}
		return ReadWrite
	case http.MethodPost:
		switch {
		case path == "/api/v1/push" || path == "/api/v1/timers":
			return WriteOnly
		case path == "/api/v1/resources/kv/list":
			return ReadOnly
		case hasPrefix(path, "/api/v1/system"):
			return Admin
		}
		return ReadWrite
	case http.MethodDelete:
		switch {
		case hasPrefix(path, "/api/v1/consumer-groups/"),
			path == "/api/v1/dlq",
			hasPrefix(path, "/api/v1/resources/queues/"):
			return Admin
		}
		return ReadWrite
	}
	return ReadWrite
}

// hasPrefix matches whole path segments: /api/v1/pop matches /api/v1/pop/queue/x, not /api/v1/popx.
func hasPrefix(path, prefix string) bool {
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || strings.HasSuffix(prefix, "/") || path[len(prefix)] == '/'
}
