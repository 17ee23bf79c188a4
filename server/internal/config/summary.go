package config

import (
	"encoding/json"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/lanesmq/lanes/server/internal/auth"
)

// secretSettings are logged as "set" or "" only.
var secretSettings = map[string]bool{"LANES_JWT_SECRET": true, "LANES_JWT_PUBLIC_KEY": true}

// keywordPassword finds the password of a key=value connection string: a
// quoted value runs to its first unescaped quote, an unquoted one to the
// first unescaped space, since libpq and pgx read \' and \\ in both.
var keywordPassword = regexp.MustCompile(`(?s)(password\s*=\s*)('(?:[^'\\]|\\.)*'?|(?:[^\s\\]|\\.)+)`)

// strandedPassword is a ":password@" left after the userinfo of a malformed URL.
var strandedPassword = regexp.MustCompile(`:[^@]*@`)

// passwordParams are the query parameters of a database URL that hold a
// secret: libpq and pgx take a password there as well as in the userinfo.
var passwordParams = map[string]bool{"password": true, "sslpassword": true}

// RedactedDatabaseURL is LANES_DATABASE_URL as the boot log shows it, its passwords hidden.
func (c *Config) RedactedDatabaseURL() string { return redactDatabaseURL(c.DatabaseURL) }

// redactDatabaseURL hides the passwords of a URL (userinfo and query string)
// or key=value connection string.
func redactDatabaseURL(dsn string) string {
	for _, scheme := range []string{"postgres://", "postgresql://"} {
		if rest, ok := strings.CutPrefix(dsn, scheme); ok {
			return scheme + redactPostgresURL(rest)
		}
	}
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		u.RawQuery = redactQueryPasswords(u.RawQuery)
		return u.Redacted()
	}
	return keywordPassword.ReplaceAllString(dsn, "${1}xxxxx")
}

// redactPostgresURL hides the passwords of a postgres URL after its scheme.
// Its userinfo runs to the first '@' before any '/', as pgx and libpq read
// it, so a password holding '#' or '?' (which net/url takes for a fragment
// or a query) is hidden too.
func redactPostgresURL(rest string) string {
	userinfo := ""
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		user, _, hasPassword := strings.Cut(rest[:i], ":")
		userinfo, rest = user, rest[i+1:]
		if hasPassword {
			userinfo += ":xxxxx"
		}
		userinfo += "@"
	}
	if strings.Contains(rest, "@") {
		// A password with a '/' strands its '@' past the host: pgx refuses the
		// URL, but the configuration line is logged before that.
		rest = strandedPassword.ReplaceAllString(rest, ":xxxxx@")
	}
	if base, query, ok := strings.Cut(rest, "?"); ok {
		rest = base + "?" + redactQueryPasswords(query)
	}
	return userinfo + rest
}

// redactQueryPasswords masks the value of every password parameter of a raw
// query string and keeps the rest as written, in its order.
func redactQueryPasswords(rawQuery string) string {
	pairs := strings.Split(rawQuery, "&")
	for i, pair := range pairs {
		name, _, _ := strings.Cut(pair, "=")
		if decoded, err := url.QueryUnescape(name); err == nil && passwordParams[strings.ToLower(decoded)] {
			pairs[i] = name + "=xxxxx"
		}
	}
	return strings.Join(pairs, "&")
}

// loggedSetting is a setting's value in the boot log: its text in the text
// format, as before, and in the JSON format its typed value, so a log
// pipeline can compare numbers (pool-size > 10) and booleans.
type loggedSetting struct {
	text  string
	typed any
}

// MarshalText is what slog's text handler writes.
func (l loggedSetting) MarshalText() ([]byte, error) { return []byte(l.text), nil }

// MarshalJSON is what slog's JSON handler writes.
func (l loggedSetting) MarshalJSON() ([]byte, error) { return json.Marshal(l.typed) }

func (l loggedSetting) String() string { return l.text }

// LogAttrs is every setting as the broker runs with it, keyed by flag name, for
// the boot log: secrets say only whether they are set, the database URL's
// password is hidden, and defaults derived at load (body budget, spool
// directory) show their effective value. Numbers and booleans are typed in
// the JSON format; a duration is a number of the unit its name ends in.
func (c *Config) LogAttrs() []any {
	attrs := make([]any, 0, 2*len(settings))
	for _, s := range settings {
		v := c.values[s.env]
		switch {
		case secretSettings[s.env] && v != "":
			v = "set"
		case s.env == "LANES_DATABASE_URL":
			v = redactDatabaseURL(v)
		case s.env == "LANES_JWT_JWKS_URL" && v != "":
			// An identity provider's URL may carry a password or an access key in its query.
			urls := splitJWKSURLs(v)
			for i, u := range urls {
				urls[i] = auth.RedactedJWKSURL(u)
			}
			v = strings.Join(urls, " ")
		case s.env == "LANES_MAX_INFLIGHT_BODY_BYTES":
			v = strconv.FormatInt(c.MaxInflightBodyBytes, 10)
		case s.env == "LANES_SPOOL_DIR":
			v = c.SpoolDir
		}
		logged := loggedSetting{text: v, typed: v}
		if s.set.typed != nil && !secretSettings[s.env] {
			logged.typed = s.set.typed(v)
		}
		attrs = append(attrs, s.flag, logged)
	}
	return attrs
}
