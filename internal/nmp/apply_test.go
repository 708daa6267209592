package nmp

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

func reasons(ig []Ignored) []string {
	var out []string
	for _, i := range ig {
		out = append(out, i.String())
	}
	return out
}

func TestApplyTrust(t *testing.T) {
	for _, c := range []struct {
		cur, agent, want nmpv1.TrustLevel
		ignored          []string
	}{
		{trusted, untrusted, untrusted, nil},
		{verified, trusted, verified, []string{"trust level 3 ignored: cannot raise trust above verified(2) set by the broker"}},
		{untrusted, trusted, untrusted, []string{"trust level 3 ignored: cannot raise trust above untrusted(1) set by the broker"}},
		{hostile, trusted, hostile, []string{"trust level 3 ignored: cannot raise trust above hostile(0) set by the broker"}},
		{hostile, hostile, hostile, nil},
		{verified, verified, verified, nil},
		{unspec, verified, unspec, []string{"trust level 2 ignored: the broker has not set trust, which reads as hostile(0); an agent cannot raise it"}},
		{unspec, hostile, unspec, nil},
		{trusted, unspec, trusted, nil}, // no claim
	} {
		got, ig := Apply(&nmpv1.NmpHeader{Trust: c.cur}, &AgentHeader{Trust: c.agent}, DefaultConfig())
		if got.Trust != c.want || !reflect.DeepEqual(reasons(ig), c.ignored) {
			t.Errorf("%v + agent %v = %v %q; want %v %q", c.cur, c.agent, got.Trust, reasons(ig), c.want, c.ignored)
		}
	}
}

func TestApplyBudget(t *testing.T) {
	cfg := DefaultConfig()
	for _, c := range []struct {
		name    string
		cur     *nmpv1.Budget
		agent   AgentBudget
		want    *nmpv1.Budget
		ignored []string
	}{
		{"raise refused", &nmpv1.Budget{MaxTokens: 5000}, AgentBudget{MaxTokens: ptr[uint64](6000)},
			&nmpv1.Budget{MaxTokens: 5000}, []string{"max_tokens 6000 ignored: cannot raise the limit above 5000 (decrease-only)"}},
		{"lower taken", &nmpv1.Budget{MaxTokens: 5000}, AgentBudget{MaxTokens: ptr[uint64](4000)}, &nmpv1.Budget{MaxTokens: 4000}, nil},
		{"equal", &nmpv1.Budget{MaxTokens: 5000}, AgentBudget{MaxTokens: ptr[uint64](5000)}, &nmpv1.Budget{MaxTokens: 5000}, nil},
		{"unset limit takes the agent's", nil, AgentBudget{MaxTokens: ptr[uint64](6000)}, &nmpv1.Budget{MaxTokens: 6000}, nil},
		{"0 cannot lift", &nmpv1.Budget{MaxTokens: 5000}, AgentBudget{MaxTokens: ptr[uint64](0)},
			&nmpv1.Budget{MaxTokens: 5000}, []string{"max_tokens 0 ignored: 0 means no limit, and the limit of 5000 cannot be lifted"}},
		{"0 on unset is nothing", nil, AgentBudget{MaxTokens: ptr[uint64](0)}, nil, nil},
		{"tokens_used grows", &nmpv1.Budget{TokensUsed: 100}, AgentBudget{TokensUsed: ptr[uint64](500)}, &nmpv1.Budget{TokensUsed: 500}, nil},
		{"tokens_used never falls", &nmpv1.Budget{TokensUsed: 142}, AgentBudget{TokensUsed: ptr[uint64](10)},
			&nmpv1.Budget{TokensUsed: 142}, []string{"tokens_used 10 ignored: the running total is already 142 and never decreases"}},
		{"mode lowered", &nmpv1.Budget{SystemMode: standard}, AgentBudget{SystemMode: fast}, &nmpv1.Budget{SystemMode: fast}, nil},
		{"mode raise refused", &nmpv1.Budget{SystemMode: standard}, AgentBudget{SystemMode: deep},
			&nmpv1.Budget{SystemMode: standard}, []string{"system_mode deep ignored: cannot raise the mode above standard"}},
		{"mode taken when none", nil, AgentBudget{SystemMode: deep}, &nmpv1.Budget{SystemMode: deep}, nil},
		{"mode taken over an unknown enum", &nmpv1.Budget{SystemMode: 9}, AgentBudget{SystemMode: reflex}, &nmpv1.Budget{SystemMode: reflex}, nil},
		{"all at once", &nmpv1.Budget{MaxTokens: 5000, TokensUsed: 200, SystemMode: standard},
			AgentBudget{MaxTokens: ptr[uint64](9000), TokensUsed: ptr[uint64](100), SystemMode: deep},
			&nmpv1.Budget{MaxTokens: 5000, TokensUsed: 200, SystemMode: standard}, []string{
				"max_tokens 9000 ignored: cannot raise the limit above 5000 (decrease-only)",
				"system_mode deep ignored: cannot raise the mode above standard",
				"tokens_used 100 ignored: the running total is already 200 and never decreases"}},
	} {
		got, ig := Apply(&nmpv1.NmpHeader{Trust: verified, Budget: c.cur}, &AgentHeader{Budget: c.agent}, cfg)
		if !proto.Equal(got.Budget, c.want) || !reflect.DeepEqual(reasons(ig), c.ignored) {
			t.Errorf("%s: budget %v %q; want %v %q", c.name, got.Budget, reasons(ig), c.want, c.ignored)
		}
	}
}

