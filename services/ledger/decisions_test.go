package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ledger"
	"github.com/alpd-project/alpd/services/ledger/consumers"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

// Strings a decision carries that must never reach a leaf: reason
// messages (prose that may quote a rule) and anything of the bodies.
const (
	secretMessage = "rule text: deny budget above 4711"
	secretValue   = "budget-value-4711"
)

// decision is policy's sender-side Decided on s's envelope, with per-field
// verdicts (one denied by the recipient's organization, whose policy id
// the sender may not see), caused by the SendRequested.
func decision(s sent, recipient string) *alpv1.Event {
	sr := s.ev.GetSendRequested()
	env := proto.CloneOf(sr.GetEnvelope())
	env.SealedBody = &alpv1.SealedBody{Ciphertext: []byte(secretValue)}
	return &alpv1.Event{Header: &alpv1.EventHeader{Type: "decided", SchemaVersion: 1,
		EventId: uuid.Must(uuid.NewV7()).String(), CausationId: s.ev.GetHeader().GetEventId(), CorrelationId: env.GetId(),
		Tenant: tenant, ProducerRole: alpv1.Role_ROLE_POLICY, Occurred: timestamppb.Now()},
		Body: &alpv1.Event_Decided{Decided: &alpv1.Decided{
			Envelope: env, Outcome: alpv1.Outcome_OUTCOME_DELIVER_PARTIAL, SenderPersonId: s.person,
			RecipientPersonId: recipient, RecipientTenant: tenant,
			RuleVersions: []string{"sender_org:example.org:3", "sender:" + s.person + ":1"},
			Fields: []*alpv1.FieldVerdict{
				{Pointer: "/budget", Class: "confidential", Action: alpv1.FieldAction_FIELD_ACTION_DENY,
					Reasons: []*alpv1.Reason{{Party: "recipient_org", Code: "confidential_egress", Message: secretMessage}}},
				{Pointer: "/note", Class: "public", Freetext: true, Action: alpv1.FieldAction_FIELD_ACTION_DENY, Dlp: []string{"card"},
					Reasons: []*alpv1.Reason{{Party: "sender_org", Rule: "no-cards", Code: "dlp_card", Message: secretMessage}}},
				{Pointer: "/subject", Class: "internal", Action: alpv1.FieldAction_FIELD_ACTION_ALLOW},
			},
		}}}
}

// deliverable is policy's recipient-side Deliverable of s's envelope for
// recipient, caused by the SendRequested: a commitment held, confidential
// fields for company agents only, the views sealed (their bytes must not
// reach the ledger).
func deliverable(s sent, recipient string) *alpv1.Event {
	env := proto.CloneOf(s.ev.GetSendRequested().GetEnvelope())
	env.SealedBody = nil
	sealed := &alpv1.SealedBody{Ciphertext: []byte(secretValue)}
	return &alpv1.Event{Header: &alpv1.EventHeader{Type: "deliverable", SchemaVersion: 1,
		EventId: uuid.Must(uuid.NewV7()).String(), CausationId: s.ev.GetHeader().GetEventId(), CorrelationId: env.GetId(),
		Tenant: tenant, ProducerRole: alpv1.Role_ROLE_POLICY, Occurred: timestamppb.Now()},
		Body: &alpv1.Event_Deliverable{Deliverable: &alpv1.Deliverable{
			Envelope: env, RecipientPersonId: recipient, SenderPersonId: s.person, Outcome: alpv1.Outcome_OUTCOME_HOLD,
			Reasons:      []*alpv1.Reason{{Party: "broker", Code: "commitment_held", Message: secretMessage}},
			RuleVersions: []string{"recipient:" + recipient + ":2"},
			Fields: []*alpv1.FieldVerdict{
				{Pointer: "/start", Class: "internal", Action: alpv1.FieldAction_FIELD_ACTION_HOLD,
					Reasons: []*alpv1.Reason{{Party: "recipient", Rule: "ask-before-meetings", Code: "commitment_held", Message: secretMessage}}},
				{Pointer: "/budget", Class: "confidential", Action: alpv1.FieldAction_FIELD_ACTION_ALLOW},
			},
			Views: []*alpv1.TrustView{
				{TrustClass: "company", Body: sealed, Pointers: []string{"/budget", "/subject"}},
				{TrustClass: "consumer", Body: sealed, Pointers: []string{"/subject"}},
			},
			Held: []*alpv1.HeldItem{
				{Id: "h-" + env.GetId(), Kind: alpv1.HeldKind_HELD_KIND_COMMITMENT, Pointers: []string{"/start"}, Commits: "meeting", Body: sealed},
				{Id: "c-" + env.GetId(), Kind: alpv1.HeldKind_HELD_KIND_CONFIDENTIAL_FIELDS, Pointers: []string{"/budget"}, Body: sealed},
			},
			UntrustedText: true,
		}}}
}

