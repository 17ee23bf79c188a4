package api

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// listKey is the opaque after of the page that follows a row: its sort key's
// names as a JSON array, in unpadded base64url so it travels in a header and
// a query string unescaped.
func listKey(names ...string) string {
	raw, _ := json.Marshal(names)
	return base64.RawURLEncoding.EncodeToString(raw)
}

// keyedRowPage is the page a listing paged by a key of names names (one of
// the counts given) asks for: after with offset, or an after that is not such
// a key, is the caller's mistake (400 bad_request) and reads nothing.
func keyedRowPage(limit *gen.ListLimit, offset *gen.KeyedListOffset, after *gen.ListAfter, names ...int) (engine.RowPage, error) {
	page := rowPage(limit, offset)
	if after == nil {
		return page, nil
	}
	if offset != nil {
		return page, afterWithOffset()
	}
	bad := badAfter()
	raw, err := base64.RawURLEncoding.DecodeString(*after)
	if err != nil {
		return page, bad
	}
	var key []string
	if err := json.Unmarshal(raw, &key); err != nil || !slices.Contains(names, len(key)) {
		return page, bad
	}
	for _, name := range key {
		// PostgreSQL stores no NUL; JSON decoding turned invalid UTF-8 into U+FFFD already.
		if strings.ContainsRune(name, 0) {
			return page, bad
		}
	}
	page.After = key
	return page, nil
}

// afterWithOffset is the error of a page asked for by both after and offset.
func afterWithOffset() error {
	return &engine.InvalidInputError{Field: "after", Message: "after and offset are two ways to place a page: send one"}
}

// badAfter is the error of an after that is not a key the listing gave.
func badAfter() error {
	return &engine.InvalidInputError{Field: "after",
		Message: "after is not a key this listing gave: send back the X-Lanes-Next-After (or nextAfter) of the page before"}
}

// nextPlaces are the after and the offset of the page that follows a cut page
// of rows rows whose last row has the key names. A page asked for with after
// has no offset to give: where it started, counted from the first row, is
// what the key leaves unknown.
func nextPlaces(page engine.RowPage, rows int, names ...string) (after *string, offset *int) {
	key := listKey(names...)
	if page.After != nil {
		return &key, nil
	}
	return &key, nextOffset(page, rows, true)
}