func TestApplyIgnoredFields(t *testing.T) {
	_, ig := Apply(&nmpv1.NmpHeader{Trust: untrusted, Budget: &nmpv1.Budget{MaxTokens: 1, TokensUsed: 5, SystemMode: reflex}},
		&AgentHeader{Trust: trusted, Budget: AgentBudget{MaxTokens: ptr[uint64](2), TokensUsed: ptr[uint64](1), SystemMode: deep}},
		DefaultConfig())
	var fields []string
	for _, i := range ig {
		fields = append(fields, i.Field)
	}
	if want := []string{"trust.level", "budget.max_tokens", "budget.system_mode", "budget.tokens_used"}; !reflect.DeepEqual(fields, want) {
		t.Fatalf("fields %v, want %v", fields, want)
	}
}

func TestApplySignals(t *testing.T) {
	cur := &nmpv1.NmpHeader{Signals: &nmpv1.Signals{UrgencyMilli: 100, FocusMilli: 900}}
	agent := &AgentHeader{Signals: AgentSignals{Urgency: ptr[Milli](800), Reward: ptr[Milli](-500)}}
	got, ig := Apply(cur, agent, DefaultConfig())
	want := &nmpv1.Signals{UrgencyMilli: 800, FocusMilli: 900, RewardMilli: -500}
	if !proto.Equal(got.Signals, want) || ig != nil {
		t.Fatalf("signals %v %v", got.Signals, ig)
	}
	cfg := DefaultConfig()
	cfg.IgnoreAgentSignals = true
	got, ig = Apply(cur, agent, cfg)
	if !proto.Equal(got.Signals, cur.Signals) || !reflect.DeepEqual(reasons(ig), []string{"signals ignored: this broker takes no signals from agents"}) {
		t.Fatalf("signals %v %q", got.Signals, reasons(ig))
	}
	got, _ = Apply(nil, agent, DefaultConfig())
	if !proto.Equal(got.Signals, &nmpv1.Signals{UrgencyMilli: 800, RewardMilli: -500}) {
		t.Fatalf("signals on an empty header %v", got.Signals)
	}
}

