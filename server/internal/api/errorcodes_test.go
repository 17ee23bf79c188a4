package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// wireCodes is every constant of errorcodes.go by name; the test checks that
// it misses none, so a new constant cannot skip the spec check.
var wireCodes = map[string]string{
	"CodeHeadersTooLarge":         CodeHeadersTooLarge,
	"CodeNotImplemented":          CodeNotImplemented,
	"CodeHTTPVersionNotSupported": CodeHTTPVersionNotSupported,
	"CodeBadRequest":              CodeBadRequest, "CodeInvalidJSON": CodeInvalidJSON, "CodeValidation": CodeValidation,
	"CodeNotFound": CodeNotFound, "CodeNoSuchRoute": CodeNoSuchRoute, "CodeMethod": CodeMethod,
	"CodeUnauthorized": CodeUnauthorized, "CodeForbidden": CodeForbidden, "CodeLimitExceeded": CodeLimitExceeded,
	"CodePayloadTooLarge": CodePayloadTooLarge, "CodeRequestTimeout": CodeRequestTimeout,
	"CodeRateLimited": CodeRateLimited, "CodeOverloaded": CodeOverloaded, "CodeDatabase": CodeDatabase,
	"CodeDatabaseTimeout": CodeDatabaseTimeout, "CodeInternal": CodeInternal, "CodeCorruptSegment": CodeCorruptSegment,
	"CodeInvalidOption": CodeInvalidOption, "CodeQueueNotFound": CodeQueueNotFound,
	"CodeMessageNotFound": CodeMessageNotFound, "CodeQueueRequired": CodeQueueRequired,
	"CodeInvalidID": CodeInvalidID, "CodeGone": CodeGone, "CodeDestinationGone": CodeDestinationGone,
	"CodeMaintenance": CodeMaintenance, "CodeKVBadRequest": CodeKVBadRequest,
	"CodeKVExpiryNotSpecified": CodeKVExpiryNotSpecified, "CodeKVPrefixRequired": CodeKVPrefixRequired,
	"CodeKVGetPrefixInTransaction": CodeKVGetPrefixInTransaction, "CodeKVRiderTooLarge": CodeKVRiderTooLarge,
	"CodeTimersBadRequest": CodeTimersBadRequest, "CodeTimerHorizonExceeded": CodeTimerHorizonExceeded,
}

// TestEveryErrorCodeIsInTheSpec keeps the codes the broker sends and the list
// openapi.yaml documents for Error.code (every backquoted snake_case word of
// its description) equal, both ways.
func TestEveryErrorCodeIsInTheSpec(t *testing.T) {
	declared := constNames(t, "errorcodes.go")
	for _, name := range declared {
		if _, ok := wireCodes[name]; !ok {
			t.Errorf("errorcodes.go declares %s, which wireCodes misses", name)
		}
	}
	if len(declared) != len(wireCodes) {
		t.Errorf("errorcodes.go declares %d constants, wireCodes lists %d", len(declared), len(wireCodes))
	}

	spec := loadSpec(t)
	description := spec.Components.Schemas["Error"].Value.Properties["code"].Value.Description
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z]+(?:_[a-z]+)*)`").FindAllStringSubmatch(description, -1) {
		documented[m[1]] = true
	}
	sent := map[string]bool{}
	for name, code := range wireCodes {
		sent[code] = true
		if !documented[code] {
			t.Errorf("%s = %q is not in openapi.yaml's Error.code list", name, code)
		}
	}
	for code := range documented {
		if !sent[code] {
			t.Errorf("openapi.yaml lists the code %q, which no constant in errorcodes.go holds", code)
		}
	}
}

// constNames returns the names of the constants file declares.
func constNames(t *testing.T, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			for _, id := range spec.(*ast.ValueSpec).Names {
				names = append(names, id.Name)
			}
		}
	}
	slices.Sort(names)
	if len(names) == 0 || !strings.HasPrefix(names[0], "Code") {
		t.Fatalf("no Code constants found in %s", file)
	}
	return names
}
