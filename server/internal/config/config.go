// Package config reads the broker's settings from flags and LANES_* environment
// variables (a flag wins over its variable). `lanes --help` lists every setting.
package config

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/lanesmq/lanes/server/internal/auth"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// Config is every setting of the broker.
type Config struct {
	Resilience

	DatabaseURL             string
	BindAddr                string
	Port                    int
	PoolSize                int
	MaxBodyBytes            int64
	MaxInflightBodyBytes    int64
	PopMaxBytes             int64
	ListMaxBytes            int64
	PushCommitters          int
	AckSyncCommit           bool
	DefaultSubscriptionMode string
	PopAutopilot            string
	ShutdownTimeout         time.Duration
	LogLevel                string
	LogFormat               string
	ApplySchema             bool
	RetentionInterval       time.Duration
	SpoolDir                string
	SpoolMaxBytes           int64
	SpoolReplayTimeout      time.Duration
	TimersInterval          time.Duration
	KVSweepInterval         time.Duration
	ListenerCheckInterval   time.Duration
	PprofAddr               string
	TestFaults              bool
	GCPercent               int
	MemoryLimitMiB          int

	// values holds every setting's text as loaded, by variable name (see LogAttrs).
	values map[string]string
}

// Resilience holds the admission, limit and authentication settings.
type Resilience struct {
	// Admission control and limits (see internal/admission).
	AdmissionPushInFlight int
	AdmissionPopInFlight  int
	AdmissionAckInFlight  int
	AdmissionMaxWaiting   int
	AdmissionMaxWait      time.Duration
	RateLimitPerClient    float64
	ParkedRecheckRate     float64
	RateLimitBurst        int
	PushTimeout           time.Duration
	BodyReadTimeout       time.Duration
	// Limits and database deadlines (see api.Limits).
	MaxPushItems       int
	MaxAckItems        int
	MaxTxnOperations   int
	MaxPopBatch        int
	StatementTimeout   time.Duration
	RequestDBTimeout   time.Duration
	SchemaRetryMax     time.Duration
	LagRefreshInterval time.Duration
	LagMaxSeries       int
	// JWT authentication (see internal/auth).
	JWTEnabled   bool
	JWTAlgorithm string
	JWTSecret    string
	JWTPublicKey string
	JWTIssuer    string
	JWTAudience  string
	// JWTLeeway is the clock skew tolerated on a token's exp, nbf and iat.
	JWTLeeway time.Duration
	// JWTRequireExp refuses tokens without an exp claim (valid for ever otherwise).
	JWTRequireExp bool
	// JWKS: the key sets' URLs, how often each is fetched again, the least
	// time between fetches of one set for an unknown kid, and one fetch's deadline.
	JWTJWKSURLs              []string
	JWTJWKSRefresh           time.Duration
	JWTJWKSUnknownKIDRefresh time.Duration
	JWTJWKSTimeout           time.Duration
	// JWTRoleClaims are the claims roles are read from; JWTRoleNames the name
	// tokens carry for each role, by role.
	JWTRoleClaims []string
	JWTRoleNames  map[string]string
	// JWTSkipPaths need no token (besides /health and the metrics).
	JWTSkipPaths []string
}

// DefaultDatabaseURL is the local cluster `scripts/pg.sh start` runs.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:54329/lanes?sslmode=disable"

type setting struct {
	flag, env, def, usage string
	set                   parser
}

// parser turns a setting's text into its Config field; accepts says what it
// takes (for --help and the settings table in docs/operations.md).
type parser struct {
	accepts string
	parse   func(c *Config, v string) error
	// typed is the value the JSON boot log writes for a text parse accepted
	// (a number or a boolean); nil writes the text.
	typed func(v string) any
}

// typedInt is a whole-number setting's value: a count, bytes, or a duration
// in the unit its name ends in (-ms, -seconds).
func typedInt(v string) any {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return v
	}
	return n
}

func typedFloat(v string) any {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return v
	}
	return f
}

func typedBool(v string) any {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return v
	}
	return b
}

// unbounded is the upper bound of an integer setting without one.
const unbounded = math.MaxInt64

// maxDurationMillis bounds every duration setting (one day) so none overflows
// time.Duration or hides a typo of a few zeros.
const maxDurationMillis = 24 * 60 * 60 * 1000

// rangeText describes lo..hi, or "≥ lo" without an upper bound.
func rangeText(lo, hi int64) string {
	if hi == unbounded {
		return fmt.Sprintf("≥ %d", lo)
	}
	return fmt.Sprintf("%d..%d", lo, hi)
}

// withinText is rangeText as the object of "an integer …": "in lo..hi" or "≥ lo".
func withinText(lo, hi int64) string {
	if hi == unbounded {
		return rangeText(lo, hi)
	}
	return "in " + rangeText(lo, hi)
}

// parseInt64In parses a whole number in lo..hi; what names the kind of number
// in the refusal ("an integer", "a whole number of bytes").
func parseInt64In(v, what string, lo, hi int64) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("not %s %s: %q", what, withinText(lo, hi), v)
	}
	return n, nil
}

