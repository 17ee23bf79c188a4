package engine

import (
	"fmt"
	"math"
)

// listMaxBytes is the listing byte budget, math.MaxInt64 when there is none.
func (e *Engine) listMaxBytes() int64 {
	if e.cfg.ListMaxBytes <= 0 {
		return math.MaxInt64
	}
	return e.cfg.ListMaxBytes
}

// pageBudget counts the bytes a listing page has taken: a row is taken while
// the page stays within the budget, and the first row always, so a pager
// always moves on.
type pageBudget struct {
	left int64
	rows int
}

// take adds a row of n bytes unless the page holds rows already and n is
// more than what is left.
func (b *pageBudget) take(n int64) bool {
	if b.rows > 0 && n > b.left {
		return false
	}
	b.left -= n
	b.rows++
	return true
}

// RowPage places one page of a listing whose rows carry no payload (groups,
// lagging cursors, labels, a queue's partitions): at most Limit rows (all
// when Limit is 0) after skipping Offset. The listings page by key instead
// when Offset is 0: their rows strictly after After, the sort key of the last
// row of the page before (nil: from the first row).
type RowPage struct {
	Limit, Offset int
	After         []string
}

// nameAfter is the condition that keeps a listing sorted by the one name
// column after the page's key, and args with the key appended as the
// condition's parameter: no condition without a key, and with one a plain
// comparison, so the index on the column starts the scan at the key and the
// LIMIT stops it.
func (p RowPage) nameAfter(column string, args ...any) (string, []any) {
	if len(p.After) != 1 {
		return "", args
	}
	return fmt.Sprintf(" AND %s > $%d", column, len(args)+1), append(args, p.After[0])
}

// limitArg is the LIMIT of a page's query: one row past the page, which
// says whether more follow; nil (no limit) when the page has none.
func (p RowPage) limitArg() any {
	if p.Limit <= 0 {
		return nil
	}
	return p.Limit + 1
}

// cutPage keeps the page's rows of rows, read through limitArg, and says
// whether more rows follow them.
func cutPage[T any](rows []T, p RowPage) ([]T, bool) {
	if p.Limit > 0 && len(rows) > p.Limit {
		return rows[:p.Limit], true
	}
	return rows, false
}
