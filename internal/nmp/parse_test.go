package nmp

import (
	"reflect"
	"strings"
	"testing"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

func sampleHeader() *AgentHeader {
	return &AgentHeader{
		Trust: trusted,
		Signals: AgentSignals{
			Urgency: ptr[Milli](500), Quality: ptr[Milli](500), Inhibition: ptr[Milli](0),
			Activation: ptr[Milli](500), Focus: ptr[Milli](500), Reward: ptr[Milli](0),
		},
		Budget: AgentBudget{MaxTokens: ptr[uint64](5000), TokensUsed: ptr[uint64](0), SystemMode: standard},
		Trace:  []AgentTraceEntry{{Agent: "router", Action: "classified as high-urgency", Tokens: 42}},
	}
}

func TestParseSampleWrappedAndBare(t *testing.T) {
	wrapped := readSample(t)
	h, err := ParseAgentHeader(wrapped, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h, sampleHeader()) {
		t.Fatalf("got %+v", h)
	}
	bare := `{"trust":{"level":3},"signals":{"urgency":0.5,"quality":0.5,"inhibition":0.0,"activation":0.5,"focus":0.5,"reward":0.0},
		"budget":{"max_tokens":5000,"tokens_used":0,"system_mode":"standard"},
		"trace":[{"agent":"router","action":"classified as high-urgency","tokens":42}]}`
	h2, err := ParseAgentHeader([]byte(bare), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h2, h) {
		t.Fatalf("bare form differs: %+v", h2)
	}
}

func TestParseAccepts(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     *AgentHeader
	}{
		{"empty", `{}`, &AgentHeader{}},
		{"empty wrapped", ` {"nmp_message":{}} `, &AgentHeader{}},
		{"null wrapper", `{"nmp_message":null}`, &AgentHeader{}},
		{"nulls are absent", `{"trust":null,"signals":{"urgency":null},"budget":{"max_tokens":null,"system_mode":null},"trace":null}`, &AgentHeader{}},
		{"level null", `{"trust":{"level":null}}`, &AgentHeader{}},
		{"hostile", `{"trust":{"level":0}}`, &AgentHeader{Trust: hostile}},
		{"exponent and rounding", `{"signals":{"urgency":7e-1,"quality":0.30000000000000004,"reward":-5E-1}}`,
			&AgentHeader{Signals: AgentSignals{Urgency: ptr[Milli](700), Quality: ptr[Milli](300), Reward: ptr[Milli](-500)}}},
		{"rounds into range", `{"signals":{"focus":1.0004}}`, &AgentHeader{Signals: AgentSignals{Focus: ptr[Milli](1000)}}},
		{"max_tokens 0 is kept as said", `{"budget":{"max_tokens":0}}`, &AgentHeader{Budget: AgentBudget{MaxTokens: ptr[uint64](0)}}},
		{"big tokens", `{"budget":{"tokens_used":18446744073709551615}}`, &AgentHeader{Budget: AgentBudget{TokensUsed: ptr[uint64](18446744073709551615)}}},
		{"trace defaults", `{"trace":[{"agent":"a"},{"agent":"b","action":"","tokens":0}]}`,
			&AgentHeader{Trace: []AgentTraceEntry{{Agent: "a"}, {Agent: "b"}}}},
		{"empty trace", `{"trace":[]}`, &AgentHeader{}},
		{"unicode", `{"trace":[{"agent":"r\u00e9sum\u00e9","action":"日本語 <ok> & \"quoted\""}]}`,
			&AgentHeader{Trace: []AgentTraceEntry{{Agent: "résumé", Action: `日本語 <ok> & "quoted"`}}}},
	} {
		got, err := ParseAgentHeader([]byte(c.in), Limits{})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestParseRejects(t *testing.T) {
	long := strings.Repeat("x", 257)
	var many strings.Builder
	many.WriteString(`{"trace":[`)
	for i := range 33 {
		if i > 0 {
			many.WriteByte(',')
		}
		many.WriteString(`{"agent":"a"}`)
	}
	many.WriteString(`]}`)
	for _, c := range []struct {
		name, in, code, field string
	}{
		{"trust 4", `{"nmp_message":{"trust":{"level":4}}}`, CodeInvalidTrust, "trust.level"},
		{"trust -1", `{"trust":{"level":-1}}`, CodeInvalidTrust, "trust.level"},
		{"trust 2.0", `{"trust":{"level":2.0}}`, CodeInvalidTrust, "trust.level"},
		{"trust 2e0", `{"trust":{"level":2e0}}`, CodeInvalidTrust, "trust.level"},
		{"trust huge", `{"trust":{"level":99999999999999999999}}`, CodeInvalidTrust, "trust.level"},
		{"trust string", `{"trust":{"level":"2"}}`, CodeMalformed, "trust.level"},
		{"trust name", `{"trust":{"level":"verified"}}`, CodeMalformed, "trust.level"},
		{"trust not object", `{"trust":3}`, CodeMalformed, "trust"},
		{"mode turbo", `{"budget":{"system_mode":"turbo"}}`, CodeInvalidMode, "budget.system_mode"},
		{"mode case", `{"budget":{"system_mode":"Standard"}}`, CodeInvalidMode, "budget.system_mode"},
		{"mode number", `{"budget":{"system_mode":3}}`, CodeMalformed, "budget.system_mode"},
		{"urgency 1.01", `{"signals":{"urgency":1.01}}`, CodeOutOfRange, "signals.urgency"},
		{"urgency -0.01", `{"signals":{"urgency":-0.01}}`, CodeOutOfRange, "signals.urgency"},
		{"reward -0.51", `{"signals":{"reward":-0.51}}`, CodeOutOfRange, "signals.reward"},
		{"reward 1e3", `{"signals":{"reward":1e3}}`, CodeOutOfRange, "signals.reward"},
		{"signal huge", `{"signals":{"focus":1e999}}`, CodeOutOfRange, "signals.focus"},
		{"urgency string", `{"signals":{"urgency":"0.5"}}`, CodeMalformed, "signals.urgency"},
		{"urgency bool", `{"signals":{"urgency":true}}`, CodeMalformed, "signals.urgency"},
		{"urgency NaN", `{"signals":{"urgency":NaN}}`, CodeMalformed, "signals.urgency"},
		{"urgency Infinity", `{"signals":{"urgency":Infinity}}`, CodeMalformed, "signals.urgency"},
		{"urgency +1", `{"signals":{"urgency":+1}}`, CodeMalformed, "signals.urgency"},
		{"key case", `{"signals":{"Urgency":0.5}}`, CodeUnknownField, "signals.Urgency"},
		{"unknown top", `{"trust":{"level":1},"extra":1}`, CodeUnknownField, "extra"},
		{"unknown in wrapper", `{"nmp_message":{"content":"x"}}`, CodeUnknownField, "content"},
		{"unknown trace key", `{"trace":[{"agent":"a","service":"x"}]}`, CodeUnknownField, "trace[0].service"},
		{"unknown budget key", `{"budget":{"max_token":1}}`, CodeUnknownField, "budget.max_token"},
		{"duplicate trust", `{"trust":{"level":0},"trust":{"level":3}}`, CodeMalformed, "trust"},
		{"duplicate level", `{"trust":{"level":0,"level":3}}`, CodeMalformed, "trust.level"},
		{"duplicate wrapper", `{"nmp_message":{},"nmp_message":{}}`, CodeMalformed, "nmp_message"},
		{"mixed forms", `{"nmp_message":{"trust":{"level":1}},"trust":{"level":3}}`, CodeMalformed, ""},
		{"mixed forms reversed", `{"budget":{},"nmp_message":{}}`, CodeMalformed, ""},
		{"two objects", `{}{}`, CodeMalformed, ""},
		{"trailing garbage", `{} x`, CodeMalformed, ""},
		{"array", `[]`, CodeMalformed, ""},
		{"null", `null`, CodeMalformed, ""},
		{"empty", ``, CodeMalformed, ""},
		{"truncated", `{"trust":{"level":1}`, CodeMalformed, ""},
		{"syntax", `{"trust" {"level":1}}`, CodeMalformed, "trust"},
		{"invalid UTF-8", "{\"trace\":[{\"agent\":\"\xff\"}]}", CodeMalformed, ""},
		{"too large", `{"trace":[{"agent":"` + strings.Repeat("a", 16<<10) + `"}]}`, CodeTooLarge, ""},
		{"too many entries", many.String(), CodeTooLarge, "trace"},
		{"long agent", `{"trace":[{"agent":"` + long + `"}]}`, CodeTooLarge, "trace[0].agent"},
		{"long action", `{"trace":[{"agent":"a","action":"` + long + `"}]}`, CodeTooLarge, "trace[0].action"},
		{"long number", `{"budget":{"max_tokens":` + strings.Repeat("1", 33) + `}}`, CodeTooLarge, "budget.max_tokens"},
		{"long signal", `{"signals":{"urgency":0.` + strings.Repeat("1", 31) + `}}`, CodeTooLarge, "signals.urgency"},
		{"tokens -1", `{"trace":[{"agent":"a","tokens":-1}]}`, CodeOutOfRange, "trace[0].tokens"},
		{"tokens 1.5", `{"budget":{"tokens_used":1.5}}`, CodeMalformed, "budget.tokens_used"},
		{"tokens 5e3", `{"budget":{"max_tokens":5e3}}`, CodeMalformed, "budget.max_tokens"},
		{"tokens overflow", `{"budget":{"max_tokens":18446744073709551616}}`, CodeOutOfRange, "budget.max_tokens"},
		{"tokens string", `{"budget":{"max_tokens":"5000"}}`, CodeMalformed, "budget.max_tokens"},
		{"agent missing", `{"trace":[{"action":"x"}]}`, CodeMalformed, "trace[0].agent"},
		{"agent empty", `{"trace":[{"agent":""}]}`, CodeMalformed, "trace[0].agent"},
		{"agent null", `{"trace":[{"agent":null}]}`, CodeMalformed, "trace[0].agent"},
		{"entry null", `{"trace":[null]}`, CodeMalformed, "trace[0]"},
		{"entry not object", `{"trace":["a"]}`, CodeMalformed, "trace[0]"},
		{"trace not array", `{"trace":{}}`, CodeMalformed, "trace"},
		{"control char", `{"trace":[{"agent":"a","action":"x\ny"}]}`, CodeMalformed, "trace[0].action"},
		{"escaped NUL", `{"trace":[{"agent":"a\u0000"}]}`, CodeMalformed, "trace[0].agent"},
		{"C1 control", `{"trace":[{"agent":"a\u0085"}]}`, CodeMalformed, "trace[0].agent"},
		{"lone surrogate", `{"trace":[{"agent":"a\ud800"}]}`, CodeMalformed, "trace[0].agent"},
		{"second entry", `{"trace":[{"agent":"a"},{"agent":"b","tokens":"1"}]}`, CodeMalformed, "trace[1].tokens"},
	} {
		_, err := ParseAgentHeader([]byte(c.in), Limits{})
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		e, ok := err.(*Error)
		if !ok || e.Code != c.code || e.Field != c.field {
			t.Errorf("%s: %#v, want %s at %q", c.name, err, c.code, c.field)
		}
	}
}

func TestParseLimits(t *testing.T) {
	in := []byte(`{"trace":[{"agent":"abcd"},{"agent":"b"}]}`)
	if _, err := ParseAgentHeader(in, Limits{MaxStringBytes: 4, MaxTraceEntries: 2}); err != nil {
		t.Fatalf("at the limits: %v", err)
	}
	_, err := ParseAgentHeader(in, Limits{MaxStringBytes: 3})
	wantError(t, err, CodeTooLarge, "trace[0].agent")
	_, err = ParseAgentHeader(in, Limits{MaxTraceEntries: 1})
	wantError(t, err, CodeTooLarge, "trace")
	_, err = ParseAgentHeader(in, Limits{MaxBytes: len(in) - 1})
	wantError(t, err, CodeTooLarge, "")
	if _, err := ParseAgentHeader(in, Limits{MaxBytes: len(in)}); err != nil {
		t.Fatalf("exactly MaxBytes: %v", err)
	}
}

func TestParseErrorMessages(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"trust":{"level":4}}`, "trust.level: 4 is not a trust level (0 hostile, 1 untrusted, 2 verified, 3 trusted)"},
		{`{"signals":{"urgency":1.01}}`, "signals.urgency: 1.01 is outside [0.0, 1.0]"},
		{`{"budget":{"system_mode":"turbo"}}`, `budget.system_mode: "turbo" is not a system mode (reflex, fast, standard, deep)`},
		{`{"signals":{"Urgency":1}}`, `signals.Urgency: unknown key "Urgency" (keys are case-sensitive; expected one of urgency, quality, inhibition, activation, focus, reward)`},
	} {
		_, err := ParseAgentHeader([]byte(c.in), Limits{})
		if err == nil || err.(*Error).Message != c.want {
			t.Errorf("%s: %v\nwant %s", c.in, err, c.want)
		}
	}
}

func TestAgentHeaderMarshalJSON(t *testing.T) {
	got, err := sampleHeader().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"nmp_message":{"trust":{"level":3},"signals":{"urgency":0.5,"quality":0.5,"inhibition":0.0,"activation":0.5,"focus":0.5,"reward":0.0},` +
		`"budget":{"max_tokens":5000,"tokens_used":0,"system_mode":"standard"},"trace":[{"agent":"router","action":"classified as high-urgency","tokens":42}]}}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	empty, _ := (&AgentHeader{}).MarshalJSON()
	if string(empty) != `{"nmp_message":{}}` {
		t.Fatalf("empty: %s", empty)
	}
	back, err := ParseAgentHeader(got, Limits{})
	if err != nil || !reflect.DeepEqual(back, sampleHeader()) {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}

func TestTrustCap(t *testing.T) {
	l, why := (&AgentHeader{Trust: untrusted}).TrustCap()
	if l != untrusted || why != "the agent's NMP header declares trust untrusted(1)" {
		t.Fatalf("%v %q", l, why)
	}
	var nilHeader *AgentHeader
	if l, why := nilHeader.TrustCap(); l != nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED || why != "" {
		t.Fatalf("%v %q", l, why)
	}
}
