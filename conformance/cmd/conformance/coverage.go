package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// notThroughSDKs are the operations of openapi.yaml that no SDK exposes, on purpose, with the
// reason; the coverage check asks no case for them (docs/conformance.md "Coverage").
var notThroughSDKs = map[string]string{
	"getLiveness":          "GET /status is the bare liveness probe for orchestrators (a kubelet httpGet); applications read GET /health through health()",
	"getPrometheusMetrics": "the Prometheus text is for a scraper; the SDKs read the JSON snapshot (GET /metrics). The server's own tests cover the text",
}

// operationIDs lists every operationId of the spec, sorted.
func operationIDs(doc *openapi3.T) []string {
	var out []string
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.OperationID != "" {
				out = append(out, op.OperationID)
			}
		}
	}
	sort.Strings(out)
	return out
}

// reportCoverage prints which operations the cases reached through each SDK (any answer counts,
// errors included) and returns how many operations no case reached through any SDK. Every case
// runs in every SDK, so an operation one SDK reaches is tested through all three SDKs' calls;
// an SDK that serves the call through a sibling route (TypeScript KV get/put/delete through
// POST /api/v1/kv) is listed for information. Only a run that judges coverage (coverageJudged)
// returns the count; any other prints the figures and returns 0.
func reportCoverage(ops []string, chosen []sdk, results map[string]map[string]*outcome, judged bool) int {
	want := 0
	for _, op := range ops {
		if _, skip := notThroughSDKs[op]; !skip {
			want++
		}
	}
	reached := map[string]map[string]bool{} // SDK → operations its requests reached
	byAny := map[string]bool{}
	var counts []string
	for _, s := range chosen {
		reached[s.Name] = map[string]bool{}
		for _, r := range results[s.Name] {
			for _, op := range r.Ops {
				reached[s.Name][op] = true
			}
		}
		n := 0
		for _, op := range ops {
			if _, skip := notThroughSDKs[op]; !skip && reached[s.Name][op] {
				n++
				byAny[op] = true
			}
		}
		counts = append(counts, fmt.Sprintf("%s %d", s.Name, n))
	}
	fmt.Printf("\noperations of openapi.yaml reached by the cases: %d of %d through any SDK (%s); %d not exposed by the SDKs: %s\n",
		len(byAny), want, strings.Join(counts, ", "), len(ops)-want, strings.Join(sortedKeys(notThroughSDKs), ", "))
	missing := 0
	for _, op := range ops {
		if _, skip := notThroughSDKs[op]; skip {
			continue
		}
		if !byAny[op] {
			fmt.Printf("    reached by no case: %s\n", op)
			missing++
			continue
		}
		var others []string
		for _, s := range chosen {
			if !reached[s.Name][op] {
				others = append(others, s.Name)
			}
		}
		if len(others) > 0 {
			fmt.Printf("    %s: not requested by %s (it runs the same steps through another route)\n", op, strings.Join(others, ", "))
		}
	}
	if !judged {
		if missing > 0 {
			fmt.Println("    (not failed: only a run of every case through every SDK judges coverage)")
		}
		return 0
	}
	return missing
}

// coverageJudged reports whether a run can judge coverage: only every case through every SDK
// can, since a run of some cases misses operations by design, and one SDK may serve a step
// through a sibling route that only another SDK's call reaches (TypeScript KV get through
// POST /api/v1/kv leaves kvGet to Go and Python).
func coverageJudged(filter string, chosen []sdk) bool {
	if filter != "" {
		return false
	}
	ran := map[string]bool{}
	for _, s := range chosen {
		ran[s.Name] = true
	}
	for _, s := range sdks {
		if !ran[s.Name] {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
