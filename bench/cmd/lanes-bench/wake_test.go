package main

import "testing"

// A woken pop must carry the round's own message: an older one would time a
// wake-up that never happened.
func TestWokeWithAcceptsOnlyTheRoundsMessage(t *testing.T) {
	if err := wokeWith(popResponse{Messages: popped("w7")}, "w7"); err != nil {
		t.Fatal(err)
	}
	for name, pop := range map[string]popResponse{
		"another message": {Messages: popped("w5")},
		"two messages":    {Messages: popped("w7", "w8")},
		"nothing":         {},
	} {
		if err := wokeWith(pop, "w7"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
