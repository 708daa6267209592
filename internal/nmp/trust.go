package nmp

import (
	"strconv"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

// Effective is the trust a level stands for. Unspecified (no trust-setting
// point filled it in) and any number outside the enum read as hostile: fail
// closed, so a missing or corrupt level can never count as trust.
func Effective(l nmpv1.TrustLevel) nmpv1.TrustLevel {
	if l < nmpv1.TrustLevel_TRUST_LEVEL_HOSTILE || l > nmpv1.TrustLevel_TRUST_LEVEL_TRUSTED {
		return nmpv1.TrustLevel_TRUST_LEVEL_HOSTILE
	}
	return l
}

// Lower is NMP's forwarding rule, level = min(level, new_trust), on effective
// levels: the result is never above current, HOSTILE stays HOSTILE, and an
// unspecified current reads as hostile (so it also yields HOSTILE). lowered
// reports whether the result is below the effective current level.
//
// Lower only caps. Setting trust from a credential is the job of the
// trust-setting points (envelope.Hop.SetTrust), never of this rule.
func Lower(current, proposed nmpv1.TrustLevel) (result nmpv1.TrustLevel, lowered bool) {
	c, p := Effective(current), Effective(proposed)
	if p < c {
		return p, true
	}
	return c, false
}

// TrustFromNMP maps the NMP scale (0 hostile, 1 untrusted, 2 verified,
// 3 trusted) to the protobuf enum, which is shifted by one.
func TrustFromNMP(v int64) (nmpv1.TrustLevel, error) {
	if v < 0 || v > 3 {
		return 0, newError(CodeInvalidTrust, "trust.level",
			strconv.FormatInt(v, 10)+" is not a trust level (0 hostile, 1 untrusted, 2 verified, 3 trusted)")
	}
	return nmpv1.TrustLevel(v + 1), nil
}

// TrustToNMP maps the enum to the NMP scale, reading it as Effective does.
func TrustToNMP(l nmpv1.TrustLevel) int {
	return int(Effective(l)) - 1
}

// TrustName is the lower-case NMP name with its number, as used in messages:
// "verified(2)". Unspecified and unknown levels say how they are read.
func TrustName(l nmpv1.TrustLevel) string {
	names := [...]string{"hostile", "untrusted", "verified", "trusted"}
	e := Effective(l)
	s := names[e-1] + "(" + strconv.Itoa(int(e)-1) + ")"
	switch {
	case l == nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED:
		return "unset, read as " + s
	case e != l:
		return "invalid level " + strconv.Itoa(int(l)) + ", read as " + s
	}
	return s
}
