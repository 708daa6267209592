package rules

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkDecideMessage30 is the budget case: one message of 30
// fields through the four default sets (aim ≤ 20 µs per message).
// BenchmarkAuthorizeOnce is one cedar-go Authorize of one field against
// one set, the unit 120 of which make a message; compare the two as a
// ratio.
func BenchmarkDecideMessage30(b *testing.B) {
	ps, msg := benchSetup(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecideMessage(ctx, ps, msg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAuthorizeOnce(b *testing.B) {
	ps, msg := benchSetup(b)
	msg.Fields = msg.Fields[:1]
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decide(ctx, []*Compiled{ps.Recipient}, actionShareField, msg); err != nil {
			b.Fatal(err)
		}
	}
}

func benchSetup(b *testing.B) (Parties, Message) {
	e := newEngine(b)
	c := NewCache(e, 8)
	get := func(p Party) *Compiled {
		text, err := Template(p)
		if err != nil {
			b.Fatal(err)
		}
		comp, err := c.Get(p, text)
		if err != nil {
			b.Fatal(err)
		}
		return comp
	}
	ps := Parties{Sender: get(PartySender), SenderOrg: get(PartySenderOrg), RecipientOrg: get(PartyRecipientOrg), Recipient: get(PartyRecipient)}
	msg := Message{
		Agent: Agent{ID: "agt_ana_work", Person: "ana", TrustClass: TrustCompany, Tenant: "t1"},
		Context: Context{
			Sender:       Side{Address: "ana@example.org", Tenant: "t1", Org: "example.org", Roles: []string{"sales"}},
			Recipient:    Side{Address: "lee@example.org", Tenant: "t1", Org: "example.org", Roles: []string{"finance"}},
			Relationship: RelConnected,
		},
	}
	classes := []string{ClassPublic, ClassInternal, ClassConfidential}
	for i := range 30 {
		msg.Fields = append(msg.Fields, Field{Type: "briefing.reply/v1", Pointer: fmt.Sprintf("/items/%d", i),
			Class: classes[i%3], FreeText: i == 29})
	}
	return ps, msg
}