func intSetting(dst func(*Config) *int, lo, hi int64) parser {
	return parser{accepts: "integer " + rangeText(lo, hi), typed: typedInt, parse: func(c *Config, v string) error {
		n, err := parseInt64In(v, "an integer", lo, hi)
		if err != nil {
			return err
		}
		*dst(c) = int(n)
		return nil
	}}
}

// gcPercentSetting takes GOGC's values but 0, which collects at nearly every
// allocation (an operator writing 0 for "default" or "off", as other settings
// read it, is told -1 is off), and none past the runtime's int32, which
// debug.SetGCPercent would wrap (2^32+1 became 1).
func gcPercentSetting(dst func(*Config) *int) parser {
	accepts := "-1 (off) or integer " + rangeText(1, math.MaxInt32)
	return parser{accepts: accepts, typed: typedInt, parse: func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n == 0 || n < -1 || n > math.MaxInt32 {
			return fmt.Errorf("not %s: %q", accepts, v)
		}
		*dst(c) = int(n)
		return nil
	}}
}

func int64Setting(dst func(*Config) *int64, lo, hi int64) parser {
	return parser{accepts: "bytes " + rangeText(lo, hi), typed: typedInt, parse: func(c *Config, v string) error {
		n, err := parseInt64In(v, "a whole number of bytes", lo, hi)
		if err != nil {
			return err
		}
		*dst(c) = n
		return nil
	}}
}

// durationSetting parses a whole number of unit in lo..hi units.
func durationSetting(dst func(*Config) *time.Duration, unit time.Duration, unitName string, lo, hi int64) parser {
	return parser{accepts: unitName + " " + rangeText(lo, hi), typed: typedInt, parse: func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("not a whole number of %s %s: %q", unitName, withinText(lo, hi), v)
		}
		*dst(c) = time.Duration(n) * unit
		return nil
	}}
}

func millisSetting(dst func(*Config) *time.Duration, lo int64) parser {
	return durationSetting(dst, time.Millisecond, "milliseconds", lo, maxDurationMillis)
}

func secondsSetting(dst func(*Config) *time.Duration) parser {
	return durationSetting(dst, time.Second, "seconds", 0, maxDurationMillis/1000)
}

// rateSetting parses a rate a second: 0 (off) or a finite number in
// least..hi. Below least, the time one token takes overflows time.Duration
// (about 1e-10 a second), which would turn the limit into no limit.
func rateSetting(dst func(*Config) *float64, least, hi float64) parser {
	bounds := strconv.FormatFloat(least, 'f', -1, 64) + ".." + strconv.FormatFloat(hi, 'f', -1, 64)
	return parser{accepts: "0 (off) or number " + bounds, typed: typedFloat, parse: func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || f != 0 && (f < least || f > hi) {
			return fmt.Errorf("not 0 or a number in %s: %q", bounds, v)
		}
		*dst(c) = f
		return nil
	}}
}

func boolSetting(dst func(*Config) *bool) parser {
	return parser{accepts: "true or false", typed: typedBool, parse: func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("must be true or false: %q", v)
		}
		*dst(c) = b
		return nil
	}}
}

// listSetting splits a comma-separated list, dropping blank entries.
func listSetting(dst func(*Config) *[]string, check func(entry string) error) parser {
	return parser{accepts: "comma-separated list", parse: func(c *Config, v string) error {
		var list []string
		for _, entry := range strings.Split(v, ",") {
			if entry = strings.TrimSpace(entry); entry == "" {
				continue
			}
			if check != nil {
				if err := check(entry); err != nil {
					return err
				}
			}
			list = append(list, entry)
		}
		*dst(c) = list
		return nil
	}}
}

// roleClaimsSetting takes a comma-separated list, or, for claim names that
// hold a comma (https://example.com/roles,v2), a JSON array of strings: a
// value starting with "[" is one, taken as written, and a malformed one
// stops the broker rather than being read as a claim name.
func roleClaimsSetting(dst func(*Config) *[]string) parser {
	commaList := listSetting(dst, auth.CheckRoleClaim)
	return parser{accepts: "comma-separated list, or a JSON array of strings", parse: func(c *Config, v string) error {
		if !strings.HasPrefix(v, "[") {
			return commaList.parse(c, v)
		}
		var entries []string
		if err := json.Unmarshal([]byte(v), &entries); err != nil {
			return fmt.Errorf("a value starting with [ must be a JSON array of strings: %w", err)
		}
		for _, entry := range entries {
			if err := auth.CheckRoleClaim(entry); err != nil {
				return err
			}
		}
		*dst(c) = entries
		return nil
	}}
}

// roleNameSetting stores the name tokens carry for role.
func roleNameSetting(role string) parser {
	return parser{accepts: "text", parse: func(c *Config, v string) error {
		if v == "" {
			return fmt.Errorf("the name of role %s in tokens cannot be empty", role)
		}
		if c.JWTRoleNames == nil {
			c.JWTRoleNames = map[string]string{}
		}
		c.JWTRoleNames[role] = v
		return nil
	}}
}

