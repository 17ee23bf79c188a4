package config

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// secretSettings are logged as "set" or "" only.
var secretSettings = map[string]bool{"LANES_JWT_SECRET": true, "LANES_JWT_PUBLIC_KEY": true}

// keywordPassword finds the password of a key=value connection string.
var keywordPassword = regexp.MustCompile(`(password\s*=\s*)('[^']*'|\S+)`)

// passwordParams are the query parameters of a database URL that hold a
// secret: libpq and pgx take a password there as well as in the userinfo.
var passwordParams = map[string]bool{"password": true, "sslpassword": true}

// redactDatabaseURL hides the passwords of a URL (userinfo and query string)
// or key=value connection string.
func redactDatabaseURL(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		u.RawQuery = redactQueryPasswords(u.RawQuery)
		return u.Redacted()
	}
	return keywordPassword.ReplaceAllString(dsn, "${1}xxxxx")
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

// LogAttrs is every setting as the broker runs with it, keyed by flag name, for
// the boot log: secrets say only whether they are set, the database URL's
// password is hidden, and defaults derived at load (body budget, spool
// directory) show their effective value.
func (c *Config) LogAttrs() []any {
	attrs := make([]any, 0, 2*len(settings))
	for _, s := range settings {
		v := c.values[s.env]
		switch {
		case secretSettings[s.env] && v != "":
			v = "set"
		case s.env == "LANES_DATABASE_URL":
			v = redactDatabaseURL(v)
		case s.env == "LANES_MAX_INFLIGHT_BODY_BYTES":
			v = strconv.FormatInt(c.MaxInflightBodyBytes, 10)
		case s.env == "LANES_SPOOL_DIR":
			v = c.SpoolDir
		}
		attrs = append(attrs, s.flag, v)
	}
	return attrs
}
