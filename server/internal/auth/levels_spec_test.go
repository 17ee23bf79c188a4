package auth

import (
	"regexp"
	"strings"
	"testing"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// rolePhrase is how openapi.yaml names the roles that meet a level.
func rolePhrase(l Level) string {
	roles := satisfiedBy[l]
	switch len(roles) {
	case 0:
		return "none (public, no token needed even with auth on)"
	case 1:
		return roles[0]
	}
	return strings.Join(roles[:len(roles)-1], ", ") + " or " + roles[len(roles)-1]
}

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// Users of generated clients learn an operation's role from its description, so every
// operation's "Required role:" sentence must say what RouteLevel enforces.
func TestSpecDescriptionsNameTheRoleRouteLevelEnforces(t *testing.T) {
	spec, err := gen.GetSpec()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for path, item := range spec.Paths.Map() {
		concrete := pathParam.ReplaceAllString(path, "x")
		for method, op := range item.Operations() {
			checked++
			level := RouteLevel(method, concrete)
			want := "Required role: " + rolePhrase(level) + "."
			description := strings.Join(strings.Fields(op.Description), " ")
			if !strings.Contains(description, want) {
				t.Errorf("%s %s (%s): description lacks %q", method, path, op.OperationID, want)
			} else if strings.Count(description, "Required role") != 1 {
				t.Errorf("%s %s (%s): description must name its role exactly once", method, path, op.OperationID)
			}
			// `security: []` is how the spec marks a route public.
			if public := op.Security != nil && len(*op.Security) == 0; public != (level == Public) {
				t.Errorf("%s %s (%s): security: [] is %v, but the route level is %v", method, path, op.OperationID, public, level)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d operations; the spec has more", checked)
	}
}