func (e *rig) publishDecided(ev *alpv1.Event) {
	e.t.Helper()
	d := ev.GetDecided()
	subject, err := streams.DecidedSubject(e.tenant, d.GetSenderPersonId(), d.GetEnvelope().GetId())
	if err != nil {
		e.t.Fatal(err)
	}
	e.publish(subject, ev)
}

func (e *rig) publishDeliverable(ev *alpv1.Event) {
	e.t.Helper()
	d := ev.GetDeliverable()
	subject, err := streams.DeliverSubject(e.tenant, d.GetRecipientPersonId(), d.GetEnvelope().GetId())
	if err != nil {
		e.t.Fatal(err)
	}
	e.publish(subject, ev)
}

// TestDecisionsBecomeEntries: a Decided becomes a policy.decided entry
// after its envelope's entry on the sender's log, and a Deliverable a
// policy.deliverable entry on the recipient's: pointers, classes,
// actions, every reason's party, policy id and code, rule versions, held
// items and views — never a reason's message, a value or a sealed body.
// (The sender is on this broker, so the recipient's log also records the
// envelope as received and the receipt it gave the sender, whose log
// records it: TestSameBrokerDelivery.) The logs verify as an export.
func TestDecisionsBecomeEntries(t *testing.T) {
	e := newRig(t, 0)
	in := e.startLedger(ledger.Options{})
	ana, lee := personID(1), personID(2)
	s := e.send(ana, `{"subject":"Budget","budget":"`+secretValue+`"}`)
	dec := decision(s, lee)
	e.publishDecided(dec)
	dl := deliverable(s, lee)
	e.publishDeliverable(dl)

	r := in.svc.Storage()
	entries := e.checkLog(r, ana, 3)
	decidedAt := slices.IndexFunc(entries, func(en ledgerlog.Entry) bool { return en.Kind == ledgerlog.KindDecided })
	if entries[0].Kind != ledgerlog.KindSendRequested || decidedAt < 1 {
		t.Fatalf("ana's log holds %s first, its decision at %d; want the envelope, then its decision", entries[0].Kind, decidedAt)
	}
	want := ledgerlog.Entry{V: 1, Log: ledgerlog.Origin(tenant, ana), Index: uint64(decidedAt), Kind: ledgerlog.KindDecided,
		SourceEvent: dec.GetHeader().GetEventId(), EnvelopeID: s.ev.GetSendRequested().GetEnvelope().GetId(),
		Counterparty: "other.example", Outcome: ledgerlog.OutcomeDeliverPartial,
		Fields: []ledgerlog.FieldVerdict{
			{Pointer: "/budget", Class: "confidential", Action: ledgerlog.ActionDeny,
				Reasons: []ledgerlog.Reason{{Party: "recipient_org", Code: "confidential_egress"}}},
			{Pointer: "/note", Class: "public", Action: ledgerlog.ActionDeny,
				Reasons: []ledgerlog.Reason{{Party: "sender_org", Policy: "no-cards", Code: "dlp_card"}}},
			{Pointer: "/subject", Class: "internal", Action: ledgerlog.ActionAllow},
		},
		RuleVersions: dec.GetDecided().GetRuleVersions(),
		Time:         ledgerlog.FormatTime(dec.GetHeader().GetOccurred().AsTime())}
	wantLeaf, err := want.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := entries[decidedAt].Canonical(); !bytes.Equal(got, wantLeaf) {
		t.Errorf("decided entry\n%s\nwant\n%s", got, wantLeaf)
	}

	leeLog := e.checkLog(r, lee, 3)
	at := slices.IndexFunc(leeLog, func(en ledgerlog.Entry) bool { return en.Kind == ledgerlog.KindDeliverable })
	if at < 0 {
		t.Fatalf("no deliverable in lee's log %+v", leeLog)
	}
	got := leeLog[at]
	wantD := ledgerlog.Entry{V: 1, Log: ledgerlog.Origin(tenant, lee), Index: uint64(at), Kind: ledgerlog.KindDeliverable,
		SourceEvent: dl.GetHeader().GetEventId(), EnvelopeID: want.EnvelopeID, Counterparty: "example.org",
		Outcome: ledgerlog.OutcomeHold, Reasons: []ledgerlog.Reason{{Party: "broker", Code: "commitment_held"}},
		Fields: []ledgerlog.FieldVerdict{
			{Pointer: "/start", Class: "internal", Action: ledgerlog.ActionHold,
				Reasons: []ledgerlog.Reason{{Party: "recipient", Policy: "ask-before-meetings", Code: "commitment_held"}}},
			{Pointer: "/budget", Class: "confidential", Action: ledgerlog.ActionAllow},
		},
		RuleVersions: []string{"recipient:" + lee + ":2"},
		Held: []ledgerlog.HeldItem{
			{ID: "h-" + want.EnvelopeID, Kind: ledgerlog.HeldCommitment, Pointers: []string{"/start"}, Commits: "meeting"},
			{ID: "c-" + want.EnvelopeID, Kind: ledgerlog.HeldConfidentialFields, Pointers: []string{"/budget"}},
		},
		Views: []ledgerlog.View{{TrustClass: "company", Pointers: []string{"/budget", "/subject"}},
			{TrustClass: "consumer", Pointers: []string{"/subject"}}},
		Time: ledgerlog.FormatTime(dl.GetHeader().GetOccurred().AsTime())}
	wantLeaf, err = wantD.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if gotLeaf, _ := got.Canonical(); !bytes.Equal(gotLeaf, wantLeaf) {
		t.Errorf("deliverable entry\n%s\nwant\n%s", gotLeaf, wantLeaf)
	}

	for _, p := range []string{ana, lee} {
		leaves, evs := e.streamLeaves(p)
		for i, leaf := range leaves {
			for _, secret := range []string{secretMessage, secretValue} {
				if bytes.Contains(leaf, []byte(secret)) || bytes.Contains(evs[i].GetLedgerEntryAppended().GetSealedOpening(), []byte(secret)) {
					t.Errorf("leaf %d of %s holds %q", i, p, secret)
				}
			}
		}
		// The whole log verifies as an auditor's export does.
		if rep, err := ledgerlog.Verify(exportOf(t, r, p), nil); err != nil {
			t.Errorf("%s's log: %v\n%+v", p, err, rep.Problems)
		}
	}
}

