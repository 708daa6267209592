package nmp

import (
	"testing"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

func TestCheckSignalRanges(t *testing.T) {
	for _, s := range []Signal{Urgency, Quality, Inhibition, Activation, Focus} {
		for _, c := range []struct {
			v  Milli
			ok bool
		}{{-1, false}, {0, true}, {1, true}, {999, true}, {1000, true}, {1001, false}} {
			err := CheckSignal(s, c.v)
			if c.ok {
				if err != nil {
					t.Errorf("%s %d: %v", s, c.v, err)
				}
				continue
			}
			wantError(t, err, CodeOutOfRange, "signals."+s.String())
		}
	}
	for _, c := range []struct {
		v  Milli
		ok bool
	}{{-501, false}, {-500, true}, {-499, true}, {0, true}, {1000, true}, {1001, false}} {
		err := CheckSignal(Reward, c.v)
		if c.ok {
			if err != nil {
				t.Errorf("reward %d: %v", c.v, err)
			}
			continue
		}
		wantError(t, err, CodeOutOfRange, "signals.reward")
	}
	e := wantError(t, CheckSignal(Reward, -501), CodeOutOfRange, "signals.reward")
	if want := "signals.reward: -0.501 is outside [-0.5, 1.0]"; e.Message != want {
		t.Errorf("message %q, want %q", e.Message, want)
	}
	if got, want := e.Error(), "nmp: signals.reward: -0.501 is outside [-0.5, 1.0]"; got != want {
		t.Errorf("Error() %q, want %q", got, want)
	}
}

func TestGetSetSignals(t *testing.T) {
	sig := &nmpv1.Signals{}
	for i, s := range AllSignals() {
		Set(sig, s, Milli(100*(i+1)))
	}
	want := &nmpv1.Signals{UrgencyMilli: 100, QualityMilli: 200, InhibitionMilli: 300, ActivationMilli: 400, FocusMilli: 500, RewardMilli: 600}
	for _, s := range AllSignals() {
		if Get(sig, s) != Get(want, s) {
			t.Errorf("%s: %d, want %d", s, Get(sig, s), Get(want, s))
		}
	}
	if Get(nil, Urgency) != 0 {
		t.Error("nil signals do not read as zero")
	}
	if Signal(99).String() != "unknown" || Get(sig, Signal(99)) != 0 {
		t.Error("unknown signal")
	}
}

func TestValidateSignals(t *testing.T) {
	if err := ValidateSignals(nil); err != nil {
		t.Fatal(err)
	}
	if err := ValidateSignals(DefaultSignals()); err != nil {
		t.Fatal(err)
	}
	// The first error in README order wins.
	err := ValidateSignals(&nmpv1.Signals{QualityMilli: 1001, RewardMilli: -501})
	wantError(t, err, CodeOutOfRange, "signals.quality")
	wantError(t, ValidateSignals(&nmpv1.Signals{FocusMilli: -1}), CodeOutOfRange, "signals.focus")
}
