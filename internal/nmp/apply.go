package nmp

import (
	"strconv"

	"google.golang.org/protobuf/proto"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

// AgentService is the service of every trace entry an agent declared. It
// is no broker service's name, so such an entry can never be mistaken for
// one of the broker's own hops. The agent's own words (its "agent" and
// "action" strings) are not copied: an NMP header travels in the clear on
// every stream and outlives erasure, while the agent's header as it sent it
// is kept only sealed, with the message's other NLIP parts.
const AgentService = "agent"

// Ignored is one part of an agent header the broker did not take.
type Ignored struct {
	// Field is the member, as in Error.Field ("trust.level").
	Field string
	// Reason is a complete sentence for people and logs.
	Reason string
}

func (i Ignored) String() string { return i.Reason }

// Apply merges what an agent claimed into the broker's header and returns a
// new header (current is not modified) and what it ignored. It takes only
// what can lower trust or budget, so no agent can grant itself anything:
//
//   - trust: min(current, agent); a higher claim is ignored;
//   - budget.max_tokens: lowered (an unset limit takes the agent's); a
//     higher claim, or 0 (which would mean "no limit"), is ignored;
//   - budget.system_mode: taken when it is smaller than the current mode or
//     no mode is set; a larger mode is ignored (a mode is a ceiling);
//   - trace: each entry is appended as service AgentService with its
//     tokens, which are added to tokens_used, and without its agent and
//     action strings (free text from the agent stays out of the header);
//     past cfg.MaxTrace entries are dropped but their tokens still count;
//   - budget.tokens_used: after the trace tokens are added, raised to the
//     agent's claim if that is higher; a lower claim is ignored;
//   - signals: advisory, taken as given (they were range-checked when
//     parsed) unless cfg.IgnoreAgentSignals. They can steer SelectMode only
//     down to fewer tokens or, with no mode requested, up to what the
//     budget allows: never past max_tokens.
//
// Call it after the ingress hop ended (envelope.Hop.End), so that
// "ignored" messages compare with the broker's level and the agent's trace
// entries follow the ingress entry. To record the agent's trust cap with
// its reason in the ingress trace entry, pass agent.TrustCap() to
// envelope.Hop.LowerTrust as well; then Apply's trust step is a no-op.
func Apply(current *nmpv1.NmpHeader, agent *AgentHeader, cfg Config) (*nmpv1.NmpHeader, []Ignored) {
	res := &nmpv1.NmpHeader{}
	if current != nil {
		res = proto.CloneOf(current)
	}
	if agent == nil {
		return res, nil
	}
	var ig []Ignored
	ignore := func(field, reason string) { ig = append(ig, Ignored{Field: field, Reason: reason}) }

	if agent.Trust != nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED {
		if level, lowered := Lower(res.Trust, agent.Trust); lowered {
			res.Trust = level
		} else if Effective(agent.Trust) > Effective(res.Trust) {
			ignore("trust.level", "trust level "+strconv.Itoa(TrustToNMP(agent.Trust))+" ignored: "+trustCeiling(res.Trust))
		}
	}

	if agent.hasSignals() {
		if cfg.IgnoreAgentSignals {
			ignore("signals", "signals ignored: this broker takes no signals from agents")
		} else {
			if res.Signals == nil {
				res.Signals = &nmpv1.Signals{}
			}
			for _, s := range AllSignals() {
				if v, ok := agent.Signals.Get(s); ok {
					Set(res.Signals, s, v)
				}
			}
		}
	}

	budget := func() *nmpv1.Budget {
		if res.Budget == nil {
			res.Budget = &nmpv1.Budget{}
		}
		return res.Budget
	}
	if p := agent.Budget.MaxTokens; p != nil {
		cur := res.GetBudget().GetMaxTokens()
		if limit, lowered := LowerMaxTokens(cur, *p); lowered {
			budget().MaxTokens = limit
		} else if *p == 0 && cur != 0 {
			ignore("budget.max_tokens", "max_tokens 0 ignored: 0 means no limit, and the limit of "+
				strconv.FormatUint(cur, 10)+" cannot be lifted")
		} else if *p > cur {
			ignore("budget.max_tokens", "max_tokens "+strconv.FormatUint(*p, 10)+
				" ignored: cannot raise the limit above "+strconv.FormatUint(cur, 10)+" (decrease-only)")
		}
	}
	if m := agent.Budget.SystemMode; m != nmpv1.SystemMode_SYSTEM_MODE_UNSPECIFIED {
		cur := res.GetBudget().GetSystemMode()
		switch {
		case !validMode(cur) || m < cur:
			budget().SystemMode = m
		case m > cur:
			ignore("budget.system_mode", "system_mode "+ModeName(m)+" ignored: cannot raise the mode above "+ModeName(cur))
		}
	}

	applyTrace(res, agent.Trace, cfg.maxTrace(), ignore)

	if p := agent.Budget.TokensUsed; p != nil {
		cur := res.GetBudget().GetTokensUsed()
		if used, grown := GrowTokensUsed(cur, *p); grown {
			budget().TokensUsed = used
		} else if *p < cur {
			ignore("budget.tokens_used", "tokens_used "+strconv.FormatUint(*p, 10)+
				" ignored: the running total is already "+strconv.FormatUint(cur, 10)+" and never decreases")
		}
	}
	return res, ig
}

// applyTrace appends the agent's entries up to limit entries in the header
// and counts the tokens of all of them.
func applyTrace(res *nmpv1.NmpHeader, entries []AgentTraceEntry, limit int, ignore func(field, reason string)) {
	first, dropped := -1, 0
	var droppedTokens uint64
	for i, e := range entries {
		if len(res.Trace) >= limit {
			if first < 0 {
				first = i
			}
			dropped++
			droppedTokens = AddTokens(droppedTokens, e.Tokens)
			continue
		}
		AppendTrace(res, &nmpv1.TraceEntry{Service: AgentService, Trust: res.Trust, Tokens: e.Tokens})
	}
	if dropped == 0 {
		return
	}
	if droppedTokens > 0 {
		if res.Budget == nil {
			res.Budget = &nmpv1.Budget{}
		}
		res.Budget.TokensUsed = AddTokens(res.Budget.TokensUsed, droppedTokens)
	}
	ignore("trace["+strconv.Itoa(first)+"]", strconv.Itoa(dropped)+" trace entries from trace["+strconv.Itoa(first)+
		"] on dropped: a header holds at most "+strconv.Itoa(limit)+" entries; their "+
		strconv.FormatUint(droppedTokens, 10)+" tokens were still counted")
}

// trustCeiling explains why trust cannot rise above current.
func trustCeiling(current nmpv1.TrustLevel) string {
	if current == nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED {
		return "the broker has not set trust, which reads as hostile(0); an agent cannot raise it"
	}
	return "cannot raise trust above " + TrustName(current) + " set by the broker"
}
