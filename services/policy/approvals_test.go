package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/brokertest"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/policy"
	"github.com/alpd-project/alpd/services/policy/relationships"
)

// approvalEvent is an event of the approvals service (its producer) on
// subject.
func (r *rig) approvalEvent(t *testing.T, tenant, subject string, ev *alpv1.Event) uint64 {
	t.Helper()
	ev.Header = &alpv1.EventHeader{Type: kindOf(ev), SchemaVersion: 1, EventId: uuid.Must(uuid.NewV7()).String(),
		Tenant: tenant, ProducerRole: alpv1.Role_ROLE_APPROVALS, Occurred: timestamppb.Now()}
	ack, err := r.br.B.Bus().Publish(context.Background(), subject, ev)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func kindOf(ev *alpv1.Event) string {
	switch ev.GetBody().(type) {
	case *alpv1.Event_ApprovalDecided:
		return "approval_decided"
	case *alpv1.Event_StandingRuleCreated:
		return "standing_rule_created"
	case *alpv1.Event_StandingRuleRevoked:
		return "standing_rule_revoked"
	}
	return "approval_requested"
}

// decideItem appends the person's decision on the held connection request
// of envelope, from the asker's address, as the approvals service does
// (an item of its own id, so it meets no item the approvals service made).
func (r *rig) decideItem(t *testing.T, person brokertest.Agent, kind alpv1.HeldKind, envelope, from string, state alpv1.ApprovalState) {
	t.Helper()
	item := "i" + strings.ReplaceAll(uuid.NewString(), "-", "")
	subj, err := streams.ApprovalItemSubject(person.Person.Tenant, person.Person.ID, item)
	if err != nil {
		t.Fatal(err)
	}
	r.approvalEvent(t, person.Person.Tenant, subj, &alpv1.Event{Body: &alpv1.Event_ApprovalDecided{ApprovalDecided: &alpv1.ApprovalDecided{
		ItemId: item, PersonId: person.Person.ID, Kind: kind, EnvelopeId: envelope, State: state, From: from,
		Type: "connection.request/v1"}}})
}

// pendingFrom waits for the request from party to person and answers it.
func (r *rig) pendingFrom(t *testing.T, person brokertest.Agent, from relationships.Party) relationships.Connection {
	t.Helper()
	id := relationships.ConnectionID(person.Person.Tenant, from, person.Person.ID)
	var c relationships.Connection
	testkit.Eventually(t, 10*time.Second, func() (err error) {
		c, err = r.rels.Connection(person.Person.Tenant, id)
		return err
	}, "the request from "+from.String()+" is recorded")
	return c
}

func (r *rig) connState(t *testing.T, person brokertest.Agent, id string, want relationships.ConnState) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() error {
		c, err := r.rels.Connection(person.Person.Tenant, id)
		if err == nil && c.State != want {
			err = fmt.Errorf("%w: %s, want %s", relationships.ErrState, c.State, want)
		}
		return err
	}, "connection "+id+" is "+string(want))
}

// approvalsDrained waits until policy has handled every approval item.
func (r *rig) approvalsDrained(t *testing.T) {
	t.Helper()
	b := r.br.B.Bus()
	testkit.Eventually(t, 10*time.Second, func() error {
		c, err := r.js.Consumer(context.Background(), b.StreamName(streams.Approvals), b.StreamName(streams.PolicyApprovals))
		if err != nil {
			return err
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return err
		}
		if info.NumPending > 0 || info.NumAckPending > 0 || info.NumRedelivered > 0 {
			return fmt.Errorf("%w: %d pending, %d unacknowledged, %d redelivered", relationships.ErrState,
				info.NumPending, info.NumAckPending, info.NumRedelivered)
		}
		return nil
	}, "policy handled every approval decision")
}

// itemsRig runs identity and policy only: ingress and approvals, whose
// consumers of approval items are not policy's to test here, are absent,
// their streams there.
func itemsRig(t *testing.T) *rig {
	t.Helper()
	return newRigOf(t, []string{"identity", "policy"}, alpv1.Role_ROLE_INGRESS, alpv1.Role_ROLE_APPROVALS, alpv1.Role_ROLE_FEDERATION)
}

