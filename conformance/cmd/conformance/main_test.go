package main

import (
	"strings"
	"testing"
)

func TestAStepFailsOnAFailureItsExpectationDoesNotName(t *testing.T) {
	stopErr := map[string]any{"kind": "other", "message": "stop: context deadline exceeded"}
	for _, tc := range []struct {
		name   string
		op     string
		expect any
		result map[string]any
		want   []string // substrings of the problems, in order
	}{
		{"a clean consume", "consume", map[string]any{"handled": []any{1}}, map[string]any{"handled": []any{1}, "timedOut": false}, nil},
		{"a consume cut at maxMs", "consume", map[string]any{"handled": []any{1}}, map[string]any{"timedOut": true}, []string{"unexpected timedOut true"}},
		{"a stop that failed", "consume", nil, map[string]any{"stopError": stopErr}, []string{"unexpected stopError"}},
		{"both, and a terminal error", "consume", nil, map[string]any{"error": stopErr, "timedOut": true, "stopError": stopErr}, []string{"unexpected error", "unexpected timedOut", "unexpected stopError"}},
		{"a timeout the case expects", "consume", map[string]any{"timedOut": true}, map[string]any{"timedOut": true}, nil},
		{"a stop error the case expects", "consume", map[string]any{"stopError": map[string]any{"kind": "other"}}, map[string]any{"stopError": stopErr}, nil},
		{"an iteration cut at maxMs", "iterate", map[string]any{"handled": []any{1}}, map[string]any{"timedOut": true}, []string{"unexpected timedOut true"}},
		{"another op's error", "push", map[string]any{"items": []any{}}, map[string]any{"error": stopErr}, []string{"unexpected error"}},
		{"another op reporting timedOut is not judged on it", "pop", nil, map[string]any{"timedOut": true}, nil},
		{"a walk that yielded after its error", "dlqAll", map[string]any{"error": map[string]any{"kind": "api"}},
			map[string]any{"error": stopErr, "afterError": []any{map[string]any{"row": 1}}}, []string{"unexpected afterError"}},
		{"a resumed walk's error and what followed it", "walkResume", nil,
			map[string]any{"error": stopErr, "afterError": []any{map[string]any{"error": stopErr}}}, []string{"unexpected error", "unexpected afterError"}},
	} {
		got := unexpectedFailures("s1", tc.op, tc.expect, tc.result)
		if len(got) != len(tc.want) {
			t.Errorf("%s: problems %q, want %d matching %q", tc.name, got, len(tc.want), tc.want)
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: problem %d is %q, want it to contain %q", tc.name, i, got[i], w)
			}
		}
	}
}
