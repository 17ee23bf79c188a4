package engine

import "math"

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