// TestConnectionDecisions: the person's decision on a held connection
// request answers the connection — approved accepts, denied and expired
// decline, superseded and cancelled leave it — and a decision the
// connection no longer allows (accepting a declined one) changes nothing
// and blocks nothing.
func TestConnectionDecisions(t *testing.T) {
	r := itemsRig(t)
	ctx := context.Background()
	kim := relationships.Party{Address: "kim@partner.example"}
	ana := relationships.Party{Person: r.ana.Person.ID}
	remote := relationships.Party{Address: remoteAna}
	request := func(from relationships.Party, to brokertest.Agent) (string, relationships.Connection) {
		env := uuid.NewString()
		c, err := r.rels.Request(ctx, to.Person.Tenant, from, to.Person.ID, env)
		if err != nil {
			t.Fatal(err)
		}
		return env, c
	}
	kimReq, kc := request(kim, r.lee)
	anaReq, ac := request(ana, r.lee)
	kimAna, ka := request(kim, r.ana)
	remoteReq := r.inbound(t, r.lee, inboundSpec{typ: "connection.request/v1", body: `{"purpose":"sales"}`, trust: nmpv1.TrustLevel_TRUST_LEVEL_UNTRUSTED})
	rc := r.pendingFrom(t, r.lee, remote)

	// A later request of the same pair names its own envelope: found by
	// the asker, it is the same connection.
	later, _ := request(kim, r.lee)
	r.decideItem(t, r.lee, alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST, later, kim.Address, alpv1.ApprovalState_APPROVAL_STATE_SUPERSEDED)
	r.decideItem(t, r.lee, alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST, later, kim.Address, alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ONCE)
	r.decideItem(t, r.lee, alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST, anaReq, "ana@example.org", alpv1.ApprovalState_APPROVAL_STATE_DENIED)
	r.decideItem(t, r.lee, alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST, remoteReq, remoteAna, alpv1.ApprovalState_APPROVAL_STATE_CANCELLED)
	r.decideItem(t, r.ana, alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST, kimAna, kim.Address, alpv1.ApprovalState_APPROVAL_STATE_EXPIRED)
	// Other kinds are ingress's to carry out.
	r.decideItem(t, r.lee, alpv1.HeldKind_HELD_KIND_COMMITMENT, remoteReq, remoteAna, alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ONCE)
	r.connState(t, r.lee, kc.ID, relationships.ConnAccepted)
	r.connState(t, r.lee, ac.ID, relationships.ConnDeclined)
	r.connState(t, r.ana, ka.ID, relationships.ConnDeclined)

	// Approving the declined one and declining the accepted one: no-ops.
	r.decideItem(t, r.lee, alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST, anaReq, "ana@example.org", alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ALWAYS)
	r.decideItem(t, r.lee, alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST, kimReq, kim.Address, alpv1.ApprovalState_APPROVAL_STATE_DENIED)
	// A decision naming no connection of the person.
	r.decideItem(t, r.lee, alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST, uuid.NewString(), "nobody@nowhere.example", alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ONCE)
	r.approvalsDrained(t)
	r.connState(t, r.lee, kc.ID, relationships.ConnAccepted)
	r.connState(t, r.lee, ac.ID, relationships.ConnDeclined)
	r.connState(t, r.lee, rc.ID, relationships.ConnRequested)
	if got, _ := r.rels.Relationship(home, kim, r.lee.Person.ID, nil); got != relationships.Connected {
		t.Fatalf("kim to lee: %q, want connected", got)
	}
}

// TestAcceptTellsRemoteAsker: a person's yes to a request from another
// broker's address is also a connection.accept/v1 from them to the asker,
// answering the request, stored once as a decision federation sends.
func TestAcceptTellsRemoteAsker(t *testing.T) {
	r := itemsRig(t)
	req := r.inbound(t, r.lee, inboundSpec{typ: "connection.request/v1", body: `{"purpose":"meeting"}`, trust: nmpv1.TrustLevel_TRUST_LEVEL_UNTRUSTED})
	c := r.pendingFrom(t, r.lee, relationships.Party{Address: remoteAna})
	r.decideItem(t, r.lee, alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST, req, remoteAna, alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ONCE)
	// The same decision again (a redelivery): the same notice.
	r.decideItem(t, r.lee, alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST, req, remoteAna, alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ONCE)
	r.connState(t, r.lee, c.ID, relationships.ConnAccepted)
	id := policy.NoticeID(home, c.ID, req)
	dec := r.decided(t, r.lee, id)
	env := dec.GetEnvelope()
	if dec.GetOutcome() != alpv1.Outcome_OUTCOME_DELIVER || dec.GetSenderPersonId() != r.lee.Person.ID || dec.GetRecipientPersonId() != "" ||
		env.GetType() != "connection.accept/v1" || env.GetFrom() != "lee@example.org" || env.GetTo() != remoteAna ||
		env.GetInReplyTo() != req || env.GetFromAgent() == "" || env.GetSealedBody() == nil {
		t.Fatalf("the notice's decision %v", dec)
	}
	body, err := r.sealer.Open(context.Background(), env.GetSealedBody(), []byte(id))
	if err != nil {
		t.Fatal(err)
	}
	var b map[string]string
	if err := json.Unmarshal(body, &b); err != nil || b["in_reply_to"] != req || len(b) != 1 {
		t.Fatalf("the notice's body %s (%v)", body, err)
	}
	r.approvalsDrained(t)
	subj, _ := streams.DecidedSubject(home, r.lee.Person.ID, id)
	s, err := r.js.Stream(context.Background(), r.br.B.Bus().StreamName(streams.Decided))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[subj]; n != 1 {
		t.Fatalf("%d notices stored, want one", n)
	}
	// A person of this broker who asked needs no notice.
	kimReq := uuid.NewString()
	kc, err := r.rels.Request(context.Background(), home, relationships.Party{Address: "kim@partner.example"}, r.lee.Person.ID, kimReq)
	if err != nil {
		t.Fatal(err)
	}
	r.decideItem(t, r.lee, alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST, kimReq, "kim@partner.example", alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ONCE)
	r.connState(t, r.lee, kc.ID, relationships.ConnAccepted)
	r.approvalsDrained(t)
	ksubj, _ := streams.DecidedSubject(home, r.lee.Person.ID, policy.NoticeID(home, kc.ID, kimReq))
	if info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(ksubj)); err != nil || info.State.Subjects[ksubj] != 0 {
		t.Fatalf("a notice to a local asker: %v (%v)", info.State.Subjects, err)
	}
}

