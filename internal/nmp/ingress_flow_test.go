package nmp_test

import (
	"fmt"
	"testing"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/nmp"
)

// TestIngressFlow is the intended use at ingress: trust is set from the
// credential and capped by the agent's declared trust in the same hop (so
// the reason lands in the ingress trace entry), then Apply merges the rest
// of the agent's header after the hop.
func TestIngressFlow(t *testing.T) {
	agent, err := nmp.ParseAgentHeader([]byte(`{"nmp_message":{"trust":{"level":1},
		"signals":{"urgency":0.8,"quality":0.9},"budget":{"max_tokens":4000,"system_mode":"deep"},
		"trace":[{"agent":"router","action":"classified","tokens":42}]}}`), nmp.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	env := &alpv1.Envelope{Id: "e1"}
	envelope.SetNMP(env, &nmpv1.NmpHeader{Budget: &nmpv1.Budget{MaxTokens: 5000, SystemMode: nmpv1.SystemMode_SYSTEM_MODE_STANDARD}})
	hop := envelope.Begin(alpv1.Role_ROLE_INGRESS, "accept")
	if err := hop.SetTrust(nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED, "agent credential"); err != nil {
		t.Fatal(err)
	}
	hop.LowerTrust(agent.TrustCap())
	hop.End(env)

	h, ignored := nmp.Apply(envelope.NMP(env), agent, nmp.DefaultConfig())
	envelope.SetNMP(env, h)

	if h.Trust != nmpv1.TrustLevel_TRUST_LEVEL_UNTRUSTED {
		t.Errorf("trust %v", h.Trust)
	}
	if got := h.Trace[0].GetTrustReason(); got != "agent credential; the agent's NMP header declares trust untrusted(1)" {
		t.Errorf("ingress trust reason %q", got)
	}
	if len(h.Trace) != 2 || h.Trace[0].Service != "ingress" || h.Trace[1].Service != nmp.AgentService || h.Trace[1].Action != "" || h.Budget.TokensUsed != 42 || h.Budget.MaxTokens != 4000 {
		t.Errorf("header %v", h)
	}
	if len(ignored) != 1 || ignored[0].Reason != "system_mode deep ignored: cannot raise the mode above standard" {
		t.Errorf("ignored %v", ignored)
	}
	if got := fmt.Sprint(nmp.Detect(h.Signals, nmp.DefaultRules())); got != "[{CONFLICT urgency 0.8 > 0.7 and quality 0.9 > 0.7: speed vs depth}]" {
		t.Errorf("conflicts %s", got)
	}
	if m, why := nmp.SelectMode(h.Signals, h.Budget, nmp.DefaultModeConfig()); m != nmpv1.SystemMode_SYSTEM_MODE_FAST {
		t.Errorf("mode %v (%s)", m, why)
	}
}

func Example() {
	agent, err := nmp.ParseAgentHeader([]byte(`{"nmp_message":{"trust":{"level":3},
		"signals":{"urgency":0.95},"budget":{"max_tokens":9000,"tokens_used":10},
		"trace":[{"agent":"router","action":"classified as high-urgency","tokens":42}]}}`), nmp.Limits{})
	if err != nil {
		fmt.Println(err)
		return
	}
	broker := &nmpv1.NmpHeader{
		Trust:  nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED,
		Budget: &nmpv1.Budget{MaxTokens: 5000, SystemMode: nmpv1.SystemMode_SYSTEM_MODE_STANDARD},
	}
	h, ignored := nmp.Apply(broker, agent, nmp.DefaultConfig())
	for _, i := range ignored {
		fmt.Println(i)
	}
	mode, why := nmp.SelectMode(h.Signals, h.Budget, nmp.DefaultModeConfig())
	fmt.Println(nmp.ModeName(mode)+":", why)
	fmt.Println("halted:", nmp.Halted(h.Budget, nmp.DefaultHaltRule()))
	out, _ := nmp.ToJSON(h)
	fmt.Println(string(out))
	// Output:
	// trust level 3 ignored: cannot raise trust above verified(2) set by the broker
	// max_tokens 9000 ignored: cannot raise the limit above 5000 (decrease-only)
	// tokens_used 10 ignored: the running total is already 42 and never decreases
	// reflex: urgency 0.95 > 0.9: reflex (streamline, not more tokens)
	// halted: false
	// {"nmp_message":{"trust":{"level":2},"signals":{"urgency":0.95,"quality":0.0,"inhibition":0.0,"activation":0.0,"focus":0.0,"reward":0.0},"budget":{"max_tokens":5000,"tokens_used":42,"system_mode":"standard"},"trace":[{"agent":"agent","action":"","tokens":42}]}}
}
