package auth

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// A role claim entry starting with "/" is a JSON Pointer (RFC 6901) into the
// token's claims; any other entry is one top-level claim named exactly so.
// A dotted path would not do: Keycloak nests roles (realm_access.roles) while
// Auth0 names top-level claims with dots and slashes (https://example.com/roles).
type roleClaim struct {
	// path holds the member names (or array indexes) from the top.
	path []string
}

// CheckRoleClaim reports whether entry is a usable role claim: any claim
// name, or a well-formed JSON Pointer without empty segments.
func CheckRoleClaim(entry string) error {
	_, err := parseRoleClaim(entry)
	return err
}

func parseRoleClaim(entry string) (roleClaim, error) {
	if entry == "" {
		return roleClaim{}, errors.New("a role claim cannot be empty")
	}
	if !strings.HasPrefix(entry, "/") {
		return roleClaim{path: []string{entry}}, nil
	}
	var path []string
	for _, escaped := range strings.Split(entry[1:], "/") {
		// RFC 6901 reads an empty segment as a member named "", which no
		// issuer writes: it is a doubled or trailing "/" that would grant nothing.
		if escaped == "" {
			return roleClaim{}, fmt.Errorf("role claim %q: a JSON Pointer with an empty segment (a lone, doubled or trailing /); "+
				"a top-level claim whose name starts with / is written /~1name", entry)
		}
		segment, err := unescapePointerSegment(escaped)
		if err != nil {
			return roleClaim{}, fmt.Errorf("role claim %q: %w", entry, err)
		}
		path = append(path, segment)
	}
	return roleClaim{path: path}, nil
}

// unescapePointerSegment turns ~1 into / and ~0 into ~, left to right, so
// "~01" is "~1" as RFC 6901 §4 requires.
func unescapePointerSegment(escaped string) (string, error) {
	if !strings.Contains(escaped, "~") {
		return escaped, nil
	}
	var b strings.Builder
	for i := 0; i < len(escaped); i++ {
		if escaped[i] != '~' {
			b.WriteByte(escaped[i])
			continue
		}
		if i+1 == len(escaped) || (escaped[i+1] != '0' && escaped[i+1] != '1') {
			return "", errors.New("in a JSON Pointer ~ must be followed by 0 (for ~) or 1 (for /)")
		}
		if escaped[i+1] == '0' {
			b.WriteByte('~')
		} else {
			b.WriteByte('/')
		}
		i++
	}
	return b.String(), nil
}

// in returns the value the claim names in claims, or nil when the path runs
// into a missing member, a bad index or a value that is neither object nor array.
func (c roleClaim) in(claims map[string]any) any {
	var at any = claims
	for _, segment := range c.path {
		switch node := at.(type) {
		case map[string]any:
			at = node[segment]
		case []any:
			i, ok := arrayIndex(segment, len(node))
			if !ok {
				return nil
			}
			at = node[i]
		default:
			return nil
		}
	}
	return at
}

// arrayIndex reads an RFC 6901 array index: "0" or digits without a leading zero.
func arrayIndex(segment string, length int) (int, bool) {
	if segment == "" || (len(segment) > 1 && segment[0] == '0') {
		return 0, false
	}
	for _, r := range segment {
		if r < '0' || r > '9' {
			return 0, false
		}
	}
	i, err := strconv.Atoi(segment)
	return i, err == nil && i < length
}