func TestApplyTrace(t *testing.T) {
	cur := &nmpv1.NmpHeader{Trust: untrusted, Budget: &nmpv1.Budget{MaxTokens: 5000, TokensUsed: 100},
		Trace: []*nmpv1.TraceEntry{{Service: "ingress", Action: "accept", Trust: verified}}}
	agent := &AgentHeader{Trust: verified, Trace: []AgentTraceEntry{
		{Agent: "router", Action: "classified", Tokens: 42}, {Agent: "planner", Tokens: 100}}}
	got, ig := Apply(cur, agent, DefaultConfig())
	if len(ig) != 1 || ig[0].Field != "trust.level" {
		t.Fatalf("ignored %q", reasons(ig))
	}
	want := []*nmpv1.TraceEntry{
		{Service: "ingress", Action: "accept", Trust: verified},
		{Service: AgentService, Trust: untrusted, Tokens: 42},
		{Service: AgentService, Trust: untrusted, Tokens: 100},
	}
	if len(got.Trace) != len(want) {
		t.Fatalf("trace %v", got.Trace)
	}
	for i := range want {
		if !proto.Equal(got.Trace[i], want[i]) {
			t.Errorf("trace[%d] = %v, want %v", i, got.Trace[i], want[i])
		}
	}
	if got.Budget.TokensUsed != 242 {
		t.Errorf("tokens_used %d, want 242", got.Budget.TokensUsed)
	}
	// The header travels in the clear: none of the agent's words are in it.
	if text := prototext.Format(got); strings.Contains(text, "router") || strings.Contains(text, "planner") || strings.Contains(text, "classified") {
		t.Errorf("the agent's free text reached the header: %s", text)
	}
	// The agent's tokens_used is compared with the total after its trace.
	agent.Budget.TokensUsed = ptr[uint64](200)
	got, ig = Apply(cur, agent, DefaultConfig())
	if got.Budget.TokensUsed != 242 || ig[len(ig)-1].Reason != "tokens_used 200 ignored: the running total is already 242 and never decreases" {
		t.Errorf("tokens_used %d, %q", got.Budget.TokensUsed, reasons(ig))
	}
}

func TestApplyTraceBound(t *testing.T) {
	cur := &nmpv1.NmpHeader{Trust: verified}
	for range 3 {
		cur.Trace = append(cur.Trace, &nmpv1.TraceEntry{Service: "ingress"})
	}
	agent := &AgentHeader{Trace: []AgentTraceEntry{{Agent: "a", Tokens: 1}, {Agent: "b", Tokens: 10}, {Agent: "c", Tokens: 100}}}
	cfg := DefaultConfig()
	cfg.MaxTrace = 4
	got, ig := Apply(cur, agent, cfg)
	if len(got.Trace) != 4 || got.Trace[3].Service != AgentService || got.Trace[3].Tokens != 1 {
		t.Fatalf("trace %v", got.Trace)
	}
	if got.Budget.GetTokensUsed() != 111 {
		t.Fatalf("tokens_used %d, want 111 (dropped entries still count)", got.Budget.GetTokensUsed())
	}
	want := []Ignored{{Field: "trace[1]", Reason: "2 trace entries from trace[1] on dropped: a header holds at most 4 entries; their 110 tokens were still counted"}}
	if !reflect.DeepEqual(ig, want) {
		t.Fatalf("ignored %#v", ig)
	}
}

func TestApplyDoesNotModifyCurrent(t *testing.T) {
	cur := &nmpv1.NmpHeader{Trust: trusted, Signals: &nmpv1.Signals{UrgencyMilli: 1},
		Budget: &nmpv1.Budget{MaxTokens: 5000}, Trace: []*nmpv1.TraceEntry{{Service: "ingress"}}}
	before := proto.Clone(cur)
	h, err := ParseAgentHeader(readSample(t), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	h.Trust = hostile
	h.Budget.MaxTokens = ptr[uint64](10)
	got, _ := Apply(cur, h, DefaultConfig())
	if !proto.Equal(cur, before) {
		t.Fatalf("current changed: %v", cur)
	}
	if got.Trust != hostile || got.Budget.MaxTokens != 10 || got.Budget.TokensUsed != 42 || len(got.Trace) != 2 {
		t.Fatalf("result %v", got)
	}
}

func TestApplyNil(t *testing.T) {
	got, ig := Apply(nil, nil, DefaultConfig())
	if got == nil || !proto.Equal(got, &nmpv1.NmpHeader{}) || ig != nil {
		t.Fatalf("%v %v", got, ig)
	}
	cur := &nmpv1.NmpHeader{Trust: verified}
	got, _ = Apply(cur, nil, Config{})
	if got == cur || !proto.Equal(got, cur) {
		t.Fatal("Apply with no agent header must return an equal copy")
	}
}

func TestConfig(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if DefaultConfig() == (Config{}) {
		t.Fatal("the default must differ from the zero value, which callers test for")
	}
	c := DefaultConfig()
	c.MaxTrace = -1
	wantError(t, c.Validate(), CodeInvalidConfig, "max_trace")
	c = DefaultConfig()
	c.Halt.Percent = 200
	wantError(t, c.Validate(), CodeInvalidConfig, "halt.percent")
	c = DefaultConfig()
	c.Modes.Sizes.Deep = 1
	wantError(t, c.Validate(), CodeInvalidConfig, "modes.sizes")
}
