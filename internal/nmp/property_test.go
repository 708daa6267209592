package nmp

import (
	"math"
	"math/rand/v2"
	"testing"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

// TestPropertyMonotone drives 3000 random sequences of hops, each hop an
// arbitrary agent header (half of them through MarshalJSON and
// ParseAgentHeader) or a broker step (trust lowering, limit lowering, a
// trace entry), and checks after every hop that effective trust never rose,
// max_tokens never rose (0 being no limit), tokens_used never fell, and a
// halted pipeline stays halted.
func TestPropertyMonotone(t *testing.T) {
	r := rand.New(rand.NewPCG(20260101, 7))
	cfg := DefaultConfig()
	cfg.MaxTrace = 40
	const sequences = 3000
	for seq := range sequences {
		h := randomStart(r)
		for hop := range 1 + r.IntN(25) {
			before := snapshot(h)
			switch r.IntN(5) {
			case 0, 1:
				agent := randomAgent(r)
				if r.IntN(2) == 0 {
					data, err := agent.MarshalJSON()
					if err != nil {
						t.Fatal(err)
					}
					agent, err = ParseAgentHeader(data, Limits{MaxBytes: 1 << 20})
					if err != nil {
						t.Fatalf("seq %d hop %d: a rendered header does not parse: %v\n%s", seq, hop, err, data)
					}
				}
				h, _ = Apply(h, agent, cfg)
			case 2:
				h.Trust, _ = Lower(h.Trust, randomTrust(r))
			case 3:
				if h.Budget == nil {
					h.Budget = &nmpv1.Budget{}
				}
				h.Budget.MaxTokens, _ = LowerMaxTokens(h.Budget.MaxTokens, randomTokens(r))
			case 4:
				AppendTrace(h, &nmpv1.TraceEntry{Service: "policy", Trust: h.Trust, Tokens: randomTokens(r)})
			}
			after := snapshot(h)
			if after.trust > before.trust {
				t.Fatalf("seq %d hop %d: trust rose %v → %v", seq, hop, before.trust, after.trust)
			}
			if limit(after.max) > limit(before.max) {
				t.Fatalf("seq %d hop %d: max_tokens rose %d → %d", seq, hop, before.max, after.max)
			}
			if after.used < before.used {
				t.Fatalf("seq %d hop %d: tokens_used fell %d → %d", seq, hop, before.used, after.used)
			}
			if before.halted && !after.halted {
				t.Fatalf("seq %d hop %d: un-halted", seq, hop)
			}
			if err := Validate(h); err != nil {
				t.Fatalf("seq %d hop %d: %v", seq, hop, err)
			}
			if len(h.Trace) > max(cfg.MaxTrace, before.traceLen+1) {
				t.Fatalf("seq %d hop %d: trace grew to %d", seq, hop, len(h.Trace))
			}
		}
	}
}

type state struct {
	trust     nmpv1.TrustLevel
	max, used uint64
	halted    bool
	traceLen  int
}

func snapshot(h *nmpv1.NmpHeader) state {
	return state{Effective(h.GetTrust()), h.GetBudget().GetMaxTokens(), h.GetBudget().GetTokensUsed(),
		Halted(h.GetBudget(), HaltRule{}), len(h.GetTrace())}
}

// limit orders max_tokens with 0 (no limit) as the largest.
func limit(m uint64) uint64 {
	if m == 0 {
		return math.MaxUint64
	}
	return m
}

func randomTrust(r *rand.Rand) nmpv1.TrustLevel { return nmpv1.TrustLevel(r.IntN(5)) }

// randomTokens favours the interesting values: zero, small, around the
// sample's 5000, and near the top of uint64.
func randomTokens(r *rand.Rand) uint64 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return uint64(r.IntN(100))
	case 2, 3:
		return uint64(r.IntN(10000))
	case 4:
		return math.MaxUint64 - uint64(r.IntN(3))
	}
	return r.Uint64()
}

func randomStart(r *rand.Rand) *nmpv1.NmpHeader {
	h := &nmpv1.NmpHeader{Trust: randomTrust(r)}
	if r.IntN(3) != 0 {
		h.Budget = &nmpv1.Budget{MaxTokens: randomTokens(r), TokensUsed: uint64(r.IntN(6000)), SystemMode: nmpv1.SystemMode(r.IntN(5))}
	}
	return h
}

func randomAgent(r *rand.Rand) *AgentHeader {
	a := &AgentHeader{}
	if r.IntN(3) != 0 {
		a.Trust = nmpv1.TrustLevel(1 + r.IntN(4))
	}
	for _, s := range AllSignals() {
		if r.IntN(2) == 0 {
			lo, hi := s.Range()
			v := lo + Milli(r.IntN(int(hi-lo)+1))
			*a.Signals.slot(s) = &v
		}
	}
	if r.IntN(2) == 0 {
		a.Budget.MaxTokens = ptr(randomTokens(r))
	}
	if r.IntN(2) == 0 {
		a.Budget.TokensUsed = ptr(randomTokens(r))
	}
	a.Budget.SystemMode = nmpv1.SystemMode(r.IntN(5))
	for range r.IntN(6) {
		a.Trace = append(a.Trace, AgentTraceEntry{Agent: "agent-" + string(rune('a'+r.IntN(26))), Action: "step", Tokens: randomTokens(r)})
	}
	return a
}
