package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/brokertest"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ingress/inbox"
	"github.com/alpd-project/alpd/services/policy"
	"github.com/alpd-project/alpd/services/policy/relationships"
	"github.com/alpd-project/alpd/services/policy/rules"
)

// The remote sender of these tests: ana at a.example, whose home broker
// (broker.a.example) signed what federation verified.
const (
	remoteAna    = "ana@a.example"
	remoteBroker = "broker.a.example"
	remoteLog    = "a.example/p_ana"
)

// inboundSpec is one envelope another broker sent, as federation hands it
// to policy.
type inboundSpec struct {
	to, typ, body string
	trust         nmpv1.TrustLevel
	agentClass    string
	// personID of the event (default: the recipient's).
	personID string
	// id of an earlier envelope, to append its event again (a redelivery).
	id string
	// withheld: what the sender's broker says its side kept back.
	withheld []string
}

// inbound appends an InboundVerified for recipient as federation does
// (producer federation, the body sealed with the recipient's data key,
// the subject written once) and returns the envelope id.
func (r *rig) inbound(t *testing.T, recipient brokertest.Agent, s inboundSpec) string {
	t.Helper()
	ctx := context.Background()
	id := s.id
	if id == "" {
		id = uuid.Must(uuid.NewV7()).String()
	}
	if s.to == "" {
		s.to = recipient.Person.Address
	}
	if s.personID == "" {
		s.personID = recipient.Person.ID
	}
	if s.trust == nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED {
		s.trust = nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED
	}
	tenant := recipient.Person.Tenant
	sealed, err := r.sealer.Seal(ctx, tenant, recipient.Person.ID, []byte(s.body), []byte(id))
	if err != nil {
		t.Fatal(err)
	}
	env := &alpv1.Envelope{Id: id, Tenant: tenant, From: remoteAna, FromAgent: "a-agent-1", To: s.to, Type: s.typ,
		SealedBody: sealed, Created: timestamppb.Now(), Expires: timestamppb.New(time.Now().Add(time.Hour))}
	envelope.SetNMP(env, &nmpv1.NmpHeader{Trust: s.trust})
	ev := &alpv1.Event{Header: &alpv1.EventHeader{Type: "inbound_verified", SchemaVersion: 1, EventId: uuid.Must(uuid.NewV7()).String(),
		CorrelationId: id, Tenant: tenant, ProducerRole: alpv1.Role_ROLE_FEDERATION, Occurred: timestamppb.Now()},
		Body: &alpv1.Event_InboundVerified{InboundVerified: &alpv1.InboundVerified{Envelope: env, RecipientPersonId: s.personID,
			OriginBroker: remoteBroker, KeyId: "k1", AgentClass: s.agentClass, SenderLog: remoteLog, Withheld: s.withheld}}}
	subject, err := streams.InboundVerifiedSubject(tenant, s.personID, id)
	if err != nil {
		t.Fatal(err)
	}
	if s.id != "" {
		// A copy of the event federation already wrote: what a redelivery
		// hands policy again.
		if _, err := r.br.B.Bus().Publish(ctx, subject, ev); err != nil {
			t.Fatal(err)
		}
		return id
	}
	if _, err := r.br.B.Bus().Append(ctx, subject, 0, ev); err != nil {
		t.Fatal(err)
	}
	return id
}

// drained waits until policy has handled every inbound event.
func (r *rig) drained(t *testing.T) {
	t.Helper()
	b := r.br.B.Bus()
	testkit.Eventually(t, 10*time.Second, func() error {
		c, err := r.js.Consumer(context.Background(), b.StreamName(streams.Inbound), b.StreamName(streams.PolicyInbound))
		if err != nil {
			return err
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return err
		}
		if info.NumPending > 0 || info.NumAckPending > 0 {
			return fmt.Errorf("%w: %d pending, %d unacknowledged", jetstream.ErrMsgNotFound, info.NumPending, info.NumAckPending)
		}
		return nil
	}, "policy handled every inbound envelope")
}