// roleNameSettings are the settings that name the roles in tokens, in the
// order a clash is reported.
var roleNameSettings = []struct{ env, role string }{
	{"LANES_JWT_ROLE_READ_ONLY", "read-only"}, {"LANES_JWT_ROLE_WRITE_ONLY", "write-only"},
	{"LANES_JWT_ROLE_READ_WRITE", "read-write"}, {"LANES_JWT_ROLE_ADMIN", "admin"},
}

// checkRoleNames refuses two roles given one name in tokens: a token
// carrying it could not say which role it grants.
func (c *Config) checkRoleNames() error {
	namedBy := map[string]string{}
	for _, s := range roleNameSettings {
		name := c.JWTRoleNames[s.role]
		if other, taken := namedBy[name]; taken {
			return fmt.Errorf("%s and %s are both %q: each role needs its own name in tokens", other, s.env, name)
		}
		namedBy[name] = s.env
	}
	return nil
}

// jwksURLsSetting takes absolute http or https URLs separated by commas or
// whitespace, or nothing. A URL cannot hold whitespace, and a comma in a JWKS
// URL (legal, but no provider's has one) is written %2C.
func jwksURLsSetting(dst func(*Config) *[]string) parser {
	return parser{accepts: "http(s) URLs, separated by commas or spaces", parse: func(c *Config, v string) error {
		urls := splitJWKSURLs(v)
		if err := auth.CheckJWKSURLs(urls); err != nil {
			return err
		}
		*dst(c) = urls
		return nil
	}}
}

func splitJWKSURLs(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
}

// skipPathEntry checks one entry of LANES_JWT_SKIP_PATHS.
func skipPathEntry(entry string) error {
	if !strings.HasPrefix(entry, "/") {
		return fmt.Errorf("a skip path must start with /: %q", entry)
	}
	return nil
}

// databaseURLSetting refuses a blank connection string: pgx would read it as
// libpq's defaults (the local socket, the OS user) and the broker would wait
// on a database nobody named.
func databaseURLSetting(dst func(*Config) *string) parser {
	return parser{accepts: "postgres:// URL or key=value connection string", parse: func(c *Config, v string) error {
		if v == "" {
			return fmt.Errorf("empty: name the database as a postgres:// URL or key=value connection string")
		}
		*dst(c) = v
		return nil
	}}
}

func stringSetting(dst func(*Config) *string) parser {
	return parser{accepts: "text", parse: func(c *Config, v string) error { *dst(c) = v; return nil }}
}

// oneOfSetting accepts one of choices in any letter case and stores it as
// written in choices, so a typo stops the broker instead of being ignored.
func oneOfSetting(dst func(*Config) *string, choices ...string) parser {
	listed := strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
	return parser{accepts: listed, parse: func(c *Config, v string) error {
		for _, choice := range choices {
			if strings.EqualFold(v, choice) {
				*dst(c) = choice
				return nil
			}
		}
		return fmt.Errorf("must be %s: %q", listed, v)
	}}
}

// bindAddrSetting takes an IP address or a host name, so a typo stops the
// broker before it does any database work.
func bindAddrSetting(dst func(*Config) *string) parser {
	return parser{accepts: "IP address or host name", parse: func(c *Config, v string) error {
		if net.ParseIP(v) == nil && !isHostName(v) {
			return fmt.Errorf("not an IP address or host name: %q", v)
		}
		*dst(c) = v
		return nil
	}}
}

func notHostNameChar(r rune) bool {
	return r != '-' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z')
}

// isHostName reports whether v is a syntactically valid DNS host name.
func isHostName(v string) bool {
	if v == "" || len(v) > 253 {
		return false
	}
	labels := strings.Split(v, ".")
	for _, label := range labels {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		if strings.IndexFunc(label, notHostNameChar) >= 0 {
			return false
		}
	}
	// No top-level domain is all digits (RFC 3696 §2), so 999.1.1.1 is a
	// mistyped IP address, not a name to look up.
	last := labels[len(labels)-1]
	return strings.IndexFunc(last, func(r rune) bool { return r < '0' || r > '9' }) >= 0
}

// hostPortSetting takes an optional host:port to listen on, as net.Listen
// does: the host may be empty (every interface), an IP address or a host name.
func hostPortSetting(dst func(*Config) *string) parser {
	return parser{accepts: "host:port, or empty", parse: func(c *Config, v string) error {
		if v != "" {
			host, port, err := net.SplitHostPort(v)
			if err != nil {
				return fmt.Errorf("not a host:port: %q", v)
			}
			if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
				return fmt.Errorf("port must be 0..65535: %q", v)
			}
			if host != "" && net.ParseIP(host) == nil && !isHostName(host) {
				return fmt.Errorf("not an IP address or host name: %q", host)
			}
		}
		*dst(c) = v
		return nil
	}}
}

