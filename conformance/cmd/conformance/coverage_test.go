package main

import "testing"

func TestCoverageIsJudgedOnlyForEveryCaseThroughEverySDK(t *testing.T) {
	only := func(names ...string) []sdk {
		var out []sdk
		for _, n := range names {
			out = append(out, sdk{Name: n})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		filter string
		chosen []sdk
		want   bool
	}{
		{"every case, every SDK", "", only("go", "js", "python", "python-async"), true},
		{"every SDK in another order", "", only("python-async", "python", "go", "js"), true},
		{"some cases", "kv/*", only("go", "js", "python", "python-async"), false},
		{"one SDK", "", only("js"), false},
		{"two SDKs", "", only("go", "python"), false},
		{"every SDK but Python's asyncio client", "", only("go", "js", "python"), false},
	} {
		if got := coverageJudged(tc.filter, tc.chosen); got != tc.want {
			t.Errorf("%s: coverageJudged = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAnOperationNoSDKOfAPartialRunReachedDoesNotFailIt(t *testing.T) {
	results := map[string]map[string]*outcome{"js": {"kv/put-get": {Ops: []string{"kvBatch"}}}}
	ops := []string{"kvBatch", "kvGet"}
	if got := reportCoverage(ops, []sdk{{Name: "js"}}, results, false); got != 0 {
		t.Errorf("a run not judging coverage returned %d uncovered, want 0", got)
	}
	if got := reportCoverage(ops, []sdk{{Name: "js"}}, results, true); got != 1 {
		t.Errorf("a judging run returned %d uncovered, want 1 (kvGet)", got)
	}
}
