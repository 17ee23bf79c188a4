// Package config reads the broker's settings from flags and LANES_* environment
// variables (a flag wins over its variable). `lanes --help` lists every setting.
package config

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is every setting of the broker.
type Config struct {
	DatabaseURL             string
	BindAddr                string
	Port                    int
	PoolSize                int
	MaxBodyBytes            int64
	PushCommitters          int
	DefaultSubscriptionMode string
	PopAutopilot            string
	ShutdownTimeout         time.Duration
	LogLevel                string
	LogFormat               string
	ApplySchema             bool
	RetentionInterval       time.Duration
	SpoolDir                string
	TimersInterval          time.Duration
	KVSweepInterval         time.Duration
}

// DefaultDatabaseURL is the local cluster `scripts/pg.sh start` runs.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:54329/lanes?sslmode=disable"

type setting struct {
	flag, env, def, usage string
	set                   func(c *Config, v string) error
}

func intSetting(dst func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("not an integer: %q", v)
		}
		*dst(c) = n
		return nil
	}
}

func millisSetting(dst func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("not a non-negative integer of milliseconds: %q", v)
		}
		*dst(c) = time.Duration(n) * time.Millisecond
		return nil
	}
}

var settings = []setting{
	{"database-url", "LANES_DATABASE_URL", DefaultDatabaseURL, "PostgreSQL connection URL", func(c *Config, v string) error { c.DatabaseURL = v; return nil }},
	{"bind-addr", "LANES_BIND_ADDR", "0.0.0.0", "address to listen on", func(c *Config, v string) error { c.BindAddr = v; return nil }},
	{"port", "LANES_PORT", "6632", "HTTP port", intSetting(func(c *Config) *int { return &c.Port })},
	{"pool-size", "LANES_DB_POOL_SIZE", "20", "maximum PostgreSQL connections", intSetting(func(c *Config) *int { return &c.PoolSize })},
	{"max-body-bytes", "LANES_MAX_BODY_BYTES", "67108864", "largest accepted request body; larger answers 413", func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("not a positive integer: %q", v)
		}
		c.MaxBodyBytes = n
		return nil
	}},
	{"push-committers", "LANES_PUSH_COMMITTERS", "4", "concurrent group-commit transactions for pushes", intSetting(func(c *Config) *int { return &c.PushCommitters })},
	{"default-subscription-mode", "LANES_DEFAULT_SUBSCRIPTION_MODE", "new", "where a named group starts on first contact: new or all", func(c *Config, v string) error {
		if v != "new" && v != "all" {
			return fmt.Errorf("must be new or all: %q", v)
		}
		c.DefaultSubscriptionMode = v
		return nil
	}},
	{"pop-autopilot", "LANES_POP_AUTOPILOT", "on", "pop autopilot: on, shadow or off", func(c *Config, v string) error {
		if v != "on" && v != "shadow" && v != "off" {
			return fmt.Errorf("must be on, shadow or off: %q", v)
		}
		c.PopAutopilot = v
		return nil
	}},
	{"shutdown-timeout-ms", "LANES_SHUTDOWN_TIMEOUT_MS", "30000", "how long SIGTERM waits for in-flight requests", millisSetting(func(c *Config) *time.Duration { return &c.ShutdownTimeout })},
	{"log-level", "LANES_LOG_LEVEL", "info", "debug, info, warn or error", func(c *Config, v string) error { c.LogLevel = v; return nil }},
	{"log-format", "LANES_LOG_FORMAT", "text", "text or json", func(c *Config, v string) error { c.LogFormat = v; return nil }},
	{"apply-schema", "LANES_APPLY_SCHEMA", "true", "apply the embedded schema at boot", func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		c.ApplySchema = b
		return err
	}},
	{"retention-interval-ms", "LANES_RETENTION_INTERVAL_MS", "5000", "period of the retention sweep", millisSetting(func(c *Config) *time.Duration { return &c.RetentionInterval })},
	{"timers-interval-ms", "LANES_TIMERS_INTERVAL_MS", "250", "how often due timers are fired; 0 = this broker fires none", millisSetting(func(c *Config) *time.Duration { return &c.TimersInterval })},
	{"kv-sweep-interval-ms", "LANES_KV_SWEEP_INTERVAL_MS", "10000", "how often expired KV keys are deleted; 0 = never", millisSetting(func(c *Config) *time.Duration { return &c.KVSweepInterval })},
	{"spool-dir", "LANES_SPOOL_DIR", defaultSpoolDir(), "directory of the disk spool used while PostgreSQL is unreachable", func(c *Config, v string) error { c.SpoolDir = v; return nil }},
}

func defaultSpoolDir() string {
	return os.TempDir() + "/lanes-spool"
}

// Load parses args (without the program name) over the environment.
func Load(args []string, getenv func(string) string, stderr io.Writer) (*Config, error) {
	c := &Config{}
	fs := flag.NewFlagSet("lanes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	values := make([]*string, len(settings))
	for i, s := range settings {
		def := s.def
		if v := getenv(s.env); v != "" {
			def = v
		}
		values[i] = fs.String(s.flag, def, s.usage)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "lanes: a partitioned message queue on PostgreSQL\n\nUsage: lanes [flags]\n\nEvery flag can be set by its environment variable; a flag wins.\n\n")
		for _, s := range settings {
			fmt.Fprintf(stderr, "  --%-28s %-34s %s (default %q)\n", s.flag, s.env, s.usage, s.def)
		}
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for i, s := range settings {
		if err := s.set(c, strings.TrimSpace(*values[i])); err != nil {
			return nil, fmt.Errorf("%s (--%s): %w", s.env, s.flag, err)
		}
	}
	return c, nil
}
