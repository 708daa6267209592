package nmp

import nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"

// ConflictKind names one of the NMP README's three signal conflicts.
type ConflictKind string

// The README's names, kept verbatim.
const (
	// KindConflict: urgency and quality both high, speed against depth.
	KindConflict ConflictKind = "CONFLICT"
	// KindInconsistency: inhibition and activation both high, the
	// co-contraction of a brake and an accelerator.
	KindInconsistency ConflictKind = "INCONSISTENCY"
	// KindRisk: urgency and reward both high, an impulsive decision.
	KindRisk ConflictKind = "RISK"
)

// Conflict is one detected conflict with an explanation naming the values.
type Conflict struct {
	Kind    ConflictKind
	Message string
}

// Rules holds the thresholds of the conflict rules. A rule fires when both
// of its signals are strictly above their thresholds, as the README writes
// them ("urgency > 0.7 AND quality > 0.7"). Each rule has its own pair, so
// tuning one rule does not silently move another that shares a signal.
// The zero value has all thresholds at 0; start from DefaultRules.
type Rules struct {
	ConflictUrgency, ConflictQuality                 Milli
	InconsistencyInhibition, InconsistencyActivation Milli
	RiskUrgency, RiskReward                          Milli
}

// DefaultRules are the README's thresholds: 0.7/0.7, 0.5/0.5, 0.7/0.7.
func DefaultRules() Rules {
	return Rules{
		ConflictUrgency: 700, ConflictQuality: 700,
		InconsistencyInhibition: 500, InconsistencyActivation: 500,
		RiskUrgency: 700, RiskReward: 700,
	}
}

// Detect returns the conflicts the signals show, in the order CONFLICT,
// INCONSISTENCY, RISK; none (nil) when there are none or sig is nil.
// Conflicts are reported, not enforced: what to do about them is the
// receiving agent's or policy's decision.
func Detect(sig *nmpv1.Signals, r Rules) []Conflict {
	if sig == nil {
		return nil
	}
	type rule struct {
		kind   ConflictKind
		a, b   Signal
		ta, tb Milli
		what   string
	}
	rules := []rule{
		{KindConflict, Urgency, Quality, r.ConflictUrgency, r.ConflictQuality, "speed vs depth"},
		{KindInconsistency, Inhibition, Activation, r.InconsistencyInhibition, r.InconsistencyActivation, "co-contraction"},
		{KindRisk, Urgency, Reward, r.RiskUrgency, r.RiskReward, "impulsive decision"},
	}
	var out []Conflict
	for _, ru := range rules {
		va, vb := Get(sig, ru.a), Get(sig, ru.b)
		if va > ru.ta && vb > ru.tb {
			out = append(out, Conflict{Kind: ru.kind, Message: ru.a.String() + " " + va.String() + " > " + ru.ta.String() +
				" and " + ru.b.String() + " " + vb.String() + " > " + ru.tb.String() + ": " + ru.what})
		}
	}
	return out
}
