package decision_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/services/policy/decision"
	"github.com/alpd-project/alpd/services/policy/relationships"
	"github.com/alpd-project/alpd/services/policy/rules"
)

// templates compiles every party's shipped template.
func templates(t testing.TB) decision.Sets {
	t.Helper()
	eng, err := rules.New(rules.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	cache := rules.NewCache(eng, 16)
	get := func(p rules.Party) *rules.Compiled {
		text, err := rules.Template(p)
		if err != nil {
			t.Fatal(err)
		}
		c, err := cache.Get(p, text)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return decision.Sets{Sender: get(rules.PartySender), SenderOrg: get(rules.PartySenderOrg),
		RecipientOrg: get(rules.PartyRecipientOrg), Recipient: get(rules.PartyRecipient)}
}

func lookup(t testing.TB, name string) *msgtypes.Type {
	t.Helper()
	reg, err := msgtypes.New()
	if err != nil {
		t.Fatal(err)
	}
	typ, ok := reg.Lookup(name)
	if !ok {
		t.Fatalf("no type %s", name)
	}
	return typ
}

func briefingCase(t testing.TB, agentClass string, recipientAgents []string) decision.Case {
	body := `{"in_reply_to":"0190a5b8-7a7e-7c3e-9a8c-2d1f3b4c5d6e","as_of":"2026-04-01T09:00:00+02:00",
	  "summary":"Renewal likely.","figures":[{"label":"ARR","amount":{"currency":"EUR","value":"1200000.00"}}],
	  "risks":["Competitor discount"]}`
	return decision.Case{
		Message: decision.Message{
			Type:      lookup(t, "briefing.reply/v1"),
			Body:      []byte(body),
			Agent:     rules.Agent{ID: "agt_1", Person: "p_ana", TrustClass: agentClass, Tenant: "example.org"},
			Sender:    rules.Side{Address: "ana@example.org", Tenant: "example.org", Org: "example.org"},
			Recipient: rules.Side{Address: "lee@example.org", Tenant: "example.org", Org: "example.org"},
		},
		SenderRelationship: relationships.OrgPreapproved, RecipientRelationship: relationships.OrgPreapproved,
		Sets: templates(t), RecipientAgentClasses: recipientAgents,
	}
}

func TestConfidentialToConsumerAgentIsHeld(t *testing.T) {
	d, err := decision.Decide(context.Background(), briefingCase(t, rules.TrustCompany, []string{rules.TrustConsumer}))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.MarshalIndent(d, "", " ")
	t.Logf("%s", out)
	if d.Recipient == nil || len(d.Recipient.Held) != 1 || d.Recipient.Held[0].Kind != decision.HeldConfidentialFields {
		t.Fatalf("want confidential fields held, got %+v", d.Recipient)
	}
}

// A field the sender side withholds may be one the schema requires: the
// recipient side decides on what crossed, it does not refuse the thinned
// body as invalid.
func TestRequiredFieldWithheldBySender(t *testing.T) {
	c := briefingCase(t, rules.TrustCompany, []string{rules.TrustCompany})
	eng, err := rules.New(rules.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	text, _ := rules.Template(rules.PartySender)
	text = append(text, []byte(`
@id("keep-summary")
@reason("sender_keeps_summaries")
forbid (principal, action == Alp::Action::"share_field", resource) when { resource.pointer == "/summary" };`)...)
	if c.Sets.Sender, err = rules.NewCache(eng, 1).Get(rules.PartySender, text); err != nil {
		t.Fatal(err)
	}
	d, err := decision.Decide(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if d.Recipient == nil || d.Recipient.Outcome == decision.Refuse {
		t.Fatalf("recipient side %+v; want the rest delivered", d.Recipient)
	}
	if d.Combined.Outcome != decision.DeliverPartial {
		t.Fatalf("combined outcome %s, want deliver_partial", d.Combined.Outcome)
	}
	for _, f := range d.Recipient.Fields {
		if f.Pointer == "/summary" {
			t.Fatalf("the withheld field reached the recipient side: %+v", f)
		}
	}
}
