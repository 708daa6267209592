package nmp

import nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"

// Signal names one of the six NMP signals.
type Signal int

// The six signals, in the order of the NMP README.
const (
	Urgency Signal = iota
	Quality
	Inhibition
	Activation
	Focus
	Reward
)

// AllSignals lists the signals in README order (used for rendering and
// validation, so that errors and output are deterministic).
func AllSignals() []Signal {
	return []Signal{Urgency, Quality, Inhibition, Activation, Focus, Reward}
}

// String is the signal's JSON key in the README form ("urgency").
func (s Signal) String() string {
	switch s {
	case Urgency:
		return "urgency"
	case Quality:
		return "quality"
	case Inhibition:
		return "inhibition"
	case Activation:
		return "activation"
	case Focus:
		return "focus"
	case Reward:
		return "reward"
	}
	return "unknown"
}

// Range is the closed range of valid values of the signal: [0, 1] for all
// but reward, which the README gives as [-0.5, 1] (negative feedback is
// bounded more tightly than positive).
func (s Signal) Range() (lo, hi Milli) {
	if s == Reward {
		return -500, 1000
	}
	return 0, 1000
}

// CheckSignal returns an out_of_range *Error when v is outside the signal's
// range, naming the field "signals.<name>".
func CheckSignal(s Signal, v Milli) error {
	lo, hi := s.Range()
	if v < lo || v > hi {
		return newError(CodeOutOfRange, "signals."+s.String(),
			v.String()+" is outside ["+lo.String()+", "+hi.String()+"]")
	}
	return nil
}

// Get reads signal s from a protobuf Signals (nil reads as all zero).
func Get(sig *nmpv1.Signals, s Signal) Milli {
	switch s {
	case Urgency:
		return Milli(sig.GetUrgencyMilli())
	case Quality:
		return Milli(sig.GetQualityMilli())
	case Inhibition:
		return Milli(sig.GetInhibitionMilli())
	case Activation:
		return Milli(sig.GetActivationMilli())
	case Focus:
		return Milli(sig.GetFocusMilli())
	case Reward:
		return Milli(sig.GetRewardMilli())
	}
	return 0
}

// Set writes signal s into sig, which must not be nil.
func Set(sig *nmpv1.Signals, s Signal, v Milli) {
	switch s {
	case Urgency:
		sig.UrgencyMilli = int32(v)
	case Quality:
		sig.QualityMilli = int32(v)
	case Inhibition:
		sig.InhibitionMilli = int32(v)
	case Activation:
		sig.ActivationMilli = int32(v)
	case Focus:
		sig.FocusMilli = int32(v)
	case Reward:
		sig.RewardMilli = int32(v)
	}
}

// ValidateSignals checks every signal's range and returns the first error in
// README order; nil signals are valid (all zero).
func ValidateSignals(sig *nmpv1.Signals) error {
	for _, s := range AllSignals() {
		if err := CheckSignal(s, Get(sig, s)); err != nil {
			return err
		}
	}
	return nil
}

// DefaultSignals are the values of the README's example message (urgency,
// quality, activation and focus 0.5; inhibition and reward 0.0). The README
// calls them an example, not defaults; they are the neutral point of each
// scale, so callers creating a header from nothing may start from them.
func DefaultSignals() *nmpv1.Signals {
	return &nmpv1.Signals{UrgencyMilli: 500, QualityMilli: 500, ActivationMilli: 500, FocusMilli: 500}
}