// ledgerEntry waits for the entry of kind about envelope id in person's log.
func (r *rig) ledgerEntry(t *testing.T, a brokertest.Agent, kind, id string) ledgerlog.Entry {
	t.Helper()
	subject, err := streams.LedgerSubject(a.Person.Tenant, a.Person.ID)
	if err != nil {
		t.Fatal(err)
	}
	var found ledgerlog.Entry
	testkit.Eventually(t, 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := r.js.OrderedConsumer(ctx, r.br.B.Bus().StreamName(streams.Ledger), jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
		if err != nil {
			return err
		}
		for {
			m, err := c.Next(jetstream.FetchMaxWait(300 * time.Millisecond))
			if err != nil {
				return fmt.Errorf("no %s entry for %s: %w", kind, id, err)
			}
			ev, err := bus.Decode(m.Data())
			if err != nil {
				return err
			}
			var e ledgerlog.Entry
			if err := json.Unmarshal(ev.GetLedgerEntryAppended().GetLeaf(), &e); err != nil {
				return err
			}
			if e.Kind == kind && e.EnvelopeID == id {
				found = e
				return nil
			}
		}
	}, "the ledger's "+kind+" entry")
	return found
}

func (r *rig) inboxItem(t *testing.T, a brokertest.Agent, id string) inbox.Item {
	t.Helper()
	var it inbox.Item
	testkit.Eventually(t, 10*time.Second, func() error {
		var err error
		it, err = r.br.B.Ingress().Inbox().Get(context.Background(), inbox.Agent{Tenant: a.Person.Tenant, PersonID: a.Person.ID,
			AgentID: a.AgentID, Class: alpv1.TrustClass_TRUST_CLASS_CONSUMER}, id)
		return err
	}, "the item in the inbox")
	return it
}

func (r *rig) noInboxItem(t *testing.T, a brokertest.Agent, id string) {
	t.Helper()
	subject, _ := streams.InboxItemSubject(a.Person.Tenant, a.Person.ID, id)
	if m, err := r.br.B.Bus().LastMessageIn(context.Background(), streams.Inbox, subject); err == nil && m != nil {
		t.Fatalf("the inbox filed %s", id)
	}
}

