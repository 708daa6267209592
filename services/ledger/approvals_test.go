package ledger_test

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/ledger"
)

func approvalsEvent(kind string) *alpv1.Event {
	return &alpv1.Event{Header: &alpv1.EventHeader{Type: kind, SchemaVersion: 1, EventId: uuid.Must(uuid.NewV7()).String(),
		Tenant: tenant, ProducerRole: alpv1.Role_ROLE_APPROVALS, Occurred: timestamppb.Now()}}
}

// TestApprovalsBecomeEntries: an item's request and decision and a
// standing rule's creation and revocation are each one entry of the
// person's log, with what the item is about and never the held values;
// the log verifies; a decision handled again after a crash, and the same
// events published again beyond the dedupe window, append nothing more.
func TestApprovalsBecomeEntries(t *testing.T) {
	e := newRig(t, 100*time.Millisecond)
	lee := personID(2)
	var crashes atomic.Int32
	in := e.startLedger(ledger.Options{Workers: 1, AfterPublish: func(_, person string, first uint64, _ int) error {
		if person == lee && first == 1 && crashes.Add(1) == 1 {
			return errors.New("injected crash after storing the decision's leaf")
		}
		return nil
	}})
	envelope := uuid.Must(uuid.NewV7()).String()
	expires := time.Date(2026, 12, 9, 10, 0, 0, 0, time.UTC)
	item, _ := streams.ApprovalItemSubject(tenant, lee, "h1")
	rule, _ := streams.StandingRuleSubject(tenant, lee, "r1")

	req := approvalsEvent("approval_requested")
	req.Body = &alpv1.Event_ApprovalRequested{ApprovalRequested: &alpv1.ApprovalRequested{ItemId: "h1", PersonId: lee,
		Kind: alpv1.HeldKind_HELD_KIND_COMMITMENT, EnvelopeId: envelope, From: "ana@partner.example", Type: "meeting.accept/v1",
		Commits: "meeting", Payload: &alpv1.SealedBody{Ciphertext: []byte(secretValue)}, PayloadDigest: "ab12",
		Reasons:     []*alpv1.Reason{{Party: "broker", Code: "commitment_held", Message: secretMessage}},
		BindingCode: "K7Q-4M", Expires: timestamppb.New(expires)}}
	dec := approvalsEvent("approval_decided")
	dec.Body = &alpv1.Event_ApprovalDecided{ApprovalDecided: &alpv1.ApprovalDecided{ItemId: "h1", PersonId: lee,
		Kind: alpv1.HeldKind_HELD_KIND_COMMITMENT, EnvelopeId: envelope, State: alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ALWAYS,
		PayloadDigest: "ab12", StandingRuleId: "r1", Pointers: []string{"/start"}, From: "ana@partner.example", Type: "meeting.accept/v1"}}
	created := approvalsEvent("standing_rule_created")
	created.Body = &alpv1.Event_StandingRuleCreated{StandingRuleCreated: &alpv1.StandingRuleCreated{RuleId: "r1", PersonId: lee,
		Type: "meeting.accept/v1", Counterparty: "ana@partner.example", Action: "meeting", Expires: timestamppb.New(expires), FromItemId: "h1"}}
	revoked := approvalsEvent("standing_rule_revoked")
	revoked.Body = &alpv1.Event_StandingRuleRevoked{StandingRuleRevoked: &alpv1.StandingRuleRevoked{RuleId: "r1", PersonId: lee}}

	e.publish(item, req)
	e.publish(item, dec)
	r := in.svc.Storage()
	e.checkLog(r, lee, 2)
	e.publish(rule, created)
	e.publish(rule, revoked)
	entries := e.checkLog(r, lee, 4)
	e.waitDrained()
	if crashes.Load() != 1 {
		t.Fatalf("the decision's append failed %d times, want once", crashes.Load())
	}

	want := []ledgerlog.Entry{
		{Kind: ledgerlog.KindApprovalRequested, EnvelopeID: envelope, Counterparty: "partner.example", Item: "h1",
			HeldKind: ledgerlog.HeldCommitment, PayloadDigest: "ab12", BindingCode: "K7Q-4M", Expires: ledgerlog.FormatTime(expires)},
		{Kind: ledgerlog.KindApprovalDecision, EnvelopeID: envelope, Counterparty: "partner.example", Item: "h1",
			HeldKind: ledgerlog.HeldCommitment, State: ledgerlog.StateApprovedAlways, PayloadDigest: "ab12", Rule: "r1"},
		{Kind: ledgerlog.KindRuleCreated, Counterparty: "partner.example", Rule: "r1", Type: "meeting.accept/v1", Action: "meeting",
			Expires: ledgerlog.FormatTime(expires)},
		{Kind: ledgerlog.KindRuleRevoked, Rule: "r1"},
	}
	sources := []*alpv1.Event{req, dec, created, revoked}
	for i, w := range want {
		got := entries[i]
		w.V, w.Log, w.Index, w.SourceEvent, w.Time = got.V, got.Log, got.Index, sources[i].GetHeader().GetEventId(), got.Time
		if got.Kind != w.Kind || got.EnvelopeID != w.EnvelopeID || got.Counterparty != w.Counterparty || got.Item != w.Item ||
			got.HeldKind != w.HeldKind || got.PayloadDigest != w.PayloadDigest || got.BindingCode != w.BindingCode ||
			got.Expires != w.Expires || got.State != w.State || got.Rule != w.Rule || got.Type != w.Type || got.Action != w.Action ||
			got.SourceEvent != w.SourceEvent || got.Commitment != "" || len(got.Reasons) != 0 {
			t.Errorf("entry %d:\n got %+v\nwant %+v", i, got, w)
		}
	}
	leaves, _ := e.streamLeaves(lee)
	for i, leaf := range leaves {
		if bytes.Contains(leaf, []byte(secretValue)) || bytes.Contains(leaf, []byte(secretMessage)) || bytes.Contains(leaf, []byte("ana@")) {
			t.Errorf("leaf %d holds a held value, a reason's text or an address: %s", i, leaf)
		}
	}
	if rep, err := ledgerlog.Verify(exportOf(t, r, lee), nil); err != nil {
		t.Fatalf("verify: %v (%+v)", err, rep)
	}

	// Approvals' events again, beyond the dedupe window: nothing new.
	time.Sleep(200 * time.Millisecond)
	for _, ev := range []*alpv1.Event{req, dec} {
		e.publish(item, ev)
	}
	e.publish(rule, created)
	e.waitDrained()
	e.checkLog(r, lee, 4)
}