var settings = []setting{
	{"database-url", "LANES_DATABASE_URL", DefaultDatabaseURL, "PostgreSQL connection URL", databaseURLSetting(func(c *Config) *string { return &c.DatabaseURL })},
	{"bind-addr", "LANES_BIND_ADDR", "0.0.0.0", "address to listen on", bindAddrSetting(func(c *Config) *string { return &c.BindAddr })},
	{"port", "LANES_PORT", "6632", "HTTP port", intSetting(func(c *Config) *int { return &c.Port }, 1, 65535)},
	{"pool-size", "LANES_DB_POOL_SIZE", "20", "maximum PostgreSQL connections of the pool; the broker holds 2 more of its own (LISTEN and the /health ping)", intSetting(func(c *Config) *int { return &c.PoolSize }, 1, 10000)},
	{"max-body-bytes", "LANES_MAX_BODY_BYTES", "67108864", "largest accepted request body; larger answers 413", int64Setting(func(c *Config) *int64 { return &c.MaxBodyBytes }, 1, unbounded)},
	{"max-inflight-body-bytes", "LANES_MAX_INFLIGHT_BODY_BYTES", "0", "request body bytes held at once, from arrival to answer; a body that finds no room waits up to LANES_ADMISSION_MAX_WAIT_MS, then 429 overloaded; at least LANES_MAX_BODY_BYTES; 0 = 2 × LANES_MAX_BODY_BYTES", int64Setting(func(c *Config) *int64 { return &c.MaxInflightBodyBytes }, 0, unbounded)},
	{"pop-max-bytes", "LANES_POP_MAX_BYTES", "16777216", "stored message bytes one pop answers with, counted by whole segments (a segment holds up to 32 KiB of messages, or one larger message): the pop takes no more once it reaches them and always delivers at least one message; its lease (an autoAck pop's cursor) covers only what it delivered; 0 = no bound", int64Setting(func(c *Config) *int64 { return &c.PopMaxBytes }, 0, unbounded)},
	{"admission-push-inflight", "LANES_ADMISSION_PUSH_INFLIGHT", "1000", "push, timer-schedule and KV-write requests handled at once; more queue", intSetting(func(c *Config) *int { return &c.AdmissionPushInFlight }, 1, unbounded)},
	{"admission-pop-inflight", "LANES_ADMISSION_POP_INFLIGHT", "0", "pop database checks at once (parked pops never count); 0 = the pool size", intSetting(func(c *Config) *int { return &c.AdmissionPopInFlight }, 0, unbounded)},
	{"admission-ack-inflight", "LANES_ADMISSION_ACK_INFLIGHT", "0", "ack/transaction/lease requests at once; 0 = the pool size", intSetting(func(c *Config) *int { return &c.AdmissionAckInFlight }, 0, unbounded)},
	{"admission-max-waiting", "LANES_ADMISSION_MAX_WAITING", "2000", "requests per class that may queue for a slot; past it 429", intSetting(func(c *Config) *int { return &c.AdmissionMaxWaiting }, 0, unbounded)},
	{"admission-max-wait-ms", "LANES_ADMISSION_MAX_WAIT_MS", "2000", "longest a request queues for a slot before 429", millisSetting(func(c *Config) *time.Duration { return &c.AdmissionMaxWait }, 1)},
	{"rate-limit-per-client", "LANES_RATE_LIMIT_PER_CLIENT", "0", "message-plane requests (pushes, pops, acks, leases, transactions, timer schedules, KV writes) per second per client (token sub or address); 0 = off", rateSetting(func(c *Config) *float64 { return &c.RateLimitPerClient }, 0.001, 1e6)},
	{"rate-limit-burst", "LANES_RATE_LIMIT_BURST", "0", "token bucket size per client; 0 = one second of the rate", intSetting(func(c *Config) *int { return &c.RateLimitBurst }, 0, unbounded)},
	{"parked-recheck-rate", "LANES_PARKED_RECHECK_RATE", "250", "database re-checks a second this broker's parked long polls share (a parked poll re-checks for what no push announces, such as an expired lease, once a second; polls of one group share theirs); with more groups parked than that, each re-checks every groups ÷ rate seconds; 0 = no bound", rateSetting(func(c *Config) *float64 { return &c.ParkedRecheckRate }, 0.001, 1e6)},
	{"push-timeout-ms", "LANES_PUSH_TIMEOUT_MS", "10000", "a push's database deadline; past it the push goes to the spool", millisSetting(func(c *Config) *time.Duration { return &c.PushTimeout }, 1)},
	{"body-read-timeout-ms", "LANES_BODY_READ_TIMEOUT_MS", "30000", "how long a request body may take to arrive; past it 408 and the connection closes (a stalled client holds no admission slot meanwhile); 0 = none", millisSetting(func(c *Config) *time.Duration { return &c.BodyReadTimeout }, 0)},
	{"max-push-items", "LANES_MAX_PUSH_ITEMS", "10000", "items one push request may carry; more answers 400", intSetting(func(c *Config) *int { return &c.MaxPushItems }, 1, unbounded)},
	{"max-ack-items", "LANES_MAX_ACK_ITEMS", "10000", "acknowledgments one ack batch may carry; more answers 400", intSetting(func(c *Config) *int { return &c.MaxAckItems }, 1, unbounded)},
	{"max-txn-operations", "LANES_MAX_TXN_OPERATIONS", "10000", "operations (push items, acks, kv and timer ops) one transaction may carry; more answers 400", intSetting(func(c *Config) *int { return &c.MaxTxnOperations }, 1, unbounded)},
	{"max-pop-batch", "LANES_MAX_POP_BATCH", "10000", "largest pop batch; more answers 400 (at most 10000, the spec's bound)", intSetting(func(c *Config) *int { return &c.MaxPopBatch }, 1, 10000)},
	{"list-max-bytes", "LANES_LIST_MAX_BYTES", "4194304", "payload bytes one page of a message, dead-letter or timer listing, or values of the KV console listing, answers, counted as sent (twice in a message listing, data and payload; as base64 in a timer listing); the page stops before the row that would pass it, after at least one, with truncated:true and where the rest starts; 0 = unbounded", int64Setting(func(c *Config) *int64 { return &c.ListMaxBytes }, 0, unbounded)},
	{"db-statement-timeout-ms", "LANES_DB_STATEMENT_TIMEOUT_MS", "30000", "statement_timeout of every broker connection (a pop's claim may take twice that, 60 s when none); 0 = none", millisSetting(func(c *Config) *time.Duration { return &c.StatementTimeout }, 0)},
	{"request-db-timeout-ms", "LANES_REQUEST_DB_TIMEOUT_MS", "30000", "deadline of a request's database work (a long poll gets its timeout on top); 0 = none", millisSetting(func(c *Config) *time.Duration { return &c.RequestDBTimeout }, 0)},
	{"schema-retry-max-ms", "LANES_SCHEMA_RETRY_MAX_MS", "5000", "longest pause between schema attempts while PostgreSQL is unreachable at boot (the broker serves meanwhile)", millisSetting(func(c *Config) *time.Duration { return &c.SchemaRetryMax }, 250)},
	{"listener-check-ms", "LANES_LISTENER_CHECK_MS", "5000", "how long the notification listener (the connection that hears pushes through other brokers, to wake this broker's long polls) goes without a word from PostgreSQL before it sends an empty query; the answer may take twice this (each unanswered one in a row doubles the next one's, up to 8 times this), and none counts as a lost connection: the broker reconnects it, forgets its cached pop plans and closes the pool's connections (a request running on one fails at once, as in an outage), so a database host that died without closing it (power loss, a network partition, a failover behind the same address) is noticed within three times this, not when TCP keepalive gives up", millisSetting(func(c *Config) *time.Duration { return &c.ListenerCheckInterval }, 100)},
	{"lag-refresh-ms", "LANES_LAG_REFRESH_MS", "15000", "how often the per-queue lag gauges are recomputed (at least 20 of the last refresh's durations apart); 0 = never", millisSetting(func(c *Config) *time.Duration { return &c.LagRefreshInterval }, 0)},
	{"lag-max-series", "LANES_LAG_MAX_SERIES", "1000", "most (queue, group) lag series exported, largest lag first", intSetting(func(c *Config) *int { return &c.LagMaxSeries }, 1, unbounded)},
	{"jwt-enabled", "LANES_JWT_ENABLED", "false", "require bearer JWTs (roles read-only, write-only, read-write, admin)", boolSetting(func(c *Config) *bool { return &c.JWTEnabled })},
	{"jwt-algorithm", "LANES_JWT_ALGORITHM", "auto", "accepted algorithm (HS256, RS256, EdDSA, …) or auto = all the keys allow", stringSetting(func(c *Config) *string { return &c.JWTAlgorithm })},
	{"jwt-secret", "LANES_JWT_SECRET", "", "HMAC secret for HS256/384/512", stringSetting(func(c *Config) *string { return &c.JWTSecret })},
	{"jwt-public-key", "LANES_JWT_PUBLIC_KEY", "", "PEM public key (RSA, ECDSA or Ed25519), inline or a file path", stringSetting(func(c *Config) *string { return &c.JWTPublicKey })},
	{"jwt-issuer", "LANES_JWT_ISSUER", "", "required iss claim; empty = not checked", stringSetting(func(c *Config) *string { return &c.JWTIssuer })},
	{"jwt-audience", "LANES_JWT_AUDIENCE", "", "required aud claim; empty = not checked", stringSetting(func(c *Config) *string { return &c.JWTAudience })},
	{"jwt-leeway-seconds", "LANES_JWT_LEEWAY_SECONDS", "5", "clock skew tolerated on a token's exp, nbf and iat, in whole seconds; 0 = none", secondsSetting(func(c *Config) *time.Duration { return &c.JWTLeeway })},
	{"jwt-require-exp", "LANES_JWT_REQUIRE_EXP", "true", "refuse a token without an exp claim (401 \"Token has no expiration time\"): it would be valid for ever; false accepts it, as the reference broker does", boolSetting(func(c *Config) *bool { return &c.JWTRequireExp })},
	{"jwt-jwks-url", "LANES_JWT_JWKS_URL", "", "JSON Web Key Set URLs, one or more separated by commas or spaces (a comma inside a URL is written %2C), whose keys, cached per kid, verify RS/PS/ES/EdDSA tokens that name a kid, looked up in every set (and those without one when no public key is set); the broker starts with an endpoint down; empty = none", jwksURLsSetting(func(c *Config) *[]string { return &c.JWTJWKSURLs })},
	{"jwt-jwks-refresh-ms", "LANES_JWT_JWKS_REFRESH_MS", "3600000", "how often each JWKS is fetched again: new keys are taken, dropped ones stop verifying; a failed fetch keeps the keys it had", millisSetting(func(c *Config) *time.Duration { return &c.JWTJWKSRefresh }, 1000)},
	{"jwt-jwks-unknown-kid-refresh-ms", "LANES_JWT_JWKS_UNKNOWN_KID_REFRESH_MS", "10000", "a token naming a kid no JWKS holds, or one no key of that kid verifies, fetches each set again, at most once per this interval per set; in between such tokens wait for a fetch under way, else answer 401 at once", millisSetting(func(c *Config) *time.Duration { return &c.JWTJWKSUnknownKIDRefresh }, 1000)},
	{"jwt-jwks-timeout-ms", "LANES_JWT_JWKS_TIMEOUT_MS", "5000", "deadline of one JWKS fetch, the one at startup too", millisSetting(func(c *Config) *time.Duration { return &c.JWTJWKSTimeout }, 1)},
	{"jwt-role-claims", "LANES_JWT_ROLE_CLAIMS", "role,roles", "claims a token's roles are read from, each one string or an array of strings; an entry starting with / is a JSON Pointer into the claims (/realm_access/roles), any other a top-level claim name as written; a value starting with [ is a JSON array of entries, for claim names that hold a comma", roleClaimsSetting(func(c *Config) *[]string { return &c.JWTRoleClaims })},
	{"jwt-role-read-only", "LANES_JWT_ROLE_READ_ONLY", "read-only", "name in tokens of the read-only role", roleNameSetting("read-only")},
	{"jwt-role-write-only", "LANES_JWT_ROLE_WRITE_ONLY", "write-only", "name in tokens of the write-only role", roleNameSetting("write-only")},
	{"jwt-role-read-write", "LANES_JWT_ROLE_READ_WRITE", "read-write", "name in tokens of the read-write role", roleNameSetting("read-write")},
	{"jwt-role-admin", "LANES_JWT_ROLE_ADMIN", "admin", "name in tokens of the admin role", roleNameSetting("admin")},
	{"jwt-skip-paths", "LANES_JWT_SKIP_PATHS", "/health,/metrics/prometheus,/metrics,/", "paths that need no token, besides /health, /metrics and /metrics/prometheus: exact, or every path under an entry ending in / (\"/\" itself is exact; \"/api/\" would open the whole API)", listSetting(func(c *Config) *[]string { return &c.JWTSkipPaths }, skipPathEntry)},
	{"push-committers", "LANES_PUSH_COMMITTERS", "1", "concurrent group-commit transactions for pushes: one gathers every push that arrives during a commit into the next (fewer, larger commits cost PostgreSQL less per message); lanes_push_commit_duration_seconds shows how busy they are", intSetting(func(c *Config) *int { return &c.PushCommitters }, 1, 10000)},
	{"ack-sync-commit", "LANES_ACK_SYNC_COMMIT", "false", "a plain ack waits for PostgreSQL's WAL flush before it answers; false: a database crash may undo the acks of its last fraction of a second, whose messages then redeliver (at-least-once), and a single lane turns over faster (transaction bundles, autoAck pops and dead-letter filings always wait)", boolSetting(func(c *Config) *bool { return &c.AckSyncCommit })},
	{"default-subscription-mode", "LANES_DEFAULT_SUBSCRIPTION_MODE", "new", "where a named group starts on first contact: new (also new-only, new_only, newonly) or all", parser{accepts: "new or all", parse: func(c *Config, v string) error {
		mode, ok := engine.NormalizeSubscriptionMode(v)
		if !ok {
			return fmt.Errorf("must be new or all: %q", v)
		}
		c.DefaultSubscriptionMode = mode
		return nil
	}}},
	{"pop-autopilot", "LANES_POP_AUTOPILOT", "on", "pop autopilot: on, shadow or off", oneOfSetting(func(c *Config) *string { return &c.PopAutopilot }, "on", "shadow", "off")},
	{"shutdown-timeout-ms", "LANES_SHUTDOWN_TIMEOUT_MS", "25000", "how long SIGTERM waits for in-flight requests; then (or at a second signal) their connections are cut and a pop gives its claim back within 5 s more: keep the orchestrator's grace period above timeout + 5 s", millisSetting(func(c *Config) *time.Duration { return &c.ShutdownTimeout }, 0)},
	{"log-level", "LANES_LOG_LEVEL", "info", "debug, info, warn or error (any case)", oneOfSetting(func(c *Config) *string { return &c.LogLevel }, "debug", "info", "warn", "error")},
	{"log-format", "LANES_LOG_FORMAT", "text", "text or json (any case)", oneOfSetting(func(c *Config) *string { return &c.LogFormat }, "text", "json")},
	{"apply-schema", "LANES_APPLY_SCHEMA", "true", "apply the embedded schema at boot", boolSetting(func(c *Config) *bool { return &c.ApplySchema })},
	{"retention-interval-ms", "LANES_RETENTION_INTERVAL_MS", "5000", "period of the retention sweep", millisSetting(func(c *Config) *time.Duration { return &c.RetentionInterval }, 1)},
	{"timers-interval-ms", "LANES_TIMERS_INTERVAL_MS", "250", "how often due timers are fired; 0 = this broker fires none", millisSetting(func(c *Config) *time.Duration { return &c.TimersInterval }, 0)},
	{"kv-sweep-interval-ms", "LANES_KV_SWEEP_INTERVAL_MS", "10000", "how often expired KV keys are deleted; 0 = never", millisSetting(func(c *Config) *time.Duration { return &c.KVSweepInterval }, 0)},
	{"gc-percent", "LANES_GC_PERCENT", "300", "Go GC target (GOGC) unless GOGC is set: fewer collections of the small live heap a broker keeps; the memory limit below bounds what that lets the heap grow to", gcPercentSetting(func(c *Config) *int { return &c.GCPercent })},
	{"memory-limit-mib", "LANES_MEMORY_LIMIT_MIB", "64", "soft memory limit of the Go runtime in MiB (GOMEMLIMIT) unless GOMEMLIMIT is set; past it the GC runs more often (at most half the CPU); 0 = none. Raise it for very large in-flight requests", intSetting(func(c *Config) *int { return &c.MemoryLimitMiB }, 0, 1<<30)},
	{"pprof-addr", "LANES_PPROF_ADDR", "", "serve net/http/pprof on this address (e.g. 127.0.0.1:6060); empty = off", hostPortSetting(func(c *Config) *string { return &c.PprofAddr })},
	{"test-faults", "LANES_TEST_FAULTS", "false", "TEST ONLY: serve /__test/faults so a conformance run can script responses; never in production", boolSetting(func(c *Config) *bool { return &c.TestFaults })},
	{"spool-dir", "LANES_SPOOL_DIR", "", "directory of the disk spool used while PostgreSQL is unreachable; one per broker (empty = <tmp>/lanes-spool-<port>)", stringSetting(func(c *Config) *string { return &c.SpoolDir })},
	{"spool-max-bytes", "LANES_SPOOL_MAX_BYTES", "1073741824", "bytes the disk spool may hold waiting to drain; past it a push that would be buffered answers failed; 0 = unbounded", int64Setting(func(c *Config) *int64 { return &c.SpoolMaxBytes }, 0, unbounded)},
	{"spool-replay-timeout-ms", "LANES_SPOOL_REPLAY_TIMEOUT_MS", "10000", "deadline of one spool drain batch; a batch past it halves and retries at once, a single item past it waits for the next drain attempt; 0 = none (statement_timeout still applies)", millisSetting(func(c *Config) *time.Duration { return &c.SpoolReplayTimeout }, 0)},
}

