package decision_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/services/policy/decision"
	"github.com/alpd-project/alpd/services/policy/relationships"
	"github.com/alpd-project/alpd/services/policy/rules"
)

// case30 is a briefing.reply/v1 of 30 fields (three top-level, five
// figures of five, the pipeline amount) from ana's company agent to lee,
// both of one organization that pre-approved its people, through the four
// shipped templates.
func case30(tb testing.TB) decision.Case {
	var figs []string
	for i := range 5 {
		figs = append(figs, fmt.Sprintf(`{"label":"Figure %d","amount":{"currency":"EUR","value":"%d.50"},`+
			`"period":{"start":"2026-01-01T00:00:00+01:00","end":"2026-03-31T23:59:59+02:00"}}`, i, 1000*i))
	}
	body := `{"in_reply_to":"0190a5b8-7a7e-7c3e-9a8c-2d1f3b4c5d6e","as_of":"2026-04-01T09:00:00Z",` +
		`"summary":"Renewal likely; pricing pressure from a competitor.","figures":[` + strings.Join(figs, ",") +
		`],"pipeline":{"currency":"USD","value":"350000"}}`
	c := briefingCase(tb, rules.TrustCompany, []string{rules.TrustCompany, rules.TrustConsumer})
	c.Message.Body = []byte(body)
	c.SenderRelationship, c.RecipientRelationship = relationships.OrgPreapproved, relationships.OrgPreapproved
	fs, err := c.Message.Type.Check(c.Message.Body)
	if err != nil || len(fs) != 30 {
		tb.Fatalf("Check = %d fields, %v; want 30", len(fs), err)
	}
	return c
}

// BenchmarkDecide30 is one message of 30 fields through both stages: the
// schema check, four Cedar sets, the free-text cap and DLP scan, and the
// bodies of what crosses and of each trust class's view.
func BenchmarkDecide30(b *testing.B) {
	c := case30(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decision.Decide(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecideRatio30 times, in turn in one loop on the same body:
// JSON Schema validation (the floor: what any broker checking types does),
// the four parties' Cedar sets on its 30 fields (rules.DecideMessage, what
// the aim of ≤ 20 µs and ≤ 3× validation is about), and the whole
// decision (validation included, both stages, free text, DLP, the body
// that crosses). It reports each as ns and the last two as multiples of
// validation.
func BenchmarkDecideRatio30(b *testing.B) {
	c := case30(b)
	ctx := context.Background()
	fs, err := c.Message.Type.Check(c.Message.Body)
	if err != nil {
		b.Fatal(err)
	}
	msg := rules.Message{Agent: c.Message.Agent, Context: rules.Context{Sender: c.Message.Sender, Recipient: c.Message.Recipient,
		Relationship: rules.RelOrgPreapproved}}
	for _, f := range fs {
		msg.Fields = append(msg.Fields, rules.Field{Type: c.Message.Type.Name(), Pointer: f.Pointer, Class: string(f.Class), FreeText: f.FreeText})
	}
	sets := rules.Parties{Sender: c.Sets.Sender, SenderOrg: c.Sets.SenderOrg, RecipientOrg: c.Sets.RecipientOrg, Recipient: c.Sets.Recipient}
	var v, r, d time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := c.Message.Type.Validate(c.Message.Body); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := rules.DecideMessage(ctx, sets, msg); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := decision.Decide(ctx, c); err != nil {
			b.Fatal(err)
		}
		v, r, d = v+t1.Sub(t0), r+t2.Sub(t1), d+time.Since(t2)
	}
	b.ReportMetric(float64(v.Nanoseconds())/float64(b.N), "validate-ns")
	b.ReportMetric(float64(r.Nanoseconds())/float64(b.N), "four-sets-ns")
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "decide-ns")
	b.ReportMetric(float64(r)/float64(v), "four-sets/validate")
	b.ReportMetric(float64(d)/float64(v), "decide/validate")
}
