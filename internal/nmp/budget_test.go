package nmp

import (
	"math"
	"testing"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

func TestLowerMaxTokens(t *testing.T) {
	for _, c := range []struct {
		cur, prop, want uint64
		lowered         bool
	}{
		{5000, 6000, 5000, false}, // C5: a raise is refused
		{5000, 5000, 5000, false},
		{5000, 4999, 4999, true},
		{5000, 1, 1, true},
		{5000, 0, 5000, false}, // 0 would lift the limit
		{0, 6000, 6000, true},  // unset is no limit: any limit lowers it
		{0, 0, 0, false},
		{math.MaxUint64, 1, 1, true},
	} {
		got, lowered := LowerMaxTokens(c.cur, c.prop)
		if got != c.want || lowered != c.lowered {
			t.Errorf("LowerMaxTokens(%d, %d) = %d, %v; want %d, %v", c.cur, c.prop, got, lowered, c.want, c.lowered)
		}
	}
}

func TestAddTokensSaturates(t *testing.T) {
	for _, c := range []struct{ a, b, want uint64 }{
		{0, 0, 0}, {100, 42, 142}, {math.MaxUint64 - 1, 1, math.MaxUint64},
		{math.MaxUint64 - 1, 2, math.MaxUint64}, {math.MaxUint64, math.MaxUint64, math.MaxUint64},
	} {
		if got := AddTokens(c.a, c.b); got != c.want {
			t.Errorf("AddTokens(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestGrowTokensUsed(t *testing.T) {
	for _, c := range []struct {
		cur, prop, want uint64
		grown           bool
	}{{142, 10, 142, false}, {142, 142, 142, false}, {142, 143, 143, true}, {0, 0, 0, false}} {
		got, grown := GrowTokensUsed(c.cur, c.prop)
		if got != c.want || grown != c.grown {
			t.Errorf("GrowTokensUsed(%d, %d) = %d, %v", c.cur, c.prop, got, grown)
		}
	}
}

func TestRemaining(t *testing.T) {
	for _, c := range []struct {
		b       *nmpv1.Budget
		want    uint64
		limited bool
	}{
		{nil, math.MaxUint64, false},
		{&nmpv1.Budget{TokensUsed: 10}, math.MaxUint64, false},
		{&nmpv1.Budget{MaxTokens: 5000, TokensUsed: 1000}, 4000, true},
		{&nmpv1.Budget{MaxTokens: 5000, TokensUsed: 5000}, 0, true},
		{&nmpv1.Budget{MaxTokens: 5000, TokensUsed: 7000}, 0, true},
	} {
		got, limited := Remaining(c.b)
		if got != c.want || limited != c.limited {
			t.Errorf("Remaining(%v) = %d, %v", c.b, got, limited)
		}
	}
}

func TestHalted(t *testing.T) {
	ge, gt := HaltRule{Percent: 95, Compare: AtOrAbove}, HaltRule{Percent: 95, Compare: Above}
	for _, c := range []struct {
		max, used uint64
		rule      HaltRule
		want      bool
	}{
		// C13: 95 % of 5000 is 4750.
		{5000, 4749, ge, false}, {5000, 4750, ge, true}, {5000, 4751, ge, true},
		{5000, 4749, gt, false}, {5000, 4750, gt, false}, {5000, 4751, gt, true},
		// The zero rule is the default (95 %, >=).
		{5000, 4749, HaltRule{}, false}, {5000, 4750, HaltRule{}, true},
		// The threshold need not be a whole number of tokens: 95 % of 101 is 95.95.
		{101, 95, ge, false}, {101, 96, ge, true}, {101, 96, gt, true},
		// max 0 is unset: never halted, whatever was used.
		{0, 0, ge, false}, {0, math.MaxUint64, ge, false},
		{5000, 0, ge, false},
		// 100 % halts at the limit; above 100 is read as 100.
		{5000, 4999, HaltRule{Percent: 100}, false}, {5000, 5000, HaltRule{Percent: 100}, true},
		{5000, 5000, HaltRule{Percent: 150}, true}, {5000, 5000, HaltRule{Percent: 100, Compare: Above}, false},
		// No overflow near the top of uint64.
		{math.MaxUint64, math.MaxUint64, ge, true},
		{math.MaxUint64, math.MaxUint64 / 100 * 95, ge, false},
		{math.MaxUint64, math.MaxUint64/100*95 + 20, ge, true},
		{math.MaxUint64, math.MaxUint64 - 1, HaltRule{Percent: 100, Compare: Above}, false},
	} {
		b := &nmpv1.Budget{MaxTokens: c.max, TokensUsed: c.used}
		if got := Halted(b, c.rule); got != c.want {
			t.Errorf("Halted(max %d, used %d, %+v) = %v, want %v", c.max, c.used, c.rule, got, c.want)
		}
	}
	if Halted(nil, ge) {
		t.Error("a nil budget is not halted")
	}
}

func TestHaltRuleValidate(t *testing.T) {
	for _, r := range []HaltRule{{}, DefaultHaltRule(), {Percent: 1}, {Percent: 100, Compare: Above}} {
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
	wantError(t, HaltRule{Percent: 101}.Validate(), CodeInvalidConfig, "halt.percent")
	wantError(t, HaltRule{Compare: 7}.Validate(), CodeInvalidConfig, "halt.compare")
}

func TestAppendTrace(t *testing.T) {
	h := &nmpv1.NmpHeader{}
	AppendTrace(h, &nmpv1.TraceEntry{Service: "ingress"})
	if h.Budget != nil {
		t.Fatal("an entry without tokens created a budget")
	}
	AppendTrace(h, &nmpv1.TraceEntry{Service: "agent:a", Tokens: 42})
	AppendTrace(h, &nmpv1.TraceEntry{Service: "agent:b", Tokens: 100})
	if len(h.Trace) != 3 || h.GetBudget().GetTokensUsed() != 142 {
		t.Fatalf("trace %d entries, tokens_used %d; want 3, 142", len(h.Trace), h.GetBudget().GetTokensUsed())
	}
	AppendTrace(h, &nmpv1.TraceEntry{Tokens: math.MaxUint64})
	if h.Budget.TokensUsed != math.MaxUint64 {
		t.Fatalf("tokens_used %d, want saturated", h.Budget.TokensUsed)
	}
}