// TestRedeliveredDecisionAppendsOnce: a Decided whose writer failed after
// storing its leaf is redelivered (past the server's dedupe window) and
// recognised in the log; the same event published again is skipped. One
// entry either way.
func TestRedeliveredDecisionAppendsOnce(t *testing.T) {
	e := newRig(t, 100*time.Millisecond) // a short dedupe window: recognising the leaf is the store's work
	ana := personID(1)
	var appends atomic.Int32
	in := e.startLedger(ledger.Options{Workers: 1, AfterPublish: func(_, person string, first uint64, _ int) error {
		if person == ana && first == 1 && appends.Add(1) == 1 {
			return errors.New("injected crash after storing the decision's leaf")
		}
		return nil
	}})
	s := e.send(ana, `{"subject":"x"}`)
	dec := decision(s, "")
	e.publishDecided(dec)
	r := in.svc.Storage()
	e.checkLog(r, ana, 2)
	e.waitDrained()
	e.checkLog(r, ana, 2)
	if appends.Load() != 1 {
		t.Fatalf("the decision's append failed %d times, want once", appends.Load())
	}
	if d := in.counter("alpd_ledger_append_duplicates_total"); d < 1 {
		t.Errorf("%v duplicates recognised: the redelivered decision was not looked for", d)
	}
	// Policy publishing the same event again, beyond the dedupe window.
	time.Sleep(200 * time.Millisecond)
	e.publishDecided(dec)
	e.waitDrained()
	e.checkLog(r, ana, 2)
}