// A remote stranger: anything but a connection request is refused with a
// deliverable that says so (for the receipt), which the inbox never
// files and the ledger records; the request is held and recorded with the
// remote party; once accepted, messages are delivered on the recipient's
// rules with the remote broker's sender line, once however often the
// event comes.
func TestInboundStrangerConnectionDelivery(t *testing.T) {
	r := newRig(t)
	lee := r.lee

	refusedID := r.inbound(t, lee, inboundSpec{typ: "meeting.request/v1", body: meeting})
	d := r.deliverable(t, lee, refusedID)
	if d.GetOutcome() != alpv1.Outcome_OUTCOME_REFUSE || d.GetReasons()[0].GetCode() != "stranger" || len(d.GetViews()) != 0 || len(d.GetHeld()) != 0 {
		t.Fatalf("a stranger's meeting request: %v", d)
	}
	if d.GetOriginBroker() != remoteBroker || d.GetSenderLog() != remoteLog || d.GetSenderPersonId() != "" || d.GetEnvelope().GetFrom() != remoteAna ||
		d.GetEnvelope().GetSealedBody() != nil || d.GetRecipientPersonId() != lee.Person.ID {
		t.Fatalf("the refusal's deliverable names the wrong parties or carries a body: %v", d)
	}
	if e := r.ledgerEntry(t, lee, ledgerlog.KindDeliverable, refusedID); e.Outcome != "refuse" || e.Counterparty != "a.example" {
		t.Fatalf("the ledger's entry for the refusal: %+v", e)
	}

	// Untrusted (a stranger's connection) may carry a connection request only.
	untrusted := r.inbound(t, lee, inboundSpec{typ: "meeting.request/v1", body: meeting, trust: nmpv1.TrustLevel_TRUST_LEVEL_UNTRUSTED})
	if d := r.deliverable(t, lee, untrusted); d.GetOutcome() != alpv1.Outcome_OUTCOME_REFUSE || d.GetReasons()[0].GetCode() != "untrusted_sender" {
		t.Fatalf("an untrusted meeting request: %v", d)
	}

	reqID := r.inbound(t, lee, inboundSpec{typ: "connection.request/v1", body: `{"purpose":"introduction","message":"hello"}`,
		trust: nmpv1.TrustLevel_TRUST_LEVEL_UNTRUSTED})
	d = r.deliverable(t, lee, reqID)
	if d.GetOutcome() != alpv1.Outcome_OUTCOME_HOLD || len(d.GetViews()) != 0 || len(d.GetHeld()) != 1 ||
		d.GetHeld()[0].GetKind() != alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST || d.GetHeld()[0].GetBody() == nil {
		t.Fatalf("a remote stranger's connection request: %v", d)
	}
	var pending []relationships.Connection
	testkit.Eventually(t, 5*time.Second, func() error {
		var err error
		if pending, err = r.rels.Pending(lee.Person.Tenant, lee.Person.ID); err == nil && len(pending) == 0 {
			err = relationships.ErrNotFound
		}
		return err
	}, "the request is pending")
	if pending[0].From.Address != remoteAna || pending[0].EnvelopeID != reqID {
		t.Fatalf("the pending request: %+v", pending[0])
	}
	if _, err := r.rels.Accept(context.Background(), lee.Person.Tenant, lee.Person.ID, pending[0].ID); err != nil {
		t.Fatal(err)
	}

	var id string
	testkit.Eventually(t, 5*time.Second, func() error {
		id = r.inbound(t, lee, inboundSpec{typ: "meeting.request/v1", body: meeting})
		if d = r.deliverable(t, lee, id); d.GetOutcome() == alpv1.Outcome_OUTCOME_REFUSE {
			return fmt.Errorf("%w: %v", relationships.ErrState, d.GetReasons())
		}
		return nil
	}, "lee's acceptance reaches policy")
	// Lee never opted in to free text: the subject stays out.
	if d.GetOutcome() != alpv1.Outcome_OUTCOME_DELIVER_PARTIAL || d.GetOriginBroker() != remoteBroker || d.GetSenderAgentClass() != rules.TrustConsumer {
		t.Fatalf("a connected remote sender's meeting request: %v", d)
	}
	if f := field(d.GetFields(), "/subject"); f.GetAction() != alpv1.FieldAction_FIELD_ACTION_DENY || f.GetReasons()[0].GetRule() != "freetext-off" {
		t.Fatalf("the free-text subject: %v", f)
	}
	if v := r.view(t, d, "consumer"); v["start"] != "2026-05-04T10:00:00-04:00" || v["subject"] != nil {
		t.Fatalf("lee's consumer view: %v", v)
	}
	it := r.inboxItem(t, lee, id)
	if it.Sender.Text != "from ana@a.example, signed by a.example's home broker" || it.Sender.VerifiedBy != "a.example's home broker" ||
		it.Sender.Broker != remoteBroker || it.Sender.OwnAgent {
		t.Fatalf("the sender line: %+v", it.Sender)
	}
	// Filed in order: the refusals before it were not.
	r.noInboxItem(t, lee, refusedID)
	r.noInboxItem(t, lee, untrusted)

	// The same event again (a redelivery): nothing more is stored.
	first, err := r.br.B.Bus().LastMessageIn(context.Background(), streams.Deliver, mustDeliverSubject(t, lee, id))
	if err != nil {
		t.Fatal(err)
	}
	r.inbound(t, lee, inboundSpec{typ: "meeting.request/v1", body: meeting, id: id})
	r.drained(t)
	if again, err := r.br.B.Bus().LastMessageIn(context.Background(), streams.Deliver, mustDeliverSubject(t, lee, id)); err != nil || again.Sequence != first.Sequence {
		t.Fatalf("a redelivered inbound envelope stored a second deliverable (%v)", err)
	}

	// Lee blocks a.example: refused, whatever the connection says.
	if err := r.rels.Block(context.Background(), lee.Person.Tenant, lee.Person.ID, relationships.Target{Kind: relationships.TargetDomain, Value: "a.example"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		blocked := r.inbound(t, lee, inboundSpec{typ: "meeting.request/v1", body: meeting})
		if d := r.deliverable(t, lee, blocked); d.GetOutcome() != alpv1.Outcome_OUTCOME_REFUSE || d.GetReasons()[0].GetCode() != "blocked" {
			return fmt.Errorf("%w: %v", relationships.ErrState, d)
		}
		return nil
	}, "the block reaches policy")
}

