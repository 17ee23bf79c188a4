package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// brokerNeeds are what a case may require of the broker (its needs:), each with what it
// means. The broker the runner starts meets every one (startBroker); a -url broker meets
// those -broker-meets names, and a case needing any other is skipped there, with the
// reason, rather than failing now and then.
var brokerNeeds = map[string]string{
	"noKVSweeper": "a broker that never deletes expired KV keys (LANES_KV_SWEEP_INTERVAL_MS=0), so an expired key is still listed",
}

// parseBrokerMeets reads -broker-meets: comma-separated names of brokerNeeds.
func parseBrokerMeets(list string) (map[string]bool, error) {
	meets := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if _, ok := brokerNeeds[n]; !ok {
			return nil, fmt.Errorf("-broker-meets: unknown need %q (known: %s)", n, strings.Join(slices.Sorted(maps.Keys(brokerNeeds)), ", "))
		}
		meets[n] = true
	}
	return meets, nil
}

// runnable splits cases into those the broker can run and those it skips, with the reason:
// the runner's own broker meets every need, a -url broker those in meets.
func runnable(cases []testCase, ownBroker bool, meets map[string]bool) (run []testCase, skipped map[string]string) {
	skipped = map[string]string{}
	for _, c := range cases {
		var unmet []string
		for _, n := range c.Spec.Needs {
			if !ownBroker && !meets[n] {
				unmet = append(unmet, brokerNeeds[n])
			}
		}
		if len(unmet) == 0 {
			run = append(run, c)
			continue
		}
		skipped[c.ID] = "needs " + strings.Join(unmet, "; ") +
			": the runner's own broker is one; a -url broker is one when -broker-meets names it"
	}
	return run, skipped
}
