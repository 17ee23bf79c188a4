package main

import "testing"

func TestNullOperatorNeedsTheKeyWhilePlainNullAcceptsItsAbsence(t *testing.T) {
	m := matcher{results: map[string]any{}}
	isNull := map[string]any{"autopilot": map[string]any{"$null": true}}
	plainNull := map[string]any{"autopilot": nil}
	for _, tc := range []struct {
		name     string
		exp, act map[string]any
		wantFail bool
	}{
		{"$null, key null", isNull, map[string]any{"autopilot": nil}, false},
		{"$null, key missing", isNull, map[string]any{}, true},
		{"$null, key set", isNull, map[string]any{"autopilot": map[string]any{"batch": 1.0}}, true},
		{"plain null, key missing", plainNull, map[string]any{}, false},
	} {
		if got := m.match("s1", tc.exp, tc.act); (len(got) > 0) != tc.wantFail {
			t.Errorf("%s: problems %q, want failure %v", tc.name, got, tc.wantFail)
		}
	}
}
