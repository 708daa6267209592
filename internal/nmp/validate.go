package nmp

import (
	"strconv"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

// Validate checks a header built or received by the broker: known trust and
// mode enums and signals within range. Unspecified trust and mode are valid
// (they read as hostile and "no mode requested"). nil is valid (no header).
func Validate(h *nmpv1.NmpHeader) error {
	if h == nil {
		return nil
	}
	if !validTrustEnum(h.GetTrust()) {
		return newError(CodeInvalidTrust, "trust.level", "unknown trust enum "+strconv.Itoa(int(h.GetTrust())))
	}
	if err := ValidateSignals(h.GetSignals()); err != nil {
		return err
	}
	if m := h.GetBudget().GetSystemMode(); m != nmpv1.SystemMode_SYSTEM_MODE_UNSPECIFIED && !validMode(m) {
		return newError(CodeInvalidMode, "budget.system_mode", "unknown system mode enum "+strconv.Itoa(int(m)))
	}
	for i, e := range h.GetTrace() {
		if !validTrustEnum(e.GetTrust()) {
			return newError(CodeInvalidTrust, "trace["+strconv.Itoa(i)+"].trust", "unknown trust enum "+strconv.Itoa(int(e.GetTrust())))
		}
	}
	return nil
}

func validTrustEnum(l nmpv1.TrustLevel) bool {
	return l >= nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED && l <= nmpv1.TrustLevel_TRUST_LEVEL_TRUSTED
}
