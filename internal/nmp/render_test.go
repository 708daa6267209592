package nmp

import (
	"bytes"
	"encoding/json"
	"testing"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

func TestToJSONSample(t *testing.T) {
	h := &nmpv1.NmpHeader{
		Trust:   trusted,
		Signals: DefaultSignals(),
		Budget:  &nmpv1.Budget{MaxTokens: 5000, SystemMode: standard},
		Trace:   []*nmpv1.TraceEntry{{Service: "router", Action: "classified as high-urgency", Tokens: 42, DurationUs: 7, Trust: trusted, TrustReason: "x"}},
	}
	got, err := ToJSON(h)
	if err != nil {
		t.Fatal(err)
	}
	// The README sample, compacted.
	var want bytes.Buffer
	if err := json.Compact(&want, readSample(t)); err != nil {
		t.Fatal(err)
	}
	if string(got) != want.String() {
		t.Fatalf("got  %s\nwant %s", got, want.String())
	}
}

func TestToJSONForms(t *testing.T) {
	for _, c := range []struct {
		name string
		h    *nmpv1.NmpHeader
		want string
	}{
		{"empty: trust reads hostile", &nmpv1.NmpHeader{}, `{"nmp_message":{"trust":{"level":0}}}`},
		{"decimals from integers", &nmpv1.NmpHeader{Trust: verified, Signals: &nmpv1.Signals{UrgencyMilli: 701, QualityMilli: 50, RewardMilli: -500, FocusMilli: 1000}},
			`{"nmp_message":{"trust":{"level":2},"signals":{"urgency":0.701,"quality":0.05,"inhibition":0.0,"activation":0.0,"focus":1.0,"reward":-0.5}}}`},
		{"unset limit and mode omitted", &nmpv1.NmpHeader{Trust: hostile, Budget: &nmpv1.Budget{TokensUsed: 7}},
			`{"nmp_message":{"trust":{"level":0},"budget":{"tokens_used":7}}}`},
		{"strings escaped", &nmpv1.NmpHeader{Trust: untrusted, Trace: []*nmpv1.TraceEntry{{Service: "agent:a\"b", Action: "<x>"}}},
			`{"nmp_message":{"trust":{"level":1},"trace":[{"agent":"agent:a\"b","action":"\u003cx\u003e","tokens":0}]}}`},
	} {
		got, err := ToJSON(c.h)
		if err != nil || string(got) != c.want {
			t.Errorf("%s: %s %v\nwant %s", c.name, got, err, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("%s: invalid JSON", c.name)
		}
	}
}

func TestToJSONErrors(t *testing.T) {
	_, err := ToJSON(nil)
	wantError(t, err, CodeMalformed, "")
	_, err = ToJSON(&nmpv1.NmpHeader{Signals: &nmpv1.Signals{UrgencyMilli: 1001}})
	wantError(t, err, CodeOutOfRange, "signals.urgency")
	_, err = ToJSON(&nmpv1.NmpHeader{Trust: 5})
	wantError(t, err, CodeInvalidTrust, "trust.level")
	_, err = ToJSON(&nmpv1.NmpHeader{Budget: &nmpv1.Budget{SystemMode: 5}})
	wantError(t, err, CodeInvalidMode, "budget.system_mode")
	_, err = ToJSON(&nmpv1.NmpHeader{Trace: []*nmpv1.TraceEntry{{Service: "x", Trust: -1}}})
	wantError(t, err, CodeInvalidTrust, "trace[0].trust")
}

// ToJSON's output reads back through ParseAgentHeader to the same values.
func TestToJSONParsesBack(t *testing.T) {
	h := &nmpv1.NmpHeader{Trust: verified, Signals: &nmpv1.Signals{UrgencyMilli: 333, RewardMilli: -1},
		Budget: &nmpv1.Budget{MaxTokens: 8000, TokensUsed: 142, SystemMode: fast},
		Trace:  []*nmpv1.TraceEntry{{Service: "ingress", Action: "accept"}, {Service: "agent:router", Tokens: 142}}}
	out, err := ToJSON(h)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseAgentHeader(out, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Trust != verified || *a.Signals.Urgency != 333 || *a.Signals.Reward != -1 || *a.Signals.Focus != 0 ||
		*a.Budget.MaxTokens != 8000 || *a.Budget.TokensUsed != 142 || a.Budget.SystemMode != fast ||
		len(a.Trace) != 2 || a.Trace[1] != (AgentTraceEntry{Agent: "agent:router", Tokens: 142}) {
		t.Fatalf("%+v", a)
	}
}
