package nmp

import (
	"reflect"
	"testing"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

func kinds(cs []Conflict) []ConflictKind {
	var out []ConflictKind
	for _, c := range cs {
		out = append(out, c.Kind)
	}
	return out
}

func TestDetectThresholds(t *testing.T) {
	r := DefaultRules()
	for _, c := range []struct {
		name string
		sig  *nmpv1.Signals
		want []ConflictKind
	}{
		// CONFLICT: urgency > 0.7 AND quality > 0.7, strictly.
		{"u700 q700", &nmpv1.Signals{UrgencyMilli: 700, QualityMilli: 700}, nil},
		{"u701 q700", &nmpv1.Signals{UrgencyMilli: 701, QualityMilli: 700}, nil},
		{"u700 q701", &nmpv1.Signals{UrgencyMilli: 700, QualityMilli: 701}, nil},
		{"u701 q701", &nmpv1.Signals{UrgencyMilli: 701, QualityMilli: 701}, []ConflictKind{KindConflict}},
		// INCONSISTENCY: inhibition > 0.5 AND activation > 0.5.
		{"i500 a500", &nmpv1.Signals{InhibitionMilli: 500, ActivationMilli: 500}, nil},
		{"i501 a500", &nmpv1.Signals{InhibitionMilli: 501, ActivationMilli: 500}, nil},
		{"i500 a501", &nmpv1.Signals{InhibitionMilli: 500, ActivationMilli: 501}, nil},
		{"i501 a501", &nmpv1.Signals{InhibitionMilli: 501, ActivationMilli: 501}, []ConflictKind{KindInconsistency}},
		// RISK: urgency > 0.7 AND reward > 0.7.
		{"u700 r700", &nmpv1.Signals{UrgencyMilli: 700, RewardMilli: 700}, nil},
		{"u701 r700", &nmpv1.Signals{UrgencyMilli: 701, RewardMilli: 700}, nil},
		{"u700 r701", &nmpv1.Signals{UrgencyMilli: 700, RewardMilli: 701}, nil},
		{"u701 r701", &nmpv1.Signals{UrgencyMilli: 701, RewardMilli: 701}, []ConflictKind{KindRisk}},
		{"u701 r-500", &nmpv1.Signals{UrgencyMilli: 701, RewardMilli: -500}, nil},
		// All three at once, in the fixed order.
		{"all", &nmpv1.Signals{UrgencyMilli: 1000, QualityMilli: 1000, InhibitionMilli: 1000, ActivationMilli: 1000, RewardMilli: 1000},
			[]ConflictKind{KindConflict, KindInconsistency, KindRisk}},
		// The README's neutral example and the package example (0.4/0.8) have none.
		{"defaults", DefaultSignals(), nil},
		{"readme usage", &nmpv1.Signals{UrgencyMilli: 400, QualityMilli: 800, FocusMilli: 700}, nil},
		{"nil", nil, nil},
	} {
		if got := kinds(Detect(c.sig, r)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestDetectMessages(t *testing.T) {
	got := Detect(&nmpv1.Signals{UrgencyMilli: 800, QualityMilli: 900, InhibitionMilli: 600, ActivationMilli: 550, RewardMilli: 750}, DefaultRules())
	want := []Conflict{
		{KindConflict, "urgency 0.8 > 0.7 and quality 0.9 > 0.7: speed vs depth"},
		{KindInconsistency, "inhibition 0.6 > 0.5 and activation 0.55 > 0.5: co-contraction"},
		{KindRisk, "urgency 0.8 > 0.7 and reward 0.75 > 0.7: impulsive decision"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
}

// Each rule's thresholds are its own: moving RISK's urgency does not move
// CONFLICT's.
func TestDetectCustomRules(t *testing.T) {
	r := DefaultRules()
	r.RiskUrgency = 900
	sig := &nmpv1.Signals{UrgencyMilli: 800, QualityMilli: 800, RewardMilli: 800}
	if got := kinds(Detect(sig, r)); !reflect.DeepEqual(got, []ConflictKind{KindConflict}) {
		t.Fatalf("got %v", got)
	}
	r.ConflictQuality = 800
	if got := kinds(Detect(sig, r)); got != nil {
		t.Fatalf("got %v, want none at quality == threshold", got)
	}
}
