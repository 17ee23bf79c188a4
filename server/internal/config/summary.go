package config

import (
	"net/url"
	"regexp"
	"strconv"
)

// secretSettings are logged as "set" or "" only.
var secretSettings = map[string]bool{"LANES_JWT_SECRET": true, "LANES_JWT_PUBLIC_KEY": true}

// keywordPassword finds the password of a key=value connection string.
var keywordPassword = regexp.MustCompile(`(password\s*=\s*)('[^']*'|\S+)`)

// redactDatabaseURL hides the password of a URL or key=value connection string.
func redactDatabaseURL(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return keywordPassword.ReplaceAllString(dsn, "${1}xxxxx")
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
