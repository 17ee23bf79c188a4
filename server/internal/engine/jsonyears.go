package engine

import "time"

// Instants travel as RFC 3339 date-times, whose year has four digits: Go's
// time.Time refuses to marshal any other. An instant stored outside years
// 0001–9999 (UTC) would fail every later answer that echoes it, so writes
// refuse it and listings clamp what an older build stored.
var (
	FirstJSONTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	LastJSONTime  = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// OutsideJSONYears reports an instant whose RFC 3339 form in UTC would not
// have a four-digit year. "9999-12-31T23:59:59-05:00" is valid RFC 3339 and
// still outside: in UTC it is in the year 10000.
func OutsideJSONYears(t time.Time) bool {
	return t.Before(FirstJSONTime) || t.After(LastJSONTime)
}

// checkJSONYears refuses an instant a later answer could not encode.
func checkJSONYears(field string, t time.Time) error {
	if OutsideJSONYears(t) {
		return invalid(field, "%s must fall within the years 0001 to 9999 (UTC)", field)
	}
	return nil
}
