package nmp

import (
	"testing"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

const (
	unspec    = nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED
	hostile   = nmpv1.TrustLevel_TRUST_LEVEL_HOSTILE
	untrusted = nmpv1.TrustLevel_TRUST_LEVEL_UNTRUSTED
	verified  = nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED
	trusted   = nmpv1.TrustLevel_TRUST_LEVEL_TRUSTED
)

func TestLowerMatrix(t *testing.T) {
	levels := []nmpv1.TrustLevel{unspec, hostile, untrusted, verified, trusted, 9, -1}
	for _, cur := range levels {
		for _, prop := range levels {
			got, lowered := Lower(cur, prop)
			c, p := Effective(cur), Effective(prop)
			want := min(c, p)
			if got != want || lowered != (p < c) {
				t.Errorf("Lower(%v, %v) = %v, %v; want %v, %v", cur, prop, got, lowered, want, p < c)
			}
			if got > c {
				t.Errorf("Lower(%v, %v) raised trust to %v", cur, prop, got)
			}
		}
	}
	// The cases spelled out.
	for _, c := range []struct {
		cur, prop, want nmpv1.TrustLevel
		lowered         bool
	}{
		{trusted, untrusted, untrusted, true},
		{untrusted, trusted, untrusted, false},
		{hostile, trusted, hostile, false},
		{hostile, hostile, hostile, false},
		{unspec, trusted, hostile, false},
		{verified, unspec, hostile, true},
		{verified, verified, verified, false},
	} {
		got, lowered := Lower(c.cur, c.prop)
		if got != c.want || lowered != c.lowered {
			t.Errorf("Lower(%v, %v) = %v, %v; want %v, %v", c.cur, c.prop, got, lowered, c.want, c.lowered)
		}
	}
}

func TestTrustNMPScale(t *testing.T) {
	for v, want := range []nmpv1.TrustLevel{hostile, untrusted, verified, trusted} {
		got, err := TrustFromNMP(int64(v))
		if err != nil || got != want {
			t.Errorf("TrustFromNMP(%d) = %v, %v", v, got, err)
		}
		if TrustToNMP(want) != v {
			t.Errorf("TrustToNMP(%v) = %d, want %d", want, TrustToNMP(want), v)
		}
	}
	for _, v := range []int64{-1, 4, 1 << 40} {
		_, err := TrustFromNMP(v)
		wantError(t, err, CodeInvalidTrust, "trust.level")
	}
	if TrustToNMP(unspec) != 0 || TrustToNMP(42) != 0 {
		t.Error("unspecified and unknown levels must map to hostile (0)")
	}
}

func TestTrustName(t *testing.T) {
	for l, want := range map[nmpv1.TrustLevel]string{
		hostile: "hostile(0)", untrusted: "untrusted(1)", verified: "verified(2)", trusted: "trusted(3)",
		unspec: "unset, read as hostile(0)", 7: "invalid level 7, read as hostile(0)",
	} {
		if got := TrustName(l); got != want {
			t.Errorf("TrustName(%d) = %q, want %q", l, got, want)
		}
	}
}
