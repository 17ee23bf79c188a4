package config

import (
	"io"
	"strings"
	"testing"
)

// TestOutOfRangeSettingsAreRefusedNamingTheVariable: a number the broker
// would silently clamp, wrap or misread stops it with an error naming the
// variable, as a non-number does.
func TestOutOfRangeSettingsAreRefusedNamingTheVariable(t *testing.T) {
	refused := []struct{ env, value string }{
		{"LANES_PORT", "0"},
		{"LANES_PORT", "-1"},
		{"LANES_PORT", "65536"},
		{"LANES_DB_POOL_SIZE", "0"},
		{"LANES_DB_POOL_SIZE", "-5"},
		{"LANES_DB_POOL_SIZE", "4294967297"},
		{"LANES_ADMISSION_PUSH_INFLIGHT", "0"},
		{"LANES_ADMISSION_PUSH_INFLIGHT", "-1"},
		{"LANES_ADMISSION_POP_INFLIGHT", "-1"},
		{"LANES_ADMISSION_ACK_INFLIGHT", "-1"},
		{"LANES_ADMISSION_MAX_WAITING", "-1"},
		{"LANES_ADMISSION_MAX_WAIT_MS", "0"},
		{"LANES_PUSH_COMMITTERS", "0"},
		{"LANES_PUSH_COMMITTERS", "-1"},
		{"LANES_RATE_LIMIT_PER_CLIENT", "NaN"},
		{"LANES_RATE_LIMIT_PER_CLIENT", "Inf"},
		{"LANES_RATE_LIMIT_PER_CLIENT", "1e300"},
		{"LANES_RATE_LIMIT_PER_CLIENT", "-0.5"},
		{"LANES_RATE_LIMIT_PER_CLIENT", "1e-12"},
		{"LANES_RATE_LIMIT_PER_CLIENT", "0.0009"},
		{"LANES_PARKED_RECHECK_RATE", "1e-12"},
		{"LANES_PARKED_RECHECK_RATE", "-1"},
		{"LANES_RATE_LIMIT_BURST", "-1"},
		{"LANES_RETENTION_INTERVAL_MS", "0"},
		{"LANES_PUSH_TIMEOUT_MS", "0"},
		{"LANES_SCHEMA_RETRY_MAX_MS", "100"},
		{"LANES_SHUTDOWN_TIMEOUT_MS", "99999999999999"},
		{"LANES_JWT_LEEWAY_SECONDS", "9999999999999"},
		{"LANES_MEMORY_LIMIT_MIB", "9000000000000"},
		{"LANES_GC_PERCENT", "-2"},
		{"LANES_GC_PERCENT", "0"},
		{"LANES_GC_PERCENT", "2147483648"},
		{"LANES_GC_PERCENT", "4294967297"},
		{"LANES_MAX_POP_BATCH", "10001"},
		{"LANES_DATABASE_URL", " "},
		{"LANES_BIND_ADDR", "not an address"},
		{"LANES_BIND_ADDR", "-bad-.example"},
		{"LANES_BIND_ADDR", "999.1.1.1"},
		{"LANES_PPROF_ADDR", "notanaddr"},
		{"LANES_PPROF_ADDR", "127.0.0.1:99999"},
		{"LANES_PPROF_ADDR", "127.0.0.1:http"},
		{"LANES_PPROF_ADDR", "bad host:6060"},
	}
	for _, tc := range refused {
		_, err := Load(nil, env(map[string]string{tc.env: tc.value}), io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), tc.env+" ") {
			t.Errorf("%s=%s: want a refusal naming the variable, got %v", tc.env, tc.value, err)
		}
	}
	accepted := []struct{ env, value string }{
		{"LANES_PORT", "1"},
		{"LANES_PORT", "65535"},
		{"LANES_DB_POOL_SIZE", "10000"},
		{"LANES_ADMISSION_POP_INFLIGHT", "0"},
		{"LANES_ADMISSION_MAX_WAITING", "0"},
		{"LANES_RATE_LIMIT_PER_CLIENT", "1e6"},
		{"LANES_RATE_LIMIT_PER_CLIENT", "0.5"},
		{"LANES_RATE_LIMIT_PER_CLIENT", "0"},
		{"LANES_RATE_LIMIT_PER_CLIENT", "0.001"},
		{"LANES_PARKED_RECHECK_RATE", "0"},
		{"LANES_PARKED_RECHECK_RATE", "0.001"},
		{"LANES_RATE_LIMIT_BURST", "0"},
		{"LANES_RETENTION_INTERVAL_MS", "1"},
		{"LANES_TIMERS_INTERVAL_MS", "0"},
		{"LANES_GC_PERCENT", "-1"},
		{"LANES_GC_PERCENT", "1"},
		{"LANES_GC_PERCENT", "2147483647"},
		{"LANES_DATABASE_URL", "host=db dbname=lanes"},
		{"LANES_BIND_ADDR", "::"},
		{"LANES_BIND_ADDR", "127.0.0.1"},
		{"LANES_BIND_ADDR", "broker-0.lanes.svc"},
		{"LANES_BIND_ADDR", "localhost"},
		{"LANES_PPROF_ADDR", "127.0.0.1:6060"},
		{"LANES_PPROF_ADDR", ":6060"},
		{"LANES_PPROF_ADDR", "[::1]:0"},
		{"LANES_PPROF_ADDR", "localhost:6060"},
	}
	for _, tc := range accepted {
		if _, err := Load(nil, env(map[string]string{tc.env: tc.value}), io.Discard); err != nil {
			t.Errorf("%s=%s: want it accepted, got %v", tc.env, tc.value, err)
		}
	}
}

// TestANonNumberIsRefusedInWordsThatRead: the message names the unit and the
// bound as the settings table does ("an integer ≥ 1", "bytes ≥ 0"), not "in ≥ 1".
func TestANonNumberIsRefusedInWordsThatRead(t *testing.T) {
	cases := []struct{ env, value, want string }{
		{"LANES_MAX_BODY_BYTES", "64MiB", `LANES_MAX_BODY_BYTES (--max-body-bytes): not a whole number of bytes ≥ 1: "64MiB"`},
		{"LANES_MAX_PUSH_ITEMS", "many", `LANES_MAX_PUSH_ITEMS (--max-push-items): not an integer ≥ 1: "many"`},
		{"LANES_DB_POOL_SIZE", "abc", `LANES_DB_POOL_SIZE (--pool-size): not an integer in 1..10000: "abc"`},
	}
	for _, tc := range cases {
		_, err := Load(nil, env(map[string]string{tc.env: tc.value}), io.Discard)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s=%s: got %v, want %s", tc.env, tc.value, err, tc.want)
		}
	}
}