func mustDeliverSubject(t *testing.T, a brokertest.Agent, id string) string {
	t.Helper()
	s, err := streams.DeliverSubject(a.Person.Tenant, a.Person.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// connectRemote records lee's acceptance of a connection ana@a.example
// asked for.
func (r *rig) connectRemote(t *testing.T, a brokertest.Agent) {
	t.Helper()
	c, err := r.rels.Request(context.Background(), a.Person.Tenant, relationships.Party{Address: remoteAna}, a.Person.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.rels.Accept(context.Background(), a.Person.Tenant, a.Person.ID, c.ID); err != nil {
		t.Fatal(err)
	}
}

// decidedOnce appends an envelope until policy's projections have the
// relationship, and returns its deliverable.
func (r *rig) decidedOnce(t *testing.T, a brokertest.Agent, s inboundSpec) *alpv1.Deliverable {
	t.Helper()
	var d *alpv1.Deliverable
	testkit.Eventually(t, 5*time.Second, func() error {
		d = r.deliverable(t, a, r.inbound(t, a, s))
		if len(d.GetReasons()) > 0 && d.GetReasons()[0].GetCode() == "stranger" {
			return relationships.ErrState
		}
		return nil
	}, "the connection reaches policy")
	return d
}

// The recipient side's other hard rules for a remote sender: commitments
// and confidential fields are held, and the sending agent's class as its
// broker signed it is what the recipient's rules see (anything but
// company counts as consumer).
func TestInboundHeldAndAgentClass(t *testing.T) {
	r := newRig(t)
	lee := r.lee
	r.connectRemote(t, lee)

	d := r.decidedOnce(t, lee, inboundSpec{typ: "meeting.accept/v1",
		body: `{"in_reply_to":"0190a5b8-7a7e-7c3e-9a8c-2d1f3b4c5d6e","start":"2026-05-04T10:00:00-04:00","duration":"PT30M"}`})
	if d.GetOutcome() != alpv1.Outcome_OUTCOME_HOLD || len(d.GetHeld()) != 1 || d.GetHeld()[0].GetKind() != alpv1.HeldKind_HELD_KIND_COMMITMENT ||
		d.GetHeld()[0].GetBody() == nil || len(d.GetViews()) != 0 {
		t.Fatalf("a remote commitment: %v", d)
	}

	// Lee's only agent is consumer class: confidential figures wait for him.
	d = r.decidedOnce(t, lee, inboundSpec{typ: "briefing.reply/v1", agentClass: "company",
		body: `{"in_reply_to":"0190a5b8-7a7e-7c3e-9a8c-2d1f3b4c5d6e","as_of":"2026-04-01T09:00:00+02:00",
		"summary":"Renewal likely.","figures":[{"label":"ARR","amount":{"currency":"EUR","value":"1200000.00"}}]}`})
	var conf *alpv1.HeldItem
	for _, h := range d.GetHeld() {
		if h.GetKind() == alpv1.HeldKind_HELD_KIND_CONFIDENTIAL_FIELDS {
			conf = h
		}
	}
	if conf == nil || conf.GetBody() == nil {
		t.Fatalf("confidential fields for a consumer-only recipient are not held: %v", d)
	}
	if v := r.view(t, d, "consumer"); v["figures"] != nil || v["as_of"] == nil {
		t.Fatalf("lee's consumer view: %v", v)
	}

	// Lee's rules refuse the start time from consumer-class agents.
	pushRecipientRules(t, r, lee, `
@id("no-start-from-consumer-agents")
@reason("consumer_agents_may_not")
forbid (principal, action == Alp::Action::"share_field", resource)
when { principal.trust_class == "consumer" && resource.pointer == "/start" };
`)
	for _, c := range []struct {
		class  string
		denied bool
	}{{"company", false}, {"consumer", true}, {"", true}, {"root", true}} {
		var f *alpv1.FieldVerdict
		testkit.Eventually(t, 5*time.Second, func() error {
			d := r.decidedOnce(t, lee, inboundSpec{typ: "meeting.request/v1", body: meeting, agentClass: c.class})
			f = field(d.GetFields(), "/start")
			if c.denied && (f.GetAction() != alpv1.FieldAction_FIELD_ACTION_DENY) {
				return fmt.Errorf("%w: %v", relationships.ErrState, f)
			}
			return nil
		}, "lee's rules reach policy")
		if denied := f.GetAction() == alpv1.FieldAction_FIELD_ACTION_DENY; denied != c.denied ||
			(denied && f.GetReasons()[0].GetRule() != "no-start-from-consumer-agents") {
			t.Fatalf("agent class %q: /start %v, want denied %v", c.class, f, c.denied)
		}
	}
}

// pushRecipientRules stores the recipient template plus extra as a's
// recipient set, as the operator would.
func pushRecipientRules(t *testing.T, r *rig, a brokertest.Agent, extra string) {
	t.Helper()
	template, err := rules.Template(rules.PartyRecipient)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := r.br.B.Client(alpv1.Role_ROLE_POLICY)
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), policy.OperatorMetadata, "test")
	if _, err := policyv1.NewPolicyServiceClient(conn).PushRuleSet(ctx, &policyv1.PushRuleSetRequest{
		Tenant: a.Person.Tenant, Party: string(rules.PartyRecipient), Owner: a.Person.ID, Text: string(template) + extra}); err != nil {
		t.Fatal(err)
	}
}

// Envelopes no person here can be named for: skipped (no deliverable, the
// event not dead-lettered), and the worker goes on.
func TestInboundSkipped(t *testing.T) {
	r := newRig(t)
	lee := r.lee
	r.connectRemote(t, lee)
	unknown := r.inbound(t, lee, inboundSpec{to: "nobody@example.org", typ: "note/v1", body: `{"text":"hi"}`})
	mismatch := r.inbound(t, lee, inboundSpec{to: "ana@example.org", typ: "note/v1", body: `{"text":"hi"}`})
	r.drained(t)
	for _, id := range []string{unknown, mismatch} {
		r.noDeliverable(t, lee, id)
		r.noDeliverable(t, r.ana, id)
	}
	dls, err := r.js.Stream(context.Background(), r.br.B.Bus().StreamName(bus.DeadLetterStream))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dls.GetLastMsgForSubject(context.Background(), r.br.B.Bus().DeadLetterSubject(streams.PolicyInbound)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a skipped inbound envelope was dead-lettered (%v)", err)
	}
	// Unknown type: a refusal lee's broker can receipt.
	d := r.decidedOnce(t, lee, inboundSpec{typ: "nosuch.type/v1", body: `{}`})
	if d.GetOutcome() != alpv1.Outcome_OUTCOME_REFUSE || d.GetReasons()[0].GetCode() != "unknown_message_type" {
		t.Fatalf("an unknown type: %v", d)
	}
}

// A member the sender's broker withheld is no invalid body on this side:
// the type's "required" excuses it, and only it.
func TestInboundWithheldRequiredMember(t *testing.T) {
	r := newRig(t)
	lee := r.lee
	r.connectRemote(t, lee)
	briefing := `{"as_of":"2026-11-30T10:00:00Z"}`
	d := r.decidedOnce(t, lee, inboundSpec{typ: "briefing.reply/v1", body: briefing, withheld: []string{"/summary"}})
	if d.GetOutcome() == alpv1.Outcome_OUTCOME_REFUSE {
		t.Fatalf("a briefing whose summary the sender side withheld was refused: %v", d.GetReasons())
	}
	d = r.decidedOnce(t, lee, inboundSpec{typ: "briefing.reply/v1", body: briefing, withheld: []string{"/pipeline"}})
	if d.GetOutcome() != alpv1.Outcome_OUTCOME_REFUSE || d.GetReasons()[0].GetCode() != "invalid_body" {
		t.Fatalf("a briefing missing a summary nobody withheld: %v %v, want refused invalid_body", d.GetOutcome(), d.GetReasons())
	}
}