// TestRemoteAcceptConnects: on the asker's broker, the remote party's
// connection.accept/v1 answering the asker's own request connects them
// and reaches the asker's agents; the asker's next typed message leaves.
// An accept that answers no request of the recipient is a stranger's.
func TestRemoteAcceptConnects(t *testing.T) {
	r := newRig(t)
	if res := r.send(t, r.lee.Token, remoteAna, "note/v1", `{"text":"hi"}`); res.Outcome != "refuse" {
		t.Fatalf("a note to a stranger: %q, want refuse", res.Outcome)
	}
	req := r.send(t, r.lee.Token, remoteAna, "connection.request/v1", `{"purpose":"introduction"}`)
	if req.Outcome == "refuse" {
		t.Fatalf("lee's request: %+v", req)
	}
	untrusted := nmpv1.TrustLevel_TRUST_LEVEL_UNTRUSTED
	for name, body := range map[string]string{
		"a random envelope":   fmt.Sprintf(`{"in_reply_to":%q}`, uuid.NewString()),
		"another's request":   fmt.Sprintf(`{"in_reply_to":%q}`, r.send(t, r.ana.Token, remoteAna, "connection.request/v1", `{"purpose":"other"}`).EnvelopeID),
		"a note, not request": fmt.Sprintf(`{"in_reply_to":%q}`, r.send(t, r.lee.Token, "ana@example.org", "connection.request/v1", `{"purpose":"other"}`).EnvelopeID),
	} {
		id := r.inbound(t, r.lee, inboundSpec{typ: "connection.accept/v1", body: body, trust: untrusted})
		if d := r.deliverable(t, r.lee, id); d.GetOutcome() != alpv1.Outcome_OUTCOME_REFUSE || d.GetReasons()[0].GetCode() != "stranger" {
			t.Fatalf("%s: %v", name, d)
		}
	}
	id := r.inbound(t, r.lee, inboundSpec{typ: "connection.accept/v1", body: fmt.Sprintf(`{"in_reply_to":%q}`, req.EnvelopeID), trust: untrusted})
	d := r.deliverable(t, r.lee, id)
	if d.GetOutcome() != alpv1.Outcome_OUTCOME_DELIVER || len(d.GetViews()) == 0 || r.view(t, d, "consumer")["in_reply_to"] != req.EnvelopeID {
		t.Fatalf("the accept: %v", d)
	}
	if got, _ := r.rels.Relationship(home, relationships.Party{Address: remoteAna}, r.lee.Person.ID, nil); got != relationships.Connected {
		t.Fatalf("lee and %s: %q, want connected", remoteAna, got)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if res := r.send(t, r.lee.Token, remoteAna, "note/v1", `{"text":"hi"}`); res.Outcome == "refuse" {
			return fmt.Errorf("%w: %+v", relationships.ErrState, r.decided(t, r.lee, res.EnvelopeID).GetReasons())
		}
		return nil
	}, "lee's note leaves once ana accepted")
	// An agent may not send an accept itself.
	if res := r.send(t, r.lee.Token, remoteAna, "connection.accept/v1", fmt.Sprintf(`{"in_reply_to":%q}`, req.EnvelopeID)); res.Outcome != "refuse" ||
		r.decided(t, r.lee, res.EnvelopeID).GetReasons()[0].GetCode() != "broker_only_type" {
		t.Fatalf("an agent's connection.accept/v1: %+v", res)
	}
}