// UnknownVariables names the LANES_* variables of environ (as os.Environ
// gives it) that are no setting, sorted: the broker ignores them, so a
// misspelled one (LANES_POOL_SIZE) would leave its setting at the default.
func UnknownVariables(environ []string) []string {
	known := make(map[string]bool, len(settings))
	for _, s := range settings {
		known[s.env] = true
	}
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "LANES_") && !known[name] && !readByOthers(name) {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	return unknown
}

// notBrokerSettings are the LANES_* names (exact, or prefixes ending in _)
// the SDKs and this repository's tools read, often from the shell that also
// starts a broker: warning about them would teach operators to skip the
// warning.
var notBrokerSettings = []string{
	"LANES_URL", "LANES_TOKEN", "LANES_SDK_", "LANES_CLIENT_", // the SDKs
	"LANES_PG_", "LANES_TEST_", "LANES_FAULT_", "LANES_CONFORMANCE_", "LANES_BENCH_", "LANES_FUZZ_",
	"LANES_MEASURE", "LANES_SPEC", // scripts/, tests, the benchmark, the fuzzer, make generate
}

func readByOthers(name string) bool {
	for _, n := range notBrokerSettings {
		if name == n || strings.HasSuffix(n, "_") && strings.HasPrefix(name, n) {
			return true
		}
	}
	return false
}