// TestDecisionFollowsItsEnvelope: a Decided the writer meets before its
// envelope's SendRequested waits for it, so the log holds the envelope's
// entry first; many envelopes of one person, each decided at once, keep
// that order under two workers per partition.
func TestDecisionFollowsItsEnvelope(t *testing.T) {
	e := newRig(t, 0)
	ana := personID(1)
	s := e.newSend(ana, `{"subject":"first"}`)
	e.publishDecided(decision(s, ""))
	in := e.startLedger(ledger.Options{Workers: 2})
	// The decision has been tried (and refused for now) before the
	// envelope arrives.
	p := fmt.Sprint(consumers.Partition(tenant, ana, 4))
	testkit.Eventually(t, 10*time.Second, func() error {
		c, err := e.b.JetStream().Consumer(context.Background(), e.b.StreamName(streams.LedgerWork), e.b.StreamName("ledger_p"+p))
		if err != nil {
			return err
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return err
		}
		if info.Delivered.Consumer < 1 {
			return errors.New("the decision was not delivered yet")
		}
		return nil
	})
	time.Sleep(50 * time.Millisecond)
	e.publishSend(s)
	entries := e.checkLog(in.svc.Storage(), ana, 2)
	if entries[0].Kind != ledgerlog.KindSendRequested || entries[1].Kind != ledgerlog.KindDecided {
		t.Fatalf("log holds %s, %s: the decision came before its envelope", entries[0].Kind, entries[1].Kind)
	}
	for i := range 20 {
		s := e.send(ana, fmt.Sprintf(`{"subject":"n%d"}`, i))
		e.publishDecided(decision(s, ""))
	}
	entries = e.checkLog(in.svc.Storage(), ana, 42)
	seen := map[string]bool{}
	for i, en := range entries {
		switch en.Kind {
		case ledgerlog.KindSendRequested:
			seen[en.EnvelopeID] = true
		case ledgerlog.KindDecided:
			if !seen[en.EnvelopeID] {
				t.Errorf("entry %d: the decision on %s comes before its envelope", i, en.EnvelopeID)
			}
		}
	}
	if len(seen) != 21 {
		t.Errorf("%d envelopes recorded", len(seen))
	}
}

// TestBacklogOfDecisionsDoesNotStall: policy catching up after an outage
// decides envelopes created long before, whose entries are further back in
// the sender's log than a decision looks: the decisions are written at once,
// not after a wait and a retry each (which held one person's partition for
// about a minute).
func TestBacklogOfDecisionsDoesNotStall(t *testing.T) {
	e := newRig(t, 0)
	ana := personID(1)
	in := e.startLedger(ledger.Options{Workers: 1})
	const n = 80 // more than the leaves HasLeafOf reads
	var sends []sent
	for i := range n {
		s := e.send(ana, fmt.Sprintf(`{"subject":"b%d"}`, i))
		// Sent before the outage.
		s.ev.GetSendRequested().GetEnvelope().Created = timestamppb.New(time.Now().Add(-time.Minute))
		sends = append(sends, s)
	}
	e.checkLog(in.svc.Storage(), ana, n)
	start := time.Now()
	for _, s := range sends {
		e.publishDecided(decision(s, ""))
	}
	e.checkLog(in.svc.Storage(), ana, 2*n)
	if d := time.Since(start); d > 15*time.Second {
		t.Logf("the backlog took %s", d)
	}
}

