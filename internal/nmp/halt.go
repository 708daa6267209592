package nmp

import (
	"math/bits"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

// Comparison selects how the halt rule compares the running total with the
// threshold. The NMP README says only "95% threshold stop rule — pipeline
// halts before exhausting budget"; which side of the boundary halts is
// unspecified, so it is a knob.
type Comparison int

const (
	// AtOrAbove halts when tokens_used*100 >= max_tokens*percent. The
	// default: reaching the threshold is enough, which is the reading that
	// stops earlier and so errs on the side of the budget.
	AtOrAbove Comparison = iota
	// Above halts only when tokens_used*100 > max_tokens*percent.
	Above
)

// DefaultHaltPercent is the README's 95 % threshold.
const DefaultHaltPercent = 95

// HaltRule configures Halted. The zero value is the default rule
// (95 %, AtOrAbove).
type HaltRule struct {
	// Percent of max_tokens at which the pipeline halts, 1..100; 0 means
	// DefaultHaltPercent. Values above 100 are treated as 100 (the limit is
	// hard; a threshold beyond it would let the total exceed it) and
	// rejected by Validate.
	Percent uint64
	// Compare is AtOrAbove (default) or Above.
	Compare Comparison
}

// DefaultHaltRule is 95 % compared with >=.
func DefaultHaltRule() HaltRule { return HaltRule{Percent: DefaultHaltPercent, Compare: AtOrAbove} }

// Validate reports an unusable rule (Percent above 100, unknown Compare).
func (r HaltRule) Validate() error {
	if r.Percent > 100 {
		return newError(CodeInvalidConfig, "halt.percent", "must be 1..100 (0 for the default 95)")
	}
	if r.Compare != AtOrAbove && r.Compare != Above {
		return newError(CodeInvalidConfig, "halt.compare", "must be AtOrAbove or Above")
	}
	return nil
}

func (r HaltRule) percent() uint64 {
	switch {
	case r.Percent == 0:
		return DefaultHaltPercent
	case r.Percent > 100:
		return 100
	}
	return r.Percent
}

// Halted reports whether the pipeline must stop: with P the rule's percent,
// tokens_used*100 >= max_tokens*P (or > with Above), computed exactly in
// 128-bit integer arithmetic, so there is neither float rounding nor
// overflow. Evaluate it on the budget AFTER the current hop's tokens were
// added (AppendTrace does that), so that a hop that crosses the threshold
// halts the pipeline at once. max_tokens 0 means no limit: never halted.
//
// With max 5000 and 95 %, the threshold is 4750: AtOrAbove halts at 4750,
// Above at 4751.
func Halted(b *nmpv1.Budget, r HaltRule) bool {
	limit := b.GetMaxTokens()
	if limit == 0 {
		return false
	}
	uh, ul := bits.Mul64(b.GetTokensUsed(), 100)
	th, tl := bits.Mul64(limit, r.percent())
	switch {
	case uh != th:
		return uh > th
	case r.Compare == Above:
		return ul > tl
	}
	return ul >= tl
}
