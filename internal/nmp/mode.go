package nmp

import (
	"strconv"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

// ParseMode maps the README's mode names to the enum. Names are lower-case
// and matched exactly, like every key and name of the JSON form.
func ParseMode(s string) (nmpv1.SystemMode, error) {
	switch s {
	case "reflex":
		return nmpv1.SystemMode_SYSTEM_MODE_REFLEX, nil
	case "fast":
		return nmpv1.SystemMode_SYSTEM_MODE_FAST, nil
	case "standard":
		return nmpv1.SystemMode_SYSTEM_MODE_STANDARD, nil
	case "deep":
		return nmpv1.SystemMode_SYSTEM_MODE_DEEP, nil
	}
	return 0, newError(CodeInvalidMode, "budget.system_mode",
		strconv.Quote(clip(s))+" is not a system mode (reflex, fast, standard, deep)")
}

// ModeName is the README name of a mode; "" for unspecified or unknown.
func ModeName(m nmpv1.SystemMode) string {
	switch m {
	case nmpv1.SystemMode_SYSTEM_MODE_REFLEX:
		return "reflex"
	case nmpv1.SystemMode_SYSTEM_MODE_FAST:
		return "fast"
	case nmpv1.SystemMode_SYSTEM_MODE_STANDARD:
		return "standard"
	case nmpv1.SystemMode_SYSTEM_MODE_DEEP:
		return "deep"
	}
	return ""
}

func validMode(m nmpv1.SystemMode) bool {
	return m >= nmpv1.SystemMode_SYSTEM_MODE_REFLEX && m <= nmpv1.SystemMode_SYSTEM_MODE_DEEP
}

// ModeSizes is the token allowance of each mode. The README gives them as
// reflex (0) → fast (~500) → standard (~3k) → deep (~10k).
type ModeSizes struct {
	Reflex, Fast, Standard, Deep uint64
}

// Size is the allowance of mode m; unspecified and unknown modes count as
// standard, the README's default mode.
func (s ModeSizes) Size(m nmpv1.SystemMode) uint64 {
	switch m {
	case nmpv1.SystemMode_SYSTEM_MODE_REFLEX:
		return s.Reflex
	case nmpv1.SystemMode_SYSTEM_MODE_FAST:
		return s.Fast
	case nmpv1.SystemMode_SYSTEM_MODE_DEEP:
		return s.Deep
	}
	return s.Standard
}

// ModeConfig configures SelectMode. Start from DefaultModeConfig.
type ModeConfig struct {
	Sizes ModeSizes
	// StreamlineAbove: urgency strictly above it selects fast (the README's
	// "urgency > 0.7 triggers streamlining").
	StreamlineAbove Milli
	// ReflexAbove: urgency strictly above it selects reflex. The README
	// says "fast or reflex" without a cut; 0.9 is our choice.
	ReflexAbove Milli
	// DeepQualityAbove: when no mode was requested and urgency is not
	// above StreamlineAbove, quality strictly above it selects deep.
	DeepQualityAbove Milli
}

// DefaultModeConfig: sizes 0/500/3000/10000, fast above urgency 0.7,
// reflex above 0.9, deep for quality above 0.7.
func DefaultModeConfig() ModeConfig {
	return ModeConfig{
		Sizes:            ModeSizes{Reflex: 0, Fast: 500, Standard: 3000, Deep: 10000},
		StreamlineAbove:  700,
		ReflexAbove:      900,
		DeepQualityAbove: 700,
	}
}

// Validate reports sizes that are not ordered (reflex <= fast <= standard
// <= deep; "the largest mode that fits" assumes it) and a reflex cut below
// the streamlining cut.
func (c ModeConfig) Validate() error {
	s := c.Sizes
	if s.Reflex > s.Fast || s.Fast > s.Standard || s.Standard > s.Deep {
		return newError(CodeInvalidConfig, "modes.sizes", "must grow from reflex to fast to standard to deep")
	}
	if c.ReflexAbove < c.StreamlineAbove {
		return newError(CodeInvalidConfig, "modes.reflex_above", "must not be below modes.streamline_above")
	}
	return nil
}

// SelectMode picks the system mode for the next processing step and says
// why, in one sentence per decision:
//
//  1. Urgency above ReflexAbove → reflex; above StreamlineAbove → fast
//     (streamlining, never more tokens).
//  2. Otherwise the requested mode (b.system_mode) when one was given;
//     when none was, deep if quality is above DeepQualityAbove, else
//     standard.
//  3. Never more than the requested mode: a request is a ceiling.
//  4. Never more than the remaining budget (max_tokens − tokens_used): step
//     down to the largest mode whose size fits. Reflex is the floor and is
//     returned even when nothing fits; callers stop on Halted, not here.
//
// Signals outside their ranges are compared as they are; validate first.
func SelectMode(sig *nmpv1.Signals, b *nmpv1.Budget, cfg ModeConfig) (nmpv1.SystemMode, string) {
	u, q := Get(sig, Urgency), Get(sig, Quality)
	requested := b.GetSystemMode()
	if !validMode(requested) {
		requested = nmpv1.SystemMode_SYSTEM_MODE_UNSPECIFIED
	}
	var mode nmpv1.SystemMode
	var why string
	switch {
	case u > cfg.ReflexAbove:
		mode = nmpv1.SystemMode_SYSTEM_MODE_REFLEX
		why = "urgency " + u.String() + " > " + cfg.ReflexAbove.String() + ": reflex (streamline, not more tokens)"
	case u > cfg.StreamlineAbove:
		mode = nmpv1.SystemMode_SYSTEM_MODE_FAST
		why = "urgency " + u.String() + " > " + cfg.StreamlineAbove.String() + ": fast (streamline, not more tokens)"
	case requested != nmpv1.SystemMode_SYSTEM_MODE_UNSPECIFIED:
		mode = requested
		why = "requested mode " + ModeName(requested)
	case q > cfg.DeepQualityAbove:
		mode = nmpv1.SystemMode_SYSTEM_MODE_DEEP
		why = "no mode requested; quality " + q.String() + " > " + cfg.DeepQualityAbove.String() +
			" with urgency " + u.String() + " <= " + cfg.StreamlineAbove.String() + ": deep"
	default:
		mode = nmpv1.SystemMode_SYSTEM_MODE_STANDARD
		why = "no mode requested: standard"
	}
	if requested != nmpv1.SystemMode_SYSTEM_MODE_UNSPECIFIED && mode > requested {
		why += "; capped at the requested mode " + ModeName(requested)
		mode = requested
	}
	rem, limited := Remaining(b)
	if !limited || cfg.Sizes.Size(mode) <= rem {
		return mode, why
	}
	tooBig := mode
	for mode > nmpv1.SystemMode_SYSTEM_MODE_REFLEX && cfg.Sizes.Size(mode) > rem {
		mode--
	}
	why += "; " + sized(cfg.Sizes, tooBig) + " exceeds the remaining budget of " +
		strconv.FormatUint(rem, 10) + " tokens"
	if cfg.Sizes.Size(mode) <= rem {
		why += ": " + sized(cfg.Sizes, mode) + " fits"
	} else {
		why += ": reflex, the floor"
	}
	return mode, why
}

func sized(s ModeSizes, m nmpv1.SystemMode) string {
	return ModeName(m) + " (" + strconv.FormatUint(s.Size(m), 10) + " tokens)"
}
