package nmp

import (
	"math"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

// LowerMaxTokens is the decrease-only rule for the hard limit. Zero means
// "no limit" (the protobuf's unset), so any positive proposal lowers an unset
// limit, and a proposal of zero never lowers anything (it would lift the
// limit). lowered reports whether the result differs from current.
func LowerMaxTokens(current, proposed uint64) (result uint64, lowered bool) {
	switch {
	case proposed == 0:
		return current, false
	case current == 0 || proposed < current:
		return proposed, true
	}
	return current, false
}

// AddTokens adds n to a running total, saturating at the largest uint64
// instead of wrapping: a wrapped total would read as almost nothing spent.
func AddTokens(used, n uint64) uint64 {
	if n > math.MaxUint64-used {
		return math.MaxUint64
	}
	return used + n
}

// GrowTokensUsed is the only-grows rule for the running total: the result is
// max(current, proposed). grown reports whether it changed.
func GrowTokensUsed(current, proposed uint64) (result uint64, grown bool) {
	if proposed > current {
		return proposed, true
	}
	return current, false
}

// Remaining is how many tokens are left before the hard limit
// (max_tokens - tokens_used, never below zero). limited is false when no
// limit is set, and then remaining is the largest uint64.
func Remaining(b *nmpv1.Budget) (remaining uint64, limited bool) {
	limit, used := b.GetMaxTokens(), b.GetTokensUsed()
	if limit == 0 {
		return math.MaxUint64, false
	}
	if used >= limit {
		return 0, true
	}
	return limit - used, true
}
