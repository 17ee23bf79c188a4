package main

import (
	"io"
	"os"
	"runtime/debug"
	"testing"

	"github.com/lanesmq/lanes/server/internal/config"
)

// docs/operations.md: the broker runs the GC at LANES_GC_PERCENT under
// LANES_MEMORY_LIMIT_MIB, and the standard GOGC and GOMEMLIMIT variables
// override both.
func TestTuneGCAppliesTheSettingsUnlessGOGCOrGOMEMLIMITIsSet(t *testing.T) {
	gcBefore, limitBefore := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(gcBefore); debug.SetMemoryLimit(limitBefore) })
	for _, name := range []string{"GOGC", "GOMEMLIMIT"} {
		if v, set := os.LookupEnv(name); set {
			t.Cleanup(func() { _ = os.Setenv(name, v) })
			_ = os.Unsetenv(name)
		}
	}
	load := func(vars map[string]string) *config.Config {
		cfg, err := config.Load(nil, func(k string) string { return vars[k] }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cases := []struct {
		what      string
		vars      map[string]string
		goEnv     map[string]string
		wantGC    int
		wantLimit int64
	}{
		{"defaults", nil, nil, 300, 64 << 20},
		{"GC off, no limit", map[string]string{"LANES_GC_PERCENT": "-1", "LANES_MEMORY_LIMIT_MIB": "0"}, nil, -1, 1<<63 - 1},
		{"GOGC and GOMEMLIMIT set", map[string]string{"LANES_GC_PERCENT": "50", "LANES_MEMORY_LIMIT_MIB": "128"},
			map[string]string{"GOGC": "100", "GOMEMLIMIT": "1GiB"}, 100, 1<<63 - 1},
	}
	for _, c := range cases {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(1<<63 - 1)
		for name, v := range c.goEnv {
			t.Setenv(name, v)
		}
		tuneGC(load(c.vars))
		for name := range c.goEnv {
			_ = os.Unsetenv(name)
		}
		if gc := debug.SetGCPercent(100); gc != c.wantGC {
			t.Errorf("%s: GC percent %d, want %d", c.what, gc, c.wantGC)
		}
		if limit := debug.SetMemoryLimit(-1); limit != c.wantLimit {
			t.Errorf("%s: memory limit %d, want %d", c.what, limit, c.wantLimit)
		}
	}
}