// UnusedJWTSettings names the LANES_JWT_* settings given a value other than
// their default while LANES_JWT_ENABLED is off, which the broker then ignores:
// a secret or key set without enabling JWT leaves every route open.
func (c *Config) UnusedJWTSettings() []string {
	if c.JWTEnabled {
		return nil
	}
	var unused []string
	for _, s := range settings {
		if strings.HasPrefix(s.env, "LANES_JWT_") && s.env != "LANES_JWT_ENABLED" && c.values[s.env] != s.def {
			unused = append(unused, s.env)
		}
	}
	return unused
}

// defaultBodyBudgetBodies is how many bodies of the largest size the default
// body budget holds: 128 MiB with the default 64 MiB cap, so one body of the
// largest size never holds up all the others. A held push body costs about 7
// times its size in resident memory while it is handled (decoded copies, the
// rows, GC headroom): a flood of 4 MiB pushes peaked at 0.9 GB with 2 bodies'
// worth, 1.5 GB with 4, and 4 served no more pushes per second than 2.
const defaultBodyBudgetBodies = 2

// sizeBodyBudget fills in the default body budget and refuses one smaller
// than the largest body, which could then never be received.
func (c *Config) sizeBodyBudget() error {
	if c.MaxInflightBodyBytes == 0 {
		c.MaxInflightBodyBytes = c.MaxBodyBytes * defaultBodyBudgetBodies
		if c.MaxInflightBodyBytes/defaultBodyBudgetBodies != c.MaxBodyBytes {
			c.MaxInflightBodyBytes = math.MaxInt64
		}
	}
	if c.MaxInflightBodyBytes < c.MaxBodyBytes {
		return fmt.Errorf("LANES_MAX_INFLIGHT_BODY_BYTES (--max-inflight-body-bytes) is %d, below LANES_MAX_BODY_BYTES (%d): a body of the largest accepted size could never be received; raise it or set 0 for 2 × LANES_MAX_BODY_BYTES",
			c.MaxInflightBodyBytes, c.MaxBodyBytes)
	}
	return nil
}