// TestApprovalForAnotherLogIsRefused: a decision whose subject names
// another person than the event is not recorded in either log.
func TestApprovalForAnotherLogIsRefused(t *testing.T) {
	e := newRig(t, 0)
	in := e.startLedger(ledger.Options{})
	ana, lee := personID(1), personID(2)
	dec := approvalsEvent("approval_decided")
	dec.Body = &alpv1.Event_ApprovalDecided{ApprovalDecided: &alpv1.ApprovalDecided{ItemId: "h1", PersonId: ana,
		Kind: alpv1.HeldKind_HELD_KIND_COMMITMENT, EnvelopeId: uuid.Must(uuid.NewV7()).String(), State: alpv1.ApprovalState_APPROVAL_STATE_DENIED}}
	wrong, _ := streams.ApprovalItemSubject(tenant, lee, "h1")
	e.publish(wrong, dec)
	// A pending "decision" decides nothing either.
	pending := approvalsEvent("approval_decided")
	pending.Body = &alpv1.Event_ApprovalDecided{ApprovalDecided: &alpv1.ApprovalDecided{ItemId: "h2", PersonId: ana,
		Kind: alpv1.HeldKind_HELD_KIND_COMMITMENT, EnvelopeId: uuid.Must(uuid.NewV7()).String(), State: alpv1.ApprovalState_APPROVAL_STATE_PENDING}}
	right, _ := streams.ApprovalItemSubject(tenant, ana, "h2")
	e.publish(right, pending)
	// Then one that is recorded, so the others were handled before it.
	revoked := approvalsEvent("standing_rule_revoked")
	revoked.Body = &alpv1.Event_StandingRuleRevoked{StandingRuleRevoked: &alpv1.StandingRuleRevoked{RuleId: "r9", PersonId: ana}}
	rule, _ := streams.StandingRuleSubject(tenant, ana, "r9")
	e.publish(rule, revoked)
	e.waitDrained()
	entries := e.checkLog(in.svc.Storage(), ana, 1)
	if entries[0].Kind != ledgerlog.KindRuleRevoked {
		t.Fatalf("ana's log %+v", entries)
	}
	if _, err := in.svc.Storage().Head(t.Context(), tenant, lee); err == nil {
		t.Error("lee has a log")
	}
}
