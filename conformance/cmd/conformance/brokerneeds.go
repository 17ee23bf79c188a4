package main

import "strings"

// brokerNeeds are what a case may require of the broker (its needs:), each with what it
// means. The broker the runner starts meets every one (startBroker); a -url broker is not
// known to, so a case needing any is skipped there, with the reason, rather than failing
// now and then.
var brokerNeeds = map[string]string{
	"noKVSweeper": "a broker that never deletes expired KV keys (LANES_KV_SWEEP_INTERVAL_MS=0), so an expired key is still listed",
}

// runnable splits cases into those the broker can run and those it skips, with the reason,
// by whether the broker is the runner's own (which meets every need).
func runnable(cases []testCase, ownBroker bool) (run []testCase, skipped map[string]string) {
	skipped = map[string]string{}
	for _, c := range cases {
		if ownBroker || len(c.Spec.Needs) == 0 {
			run = append(run, c)
			continue
		}
		reasons := make([]string, len(c.Spec.Needs))
		for i, n := range c.Spec.Needs {
			reasons[i] = brokerNeeds[n]
		}
		skipped[c.ID] = "needs " + strings.Join(reasons, "; ") + ": the runner's own broker is one, a -url broker is not known to be"
	}
	return run, skipped
}