func defaultSpoolDir() string {
	return os.TempDir() + "/lanes-spool"
}

// ErrVersion is Load's answer to --version: the caller prints the version and exits 0.
var ErrVersion = errors.New("version requested")

// Load parses args (without the program name) over the environment.

func Load(args []string, getenv func(string) string, stderr io.Writer) (*Config, error) {
	c := &Config{}
	fs := flag.NewFlagSet("lanes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	showVersion := fs.Bool("version", false, "print the version and exit")
	texts := make([]*string, len(settings))
	for i, s := range settings {
		def := s.def
		if v := getenv(s.env); v != "" {
			def = v
		}
		texts[i] = fs.String(s.flag, def, s.usage)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "lanes: a partitioned message queue on PostgreSQL\n\nUsage: lanes [flags]\n       lanes --version\n\nEvery flag can be set by its environment variable; a flag wins.\n\n")
		for _, s := range settings {
			fmt.Fprintf(stderr, "  --%-28s %-34s %s (%s; default %q)\n", s.flag, s.env, s.usage, s.set.accepts, s.def)
		}
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *showVersion {
		// Before the settings are checked: a broken environment still tells its version.
		return nil, ErrVersion
	}
	if fs.NArg() > 0 {
		// The flag package stops at the first non-flag: ignoring it would start a
		// broker on defaults for "lanes version" or "--port 7000 0".
		hint := "see lanes --help"
		if fs.Arg(0) == "version" {
			hint += "; the version is lanes --version"
		}
		return nil, fmt.Errorf("unexpected argument %q: lanes takes only flags (%s)", fs.Arg(0), hint)
	}
	c.values = make(map[string]string, len(settings))
	for i, s := range settings {
		v := strings.TrimSpace(*texts[i])
		if err := s.set.parse(c, v); err != nil {
			return nil, fmt.Errorf("%s (--%s): %w", s.env, s.flag, err)
		}
		c.values[s.env] = v
	}
	if c.TestFaults && c.JWTEnabled {
		// The fault scripts sit outside authentication: with both on, anyone
		// without a token could script the answers of authenticated routes.
		return nil, fmt.Errorf("LANES_TEST_FAULTS (--test-faults) and LANES_JWT_ENABLED (--jwt-enabled) cannot both be on: " +
			"the test-only fault scripts bypass authentication; turn LANES_TEST_FAULTS off")
	}
	if len(c.JWTRoleClaims) == 0 {
		return nil, fmt.Errorf("LANES_JWT_ROLE_CLAIMS (--jwt-role-claims) names no claim: no token could carry a role")
	}
	if err := c.checkRoleNames(); err != nil {
		return nil, err
	}
	if err := c.sizeBodyBudget(); err != nil {
		return nil, err
	}
	if c.SpoolDir == "" {
		// Two brokers on one host must not drain each other's spool.
		c.SpoolDir = fmt.Sprintf("%s-%d", defaultSpoolDir(), c.Port)
	}
	return c, nil
}
