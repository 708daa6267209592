package nmp

import (
	"fmt"
	"testing"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

// TestConformance runs cases C1–C13 of the NMP research note
// (/work/shared/reference/nmp.md §4), derived from the NMP README.
func TestConformance(t *testing.T) {
	t.Run("C1 parse the README sample", func(t *testing.T) {
		h, err := ParseAgentHeader(readSample(t), DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		if TrustToNMP(h.Trust) != 3 {
			t.Errorf("trust %d, want 3", TrustToNMP(h.Trust))
		}
		want := map[Signal]Milli{Urgency: 500, Quality: 500, Inhibition: 0, Activation: 500, Focus: 500, Reward: 0}
		for s, w := range want {
			if v, ok := h.Signals.Get(s); !ok || v != w {
				t.Errorf("%s = %d (present %v), want %d", s, v, ok, w)
			}
		}
		if *h.Budget.MaxTokens != 5000 || *h.Budget.TokensUsed != 0 || h.Budget.SystemMode != standard {
			t.Errorf("budget %d/%d/%s", *h.Budget.MaxTokens, *h.Budget.TokensUsed, ModeName(h.Budget.SystemMode))
		}
		if len(h.Trace) != 1 || h.Trace[0].Agent != "router" || h.Trace[0].Tokens != 42 || h.Trace[0].Action != "classified as high-urgency" {
			t.Errorf("trace %+v", h.Trace)
		}
	})
	t.Run("C2 trusted forwarded by untrusted", func(t *testing.T) {
		if l, _ := Lower(trusted, untrusted); TrustToNMP(l) != 1 {
			t.Errorf("level %d, want 1", TrustToNMP(l))
		}
		h, _ := Apply(&nmpv1.NmpHeader{Trust: trusted}, &AgentHeader{Trust: untrusted}, DefaultConfig())
		if TrustToNMP(h.Trust) != 1 {
			t.Errorf("Apply: level %d, want 1", TrustToNMP(h.Trust))
		}
	})
	t.Run("C3 untrusted forwarded by trusted", func(t *testing.T) {
		if l, lowered := Lower(untrusted, trusted); TrustToNMP(l) != 1 || lowered {
			t.Errorf("level %d, want 1", TrustToNMP(l))
		}
		h, ig := Apply(&nmpv1.NmpHeader{Trust: untrusted}, &AgentHeader{Trust: trusted}, DefaultConfig())
		if TrustToNMP(h.Trust) != 1 || len(ig) != 1 {
			t.Errorf("Apply: level %d, ignored %v", TrustToNMP(h.Trust), ig)
		}
	})
	t.Run("C4 hostile through any chain", func(t *testing.T) {
		l := hostile
		for _, hop := range []nmpv1.TrustLevel{trusted, verified, unspec, untrusted, trusted, 9} {
			l, _ = Lower(l, hop)
			if l != hostile {
				t.Fatalf("after %v: %v", hop, l)
			}
		}
	})
	t.Run("C5 raise max_tokens 5000 to 6000", func(t *testing.T) {
		if m, lowered := LowerMaxTokens(5000, 6000); m != 5000 || lowered {
			t.Errorf("%d %v", m, lowered)
		}
		h, ig := Apply(&nmpv1.NmpHeader{Budget: &nmpv1.Budget{MaxTokens: 5000}}, &AgentHeader{Budget: AgentBudget{MaxTokens: ptr[uint64](6000)}}, DefaultConfig())
		if h.Budget.MaxTokens != 5000 || len(ig) != 1 {
			t.Errorf("%d %v", h.Budget.MaxTokens, ig)
		}
	})
	t.Run("C6 tokens_used after 42 and 100", func(t *testing.T) {
		h := &nmpv1.NmpHeader{Budget: &nmpv1.Budget{MaxTokens: 5000}}
		AppendTrace(h, &nmpv1.TraceEntry{Service: "a", Tokens: 42})
		AppendTrace(h, &nmpv1.TraceEntry{Service: "b", Tokens: 100})
		if h.Budget.TokensUsed != 142 {
			t.Fatalf("%d", h.Budget.TokensUsed)
		}
		h2, _ := Apply(h, &AgentHeader{Budget: AgentBudget{TokensUsed: ptr[uint64](0)}}, DefaultConfig())
		if h2.Budget.TokensUsed != 142 {
			t.Fatalf("decreased to %d", h2.Budget.TokensUsed)
		}
	})
	t.Run("C7 P(u)", func(t *testing.T) {
		for u, want := range map[Milli]Milli{0: 0, 300: 840, 500: 1000, 700: 840, 1000: 0} {
			if got := Performance(u); got != want {
				t.Errorf("P(%d) = %d, want %d", u, got, want)
			}
		}
	})
	t.Run("C8 urgency 0.71 streamlines", func(t *testing.T) {
		for req := none; req <= deep; req++ {
			for _, max := range []uint64{0, 100, 5000, 100000} {
				m, why := SelectMode(&nmpv1.Signals{UrgencyMilli: 710, QualityMilli: 1000}, &nmpv1.Budget{MaxTokens: max, SystemMode: req}, DefaultModeConfig())
				if m != fast && m != reflex {
					t.Errorf("request %v, max %d: %s (%s)", req, max, ModeName(m), why)
				}
			}
		}
	})
	t.Run("C9 urgency 0.70 does not streamline", func(t *testing.T) {
		for _, req := range []nmpv1.SystemMode{standard, deep} {
			m, why := SelectMode(&nmpv1.Signals{UrgencyMilli: 700}, &nmpv1.Budget{SystemMode: req}, DefaultModeConfig())
			if m != req {
				t.Errorf("request %s: %s (%s)", ModeName(req), ModeName(m), why)
			}
		}
	})
	t.Run("C10 signals outside [0,1]", func(t *testing.T) {
		for _, s := range []Signal{Urgency, Quality, Inhibition, Activation, Focus} {
			for _, v := range []string{"-0.01", "1.01"} {
				_, err := ParseAgentHeader([]byte(fmt.Sprintf(`{"signals":{%q:%s}}`, s, v)), Limits{})
				wantError(t, err, CodeOutOfRange, "signals."+s.String())
			}
		}
	})
	t.Run("C11 reward bounds", func(t *testing.T) {
		for _, v := range []string{"-0.5", "1.0"} {
			if _, err := ParseAgentHeader([]byte(`{"signals":{"reward":`+v+`}}`), Limits{}); err != nil {
				t.Errorf("reward %s: %v", v, err)
			}
		}
		for _, v := range []string{"-0.51", "1.01"} {
			_, err := ParseAgentHeader([]byte(`{"signals":{"reward":`+v+`}}`), Limits{})
			wantError(t, err, CodeOutOfRange, "signals.reward")
		}
	})
	t.Run("C12 enumerations", func(t *testing.T) {
		for _, v := range []string{"4", "-1"} {
			_, err := ParseAgentHeader([]byte(`{"trust":{"level":`+v+`}}`), Limits{})
			wantError(t, err, CodeInvalidTrust, "trust.level")
		}
		_, err := ParseAgentHeader([]byte(`{"budget":{"system_mode":"turbo"}}`), Limits{})
		wantError(t, err, CodeInvalidMode, "budget.system_mode")
	})
	t.Run("C13 95 % rule, both comparisons", func(t *testing.T) {
		for _, c := range []struct {
			used   uint64
			ge, gt bool
		}{{4749, false, false}, {4750, true, false}, {4751, true, true}} {
			b := &nmpv1.Budget{MaxTokens: 5000, TokensUsed: c.used}
			if got := Halted(b, HaltRule{Percent: 95, Compare: AtOrAbove}); got != c.ge {
				t.Errorf(">= at %d: %v", c.used, got)
			}
			if got := Halted(b, HaltRule{Percent: 95, Compare: Above}); got != c.gt {
				t.Errorf("> at %d: %v", c.used, got)
			}
		}
	})
}