// TestStandingRuleCoversCommitment: lee's standing rule for ana's
// meeting.accept/v1 delivers the next one without asking, its reason
// naming the rule; revoked, the next one is held again.
func TestStandingRuleCoversCommitment(t *testing.T) {
	r := newRig(t)
	r.connect(t, r.ana, r.lee, "lee@example.org")
	body := `{"in_reply_to":"0190a5b8-7a7e-7c3e-9a8c-2d1f3b4c5d6e","start":"2026-05-04T10:00:00-04:00","duration":"PT30M"}`
	send := func() result {
		var res result
		testkit.Eventually(t, 5*time.Second, func() error {
			if res = r.send(t, r.ana.Token, "lee@example.org", "meeting.accept/v1", body); res.Outcome == "refuse" {
				return relationships.ErrState
			}
			return nil
		}, "lee's acceptance reaches policy")
		return res
	}
	if res := send(); res.Outcome != "hold" {
		t.Fatalf("before a standing rule: %q, want hold", res.Outcome)
	}
	rule := "s" + strings.ReplaceAll(uuid.NewString(), "-", "")
	subj, err := streams.StandingRuleSubject(home, r.lee.Person.ID, rule)
	if err != nil {
		t.Fatal(err)
	}
	r.approvalEvent(t, home, subj, &alpv1.Event{Body: &alpv1.Event_StandingRuleCreated{StandingRuleCreated: &alpv1.StandingRuleCreated{
		RuleId: rule, PersonId: r.lee.Person.ID, Type: "meeting.accept/v1", Counterparty: "ana@example.org", Action: "meeting",
		Expires: timestamppb.New(time.Now().Add(time.Hour))}}})
	var res result
	testkit.Eventually(t, 10*time.Second, func() error {
		if res = send(); res.Outcome != "deliver" {
			return fmt.Errorf("%w: %s", relationships.ErrState, res.Outcome)
		}
		return nil
	}, "the standing rule covers ana's next acceptance")
	d := r.deliverable(t, r.lee, res.EnvelopeID)
	if len(d.GetHeld()) != 0 || len(d.GetReasons()) != 1 || d.GetReasons()[0].GetParty() != "recipient" ||
		d.GetReasons()[0].GetRule() != rule || d.GetReasons()[0].GetCode() != "standing_approval" {
		t.Fatalf("deliverable %v", d)
	}
	// Ana hears who let it through, not the rule.
	if dec := r.decided(t, r.ana, res.EnvelopeID); dec.GetReasons()[0].GetCode() != "standing_approval" || dec.GetReasons()[0].GetRule() != "" {
		t.Fatalf("ana's decision %v", dec.GetReasons())
	}
	r.approvalEvent(t, home, subj, &alpv1.Event{Body: &alpv1.Event_StandingRuleRevoked{StandingRuleRevoked: &alpv1.StandingRuleRevoked{
		RuleId: rule, PersonId: r.lee.Person.ID}}})
	testkit.Eventually(t, 10*time.Second, func() error {
		if res = send(); res.Outcome != "hold" {
			return fmt.Errorf("%w: %s", relationships.ErrState, res.Outcome)
		}
		return nil
	}, "revoked, the rule covers nothing")
}

// TestOrgPreapprovalCoversCommitment: example.org pre-approves same_org
// with the action meeting: ana's meeting.accept/v1 to lee is delivered
// without asking, the reason naming the org rule.
func TestOrgPreapprovalCoversCommitment(t *testing.T) {
	r := newRig(t)
	rule := relationships.OrgRule{Kind: relationships.SameOrg, Commits: []string{"meeting"}}
	admin := &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_OPERATOR, Id: "op"}
	if err := r.rels.SetOrgRule(context.Background(), home, rule, true, admin); err != nil {
		t.Fatal(err)
	}
	body := `{"in_reply_to":"0190a5b8-7a7e-7c3e-9a8c-2d1f3b4c5d6e","start":"2026-05-04T10:00:00-04:00","duration":"PT30M"}`
	var res result
	testkit.Eventually(t, 10*time.Second, func() error {
		if res = r.send(t, r.ana.Token, "lee@example.org", "meeting.accept/v1", body); res.Outcome != "deliver" {
			return fmt.Errorf("%w: %s", relationships.ErrState, res.Outcome)
		}
		return nil
	}, "the org rule covers ana's acceptance")
	d := r.deliverable(t, r.lee, res.EnvelopeID)
	if len(d.GetReasons()) != 1 || d.GetReasons()[0].GetParty() != "recipient_org" ||
		d.GetReasons()[0].GetRule() != relationships.OrgRuleID(home, rule) || d.GetReasons()[0].GetCode() != "org_preapproved" {
		t.Fatalf("deliverable reasons %v", d.GetReasons())
	}
}