// TestDecisionForAnotherLogIsRefused: a decision whose subject names
// another person than its body is refused for good (a permanent error, to
// the dead letters), never written into either log.
func TestDecisionForAnotherLogIsRefused(t *testing.T) {
	e := newRig(t, 0)
	in := e.startLedger(ledger.Options{})
	ana, lee := personID(1), personID(2)
	s := e.send(ana, `{"subject":"x"}`)
	dec := decision(s, "")
	subject, _ := streams.DecidedSubject(tenant, lee, s.ev.GetSendRequested().GetEnvelope().GetId())
	e.publish(subject, dec)
	p := fmt.Sprint(consumers.Partition(tenant, lee, 4))
	testkit.Eventually(t, 10*time.Second, func() error {
		c, err := e.b.JetStream().Consumer(context.Background(), e.b.StreamName(streams.LedgerWork), e.b.StreamName("ledger_p"+p))
		if err != nil {
			return err
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return err
		}
		if info.Delivered.Consumer < 1 {
			return errors.New("the decision was not delivered yet")
		}
		return nil
	})
	e.checkLog(in.svc.Storage(), ana, 1)
	if _, err := in.svc.Storage().Head(context.Background(), tenant, lee); !errors.Is(err, storage.ErrNoLog) {
		t.Errorf("lee's log: %v", err)
	}
	// The refusal is permanent: the writer does not retry it.
	w := &consumers.Writer{Store: in.svc.Store(), Secrets: in.svc.Secrets(), Tenants: alp.Tenants{tenant}, Logger: slog.Default()}
	err := w.Handle(context.Background(), bus.Delivery{Event: dec, Subject: subject + "." + p})
	if !bus.IsPermanent(err) {
		t.Errorf("handling it again: %v, want a permanent error", err)
	}
}

// exportOf reads a person's log through the read interface into an
// export, as GET /v1/ledger/export writes it.
func exportOf(t *testing.T, r storage.Reader, person string) *ledgerlog.Export {
	t.Helper()
	return exportOfTenant(t, r, tenant, person)
}

// exportOfTenant is exportOf for a person of tenant.
func exportOfTenant(t *testing.T, r storage.Reader, tenant, person string) *ledgerlog.Export {
	t.Helper()
	ctx := context.Background()
	head, err := r.Head(ctx, tenant, person)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := r.PublicKeys(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	x := &ledgerlog.Export{Log: head.Origin, Checkpoint: head.SignedCheckpoint}
	for _, k := range keys {
		ek, err := ledgerlog.NewExportKey(tenant, k.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		x.Keys = append(x.Keys, ek)
	}
	es, err := r.Entries(ctx, tenant, person, 0, int(head.Size))
	if err != nil {
		t.Fatal(err)
	}
	for _, se := range es {
		xe := ledgerlog.ExportEntry{Leaf: se.Leaf, LeafHash: ledgerlog.LeafHash(se.Leaf)}
		if se.Opening != nil {
			xe.Salt, xe.Digest = se.Opening.Salt, se.Opening.Digest
		}
		x.Entries = append(x.Entries, xe)
	}
	return x
}

// TestBrokerNoticeIsTheSend: the broker's own connection.accept/v1 notice
// (policy's decision with no SendRequested behind it) is recorded on the
// person's log as its send, committing to the body, then as its decision;
// the decision delivered again records nothing more.
func TestBrokerNoticeIsTheSend(t *testing.T) {
	e := newRig(t, 0)
	in := e.startLedger(ledger.Options{})
	lee := personID(2)
	s := e.newSend(lee, `{"in_reply_to":"01a23748-f2a3-720b-aa57-aaaa29d7a88b"}`)
	env := s.ev.GetSendRequested().GetEnvelope()
	env.Type, env.To, env.FromAgent = msgtypes.ConnectionAccept, "ana@a.example", "alpd.policy"
	dec := &alpv1.Event{Header: &alpv1.EventHeader{Type: "decided", SchemaVersion: 1, EventId: uuid.Must(uuid.NewV7()).String(),
		CorrelationId: env.GetId(), Tenant: tenant, ProducerRole: alpv1.Role_ROLE_POLICY, Occurred: timestamppb.Now()},
		Body: &alpv1.Event_Decided{Decided: &alpv1.Decided{Envelope: env, Outcome: alpv1.Outcome_OUTCOME_DELIVER, SenderPersonId: lee,
			Reasons: []*alpv1.Reason{{Party: "broker", Code: "connection_accepted"}}}}}
	e.publishDecided(dec)
	entries := e.checkLog(in.svc.Storage(), lee, 2)
	if entries[0].Kind != ledgerlog.KindSendRequested || entries[0].EnvelopeID != env.GetId() || entries[0].Commitment == "" ||
		entries[1].Kind != ledgerlog.KindDecided {
		t.Fatalf("lee's log: %+v", entries)
	}
	// Published again (as a redelivery would be): still two entries.
	again := proto.CloneOf(dec)
	e.publishDecided(again)
	e.waitDrained()
	e.checkLog(in.svc.Storage(), lee, 2)
}
