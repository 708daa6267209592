package nmp

import (
	"strings"
	"testing"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

const (
	none     = nmpv1.SystemMode_SYSTEM_MODE_UNSPECIFIED
	reflex   = nmpv1.SystemMode_SYSTEM_MODE_REFLEX
	fast     = nmpv1.SystemMode_SYSTEM_MODE_FAST
	standard = nmpv1.SystemMode_SYSTEM_MODE_STANDARD
	deep     = nmpv1.SystemMode_SYSTEM_MODE_DEEP
)

func TestParseMode(t *testing.T) {
	for name, want := range map[string]nmpv1.SystemMode{"reflex": reflex, "fast": fast, "standard": standard, "deep": deep} {
		got, err := ParseMode(name)
		if err != nil || got != want || ModeName(want) != name {
			t.Errorf("ParseMode(%q) = %v, %v", name, got, err)
		}
	}
	for _, bad := range []string{"turbo", "Standard", "STANDARD", "", " fast", "unspecified"} {
		_, err := ParseMode(bad)
		wantError(t, err, CodeInvalidMode, "budget.system_mode")
	}
	if ModeName(none) != "" || ModeName(9) != "" {
		t.Error("unspecified and unknown modes have no name")
	}
}

func TestSelectMode(t *testing.T) {
	cfg := DefaultModeConfig()
	for _, c := range []struct {
		name      string
		u, q      Milli
		requested nmpv1.SystemMode
		max, used uint64
		want      nmpv1.SystemMode
	}{
		{"optimal, none requested", 500, 500, none, 0, 0, standard},
		{"u 0.7 is not streamlined", 700, 0, standard, 0, 0, standard},
		{"u 0.7 keeps requested deep", 700, 0, deep, 0, 0, deep},
		{"u 0.701 streamlines to fast", 701, 0, standard, 0, 0, fast},
		{"u 0.701 even when deep requested", 701, 1000, deep, 0, 0, fast},
		{"u 0.9 is still fast", 900, 0, none, 0, 0, fast},
		{"u 0.901 is reflex", 901, 0, deep, 0, 0, reflex},
		{"u high but reflex requested", 800, 0, reflex, 0, 0, reflex},
		{"q 0.701, none requested: deep", 300, 701, none, 0, 0, deep},
		{"q 0.7, none requested: standard", 300, 700, none, 0, 0, standard},
		{"q high, u high: fast", 701, 1000, none, 0, 0, fast},
		{"q high but fast requested: a request is a ceiling", 100, 1000, fast, 0, 0, fast},
		{"requested reflex", 500, 500, reflex, 0, 0, reflex},
		{"deep does not fit 5000", 300, 900, none, 5000, 0, standard},
		{"requested deep, 5000 left", 500, 500, deep, 5000, 0, standard},
		{"standard fits exactly", 500, 500, standard, 5000, 2000, standard},
		{"standard needs 3000, 2999 left", 500, 500, standard, 5000, 2001, fast},
		{"fast needs 500, 499 left", 500, 500, standard, 5000, 4501, reflex},
		{"budget exhausted", 500, 500, deep, 5000, 5000, reflex},
		{"overspent", 500, 500, deep, 5000, 9000, reflex},
		{"unset limit does not constrain", 500, 500, deep, 0, 1 << 40, deep},
		{"unknown requested enum reads as none", 500, 500, 42, 0, 0, standard},
	} {
		sig := &nmpv1.Signals{UrgencyMilli: int32(c.u), QualityMilli: int32(c.q)}
		b := &nmpv1.Budget{MaxTokens: c.max, TokensUsed: c.used, SystemMode: c.requested}
		got, why := SelectMode(sig, b, cfg)
		if got != c.want {
			t.Errorf("%s: %s (%s), want %s", c.name, ModeName(got), why, ModeName(c.want))
		}
		if why == "" {
			t.Errorf("%s: no reason", c.name)
		}
	}
}

func TestSelectModeReasons(t *testing.T) {
	cfg := DefaultModeConfig()
	for _, c := range []struct {
		sig  *nmpv1.Signals
		b    *nmpv1.Budget
		want string
	}{
		{&nmpv1.Signals{UrgencyMilli: 950}, nil, "urgency 0.95 > 0.9: reflex (streamline, not more tokens)"},
		{&nmpv1.Signals{UrgencyMilli: 800}, &nmpv1.Budget{SystemMode: deep}, "urgency 0.8 > 0.7: fast (streamline, not more tokens)"},
		{&nmpv1.Signals{UrgencyMilli: 800}, &nmpv1.Budget{SystemMode: reflex},
			"urgency 0.8 > 0.7: fast (streamline, not more tokens); capped at the requested mode reflex"},
		{&nmpv1.Signals{UrgencyMilli: 400, QualityMilli: 800}, &nmpv1.Budget{MaxTokens: 8000, TokensUsed: 6000},
			"no mode requested; quality 0.8 > 0.7 with urgency 0.4 <= 0.7: deep; deep (10000 tokens) exceeds the remaining budget of 2000 tokens: fast (500 tokens) fits"},
		{nil, &nmpv1.Budget{MaxTokens: 100, SystemMode: standard}, "requested mode standard; standard (3000 tokens) exceeds the remaining budget of 100 tokens: reflex (0 tokens) fits"},
		{nil, nil, "no mode requested: standard"},
	} {
		_, why := SelectMode(c.sig, c.b, cfg)
		if why != c.want {
			t.Errorf("reason %q\nwant   %q", why, c.want)
		}
	}
	// A configured non-zero reflex size that does not fit still ends at the floor.
	cfg.Sizes.Reflex = 50
	m, why := SelectMode(nil, &nmpv1.Budget{MaxTokens: 10, SystemMode: standard}, cfg)
	if m != reflex || !strings.HasSuffix(why, ": reflex, the floor") {
		t.Errorf("got %s %q", ModeName(m), why)
	}
}

// TestSelectModeInvariants sweeps signals, requests and budgets.
func TestSelectModeInvariants(t *testing.T) {
	cfg := DefaultModeConfig()
	for u := Milli(0); u <= 1000; u += 50 {
		for q := Milli(0); q <= 1000; q += 100 {
			for req := none; req <= deep; req++ {
				for _, used := range []uint64{0, 1000, 4500, 4999, 5000, 6000} {
					for _, max := range []uint64{0, 5000, 20000} {
						b := &nmpv1.Budget{MaxTokens: max, TokensUsed: used, SystemMode: req}
						m, why := SelectMode(&nmpv1.Signals{UrgencyMilli: int32(u), QualityMilli: int32(q)}, b, cfg)
						if !validMode(m) {
							t.Fatalf("invalid mode %v", m)
						}
						if req != none && m > req {
							t.Fatalf("u %d q %d req %v: %v exceeds the request (%s)", u, q, req, m, why)
						}
						if rem, _ := Remaining(b); m != reflex && cfg.Sizes.Size(m) > rem {
							t.Fatalf("%v exceeds remaining %d (%s)", m, rem, why)
						}
						if u > 700 && m != fast && m != reflex {
							t.Fatalf("u %d selected %v (%s)", u, m, why)
						}
					}
				}
			}
		}
	}
}

func TestModeConfigValidate(t *testing.T) {
	if err := DefaultModeConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	c := DefaultModeConfig()
	c.Sizes.Fast = 4000
	wantError(t, c.Validate(), CodeInvalidConfig, "modes.sizes")
	c = DefaultModeConfig()
	c.ReflexAbove = 600
	wantError(t, c.Validate(), CodeInvalidConfig, "modes.reflex_above")
}
