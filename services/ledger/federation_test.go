package ledger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/mod/sumdb/tlog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ledger"
	"github.com/alpd-project/alpd/services/ledger/consumers"
	"github.com/alpd-project/alpd/services/ledger/receipts"
)

// Two brokers: a.example (Alice's) and b.example (Bob's), each its own NATS
// and ledger, joined only by what federation carries between them.
const (
	tenantA, tenantB = "a.example", "b.example"
	brokerA, brokerB = "broker.a.example", "broker.b.example"
)

// sendAcross publishes a SendRequested of person on e's broker for a
// recipient on the other broker.
func (e *rig) sendAcross(person, to, body string) sent {
	e.t.Helper()
	s := e.newSend(person, body)
	env := s.ev.GetSendRequested().GetEnvelope()
	env.From, env.To = "alice@"+e.tenant, to
	e.publishSend(s)
	return s
}

// remoteDeliverable is policy's Deliverable, on the recipient's broker, of
// an envelope another broker signed: origin_broker, sender_log and the
// sender's commitment from the wire envelope.
func (e *rig) remoteDeliverable(s sent, recipient, senderLog, commitment string) *alpv1.Event {
	env := proto.CloneOf(s.ev.GetSendRequested().GetEnvelope())
	env.SealedBody, env.Tenant = nil, e.tenant
	return &alpv1.Event{Header: &alpv1.EventHeader{Type: "deliverable", SchemaVersion: 1,
		EventId: uuid.Must(uuid.NewV7()).String(), CorrelationId: env.GetId(),
		Tenant: e.tenant, ProducerRole: alpv1.Role_ROLE_POLICY, Occurred: timestamppb.Now()},
		Body: &alpv1.Event_Deliverable{Deliverable: &alpv1.Deliverable{
			Envelope: env, RecipientPersonId: recipient, Outcome: alpv1.Outcome_OUTCOME_DELIVER,
			RuleVersions: []string{"recipient:" + recipient + ":1"},
			Fields:       []*alpv1.FieldVerdict{{Pointer: "/subject", Class: "internal", Action: alpv1.FieldAction_FIELD_ACTION_ALLOW}},
			Views:        []*alpv1.TrustView{{TrustClass: "company", Pointers: []string{"/subject"}}},
			OriginBroker: brokerA, SenderLog: senderLog, SenderCommitment: commitment,
		}}}
}

// status is federation's OutboundStatus event for an envelope person sent.
func (e *rig) status(person, envelopeID string, st *alpv1.OutboundStatus) (*alpv1.Event, string) {
	st.SenderPersonId, st.EnvelopeId = person, envelopeID
	ev := &alpv1.Event{Header: &alpv1.EventHeader{Type: "outbound_status", SchemaVersion: 1,
		EventId: uuid.Must(uuid.NewV7()).String(), CorrelationId: envelopeID,
		Tenant: e.tenant, ProducerRole: alpv1.Role_ROLE_FEDERATION, Occurred: timestamppb.Now()},
		Body: &alpv1.Event_OutboundStatus{OutboundStatus: st}}
	subject, err := streams.OutboundStatusSubject(e.tenant, person, envelopeID)
	if err != nil {
		e.t.Fatal(err)
	}
	return ev, subject
}

func (e *rig) publishStatus(person, envelopeID string, st *alpv1.OutboundStatus) *alpv1.Event {
	e.t.Helper()
	ev, subject := e.status(person, envelopeID, st)
	e.publish(subject, ev)
	return ev
}

func wantCode(t *testing.T, err error, c codes.Code, what string) {
	t.Helper()
	if status.Code(err) != c {
		t.Fatalf("%s: %v, want %s", what, err, c)
	}
}

// exchange runs one envelope from Alice (broker A) to Bob (broker B)
// through the ledger's side of federation, and returns both logs' entries.
type twoBrokers struct {
	a, b         *rig
	la, lb       *instance
	alice, bob   string
	s            sent
	id           string
	commitment   string
	receipt      []byte
	receiptIndex uint64
}

func newTwoBrokers(t *testing.T, dup time.Duration) *twoBrokers {
	x := &twoBrokers{a: newRigOf(t, dup, tenantA), b: newRigOf(t, dup, tenantB), alice: personID(1), bob: personID(2)}
	x.la = x.a.startLedger(ledger.Options{Workers: 1})
	x.lb = x.b.startLedger(ledger.Options{Workers: 1})
	return x
}

// deliver: Alice sends; A's federation asks for her commitment (not
// there yet: NOT_FOUND, then there); B records the envelope from A and
// issues Bob's receipt to Alice's log.
func (x *twoBrokers) deliver(t *testing.T) {
	ctx := context.Background()
	x.s = x.a.sendAcross(x.alice, "bob@"+tenantB, `{"subject":"lunch"}`)
	x.id = x.s.ev.GetSendRequested().GetEnvelope().GetId()
	var resp *ledgerv1.EnvelopeCommitmentResponse
	testkit.Eventually(t, 20*time.Second, func() (err error) {
		resp, err = x.la.svc.EnvelopeCommitment(ctx, &ledgerv1.EnvelopeCommitmentRequest{Tenant: tenantA, PersonId: x.alice, EnvelopeId: x.id})
		if status.Code(err) == codes.NotFound {
			return err
		}
		if err != nil {
			t.Fatal(err)
		}
		return nil
	})
	x.commitment = resp.GetCommitment()
	_, err := x.lb.svc.IssueReceipt(ctx, &ledgerv1.IssueReceiptRequest{Tenant: tenantB, PersonId: x.bob, EnvelopeId: x.id,
		Counterparty: ledgerlog.Origin(tenantA, x.alice)})
	wantCode(t, err, codes.NotFound, "a receipt before the envelope arrived")
	x.b.publishDeliverable(x.b.remoteDeliverable(x.s, x.bob, ledgerlog.Origin(tenantA, x.alice), x.commitment))
	x.b.waitDrained()
	r, err := x.lb.svc.IssueReceipt(ctx, &ledgerv1.IssueReceiptRequest{Tenant: tenantB, PersonId: x.bob, EnvelopeId: x.id,
		Counterparty: ledgerlog.Origin(tenantA, x.alice)})
	if err != nil {
		t.Fatal(err)
	}
	x.receipt, x.receiptIndex = r.GetReceipt(), r.GetIndex()
}

// TestAcrossBrokers: an envelope from a person of one broker to a person of
// another, as federation drives the two ledgers: the sender's commitment
// travels (EnvelopeCommitment), the recipient's envelope.received carries
// it, the recipient's receipt is issued once (IssueReceipt) and recorded
// once on the sender's side from federation's status events, however often
// they come; SENT and FAILED have their entries; the two people's exports
// match across the two tenants.
func TestAcrossBrokers(t *testing.T) {
	x := newTwoBrokers(t, 0)
	ctx := context.Background()
	x.deliver(t)
	// A retry of the issuance gets the same receipt and records nothing.
	again, err := x.lb.svc.IssueReceipt(ctx, &ledgerv1.IssueReceiptRequest{Tenant: tenantB, PersonId: x.bob, EnvelopeId: x.id,
		Counterparty: ledgerlog.Origin(tenantA, x.alice)})
	if err != nil || string(again.GetReceipt()) != string(x.receipt) || again.GetIndex() != x.receiptIndex {
		t.Fatalf("retried issuance: %v (index %d, first %d)", err, again.GetIndex(), x.receiptIndex)
	}
	bob := x.b.checkLog(x.lb.svc.Storage(), x.bob, 3)
	if got := []string{bob[0].Kind, bob[1].Kind, bob[2].Kind}; got[0] != ledgerlog.KindReceived || got[1] != ledgerlog.KindDeliverable || got[2] != ledgerlog.KindReceiptIssued {
		t.Fatalf("bob's log: %v", got)
	}
	if bob[0].Commitment != x.commitment || bob[0].Counterparty != ledgerlog.Origin(tenantA, x.alice) {
		t.Fatalf("bob's received entry %+v, want commitment %s from alice's log", bob[0], x.commitment)
	}

	// A: federation reports SENT, then the receipt — each published twice
	// (a retried publication) — and a failure of a second envelope.
	s2 := x.a.sendAcross(x.alice, "bob@"+tenantB, `{"subject":"dinner"}`)
	id2 := s2.ev.GetSendRequested().GetEnvelope().GetId()
	for range 2 {
		x.a.publishStatus(x.alice, x.id, &alpv1.OutboundStatus{State: alpv1.DeliveryState_DELIVERY_STATE_SENT, RemoteBroker: brokerB, To: "bob@" + tenantB})
	}
	for range 2 {
		x.a.publishStatus(x.alice, x.id, &alpv1.OutboundStatus{State: alpv1.DeliveryState_DELIVERY_STATE_DELIVERED, RemoteBroker: brokerB,
			To: "bob@" + tenantB, Receipt: x.receipt})
	}
	x.a.publishStatus(x.alice, id2, &alpv1.OutboundStatus{State: alpv1.DeliveryState_DELIVERY_STATE_FAILED, RemoteBroker: brokerB,
		To: "bob@" + tenantB, Code: "outbox_expired"})
	x.a.waitDrained()
	alice := x.a.checkLog(x.la.svc.Storage(), x.alice, 5)
	kinds := map[string]int{}
	for _, en := range alice {
		kinds[en.Kind]++
	}
	if kinds[ledgerlog.KindSendRequested] != 2 || kinds[ledgerlog.KindFederationAccepted] != 1 || kinds[ledgerlog.KindReceiptReceived] != 1 || kinds[ledgerlog.KindFederationFailed] != 1 {
		t.Fatalf("alice's log: %v", kinds)
	}
	for _, en := range alice {
		switch en.Kind {
		case ledgerlog.KindFederationAccepted:
			if en.Broker != brokerB || en.EnvelopeID != x.id || en.Counterparty != tenantB {
				t.Errorf("accepted entry %+v", en)
			}
		case ledgerlog.KindFederationFailed:
			if en.Code != "outbox_expired" || en.Broker != brokerB || en.EnvelopeID != id2 {
				t.Errorf("failed entry %+v", en)
			}
		}
	}

	// B's witness cosigns Alice's checkpoint; A records it.
	head, err := x.la.svc.Storage().Head(ctx, tenantA, x.alice)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x.lb.svc.Cosign(ctx, &ledgerv1.CosignRequest{Tenant: tenantB, Checkpoint: head.SignedCheckpoint, LogKeys: ledgerKeys(t, x.la, tenantA)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.la.svc.RecordCosignature(ctx, &ledgerv1.RecordCosignatureRequest{Tenant: tenantA, PersonId: x.alice,
		Checkpoint: head.SignedCheckpoint, Cosignature: c.GetCosignature()}); err != nil {
		t.Fatal(err)
	}
	x.a.checkLog(x.la.svc.Storage(), x.alice, 6)

	// The exports of the two people match across the two brokers, and each
	// verifies the other's receipts (and cosignatures) with the other's keys.
	xa := throughFile(t, exportOfTenant(t, x.la.svc.Storage(), tenantA, x.alice))
	xb := throughFile(t, exportOfTenant(t, x.lb.svc.Storage(), tenantB, x.bob))
	m := ledgerlog.Match(xa, xb)
	if !m.OK() || m.Matched != 1 || m.Unrelated != 1 {
		t.Fatalf("match: %s (matched %d, unrelated %d): %+v", m.Verdict(), m.Matched, m.Unrelated, m.Rows)
	}
	if len(m.A.Receipts) != 1 || m.A.Receipts[0].Status != ledgerlog.ReceiptVerified {
		t.Fatalf("alice's receipts: %+v", m.A.Receipts)
	}
	if len(m.A.Cosignatures) != 1 || m.A.Cosignatures[0].Status != ledgerlog.ReceiptVerified {
		t.Fatalf("alice's cosignatures: %+v", m.A.Cosignatures)
	}
	if *updateFederation {
		writeFederationTestdata(t, xa, xb, ledgerKeys(t, x.lb, tenantB))
	}
	// Without Bob's receipt in Alice's log the envelope is a mismatch.
	xa.Entries = xa.Entries[:2]
	if m := ledgerlog.Match(xa, xb); m.OK() {
		t.Fatal("alice's export without bob's receipt matched")
	}
}

// TestRemoteDeliverableWithoutCommitment: an envelope whose sender's
// broker gave no (or a malformed) commitment is recorded without one, and
// no receipt can be issued for it (FAILED_PRECONDITION, for good).
func TestRemoteDeliverableWithoutCommitment(t *testing.T) {
	b := newRigOf(t, 0, tenantB)
	in := b.startLedger(ledger.Options{Workers: 1})
	bob := personID(2)
	ctx := context.Background()
	for _, c := range []string{"", "sha256:nothex"} {
		s := b.newSend(personID(1), `{"subject":"x"}`)
		b.publishDeliverable(b.remoteDeliverable(s, bob, ledgerlog.Origin(tenantA, personID(1)), c))
		b.waitDrained()
		_, err := in.svc.IssueReceipt(ctx, &ledgerv1.IssueReceiptRequest{Tenant: tenantB, PersonId: bob,
			EnvelopeId: s.ev.GetSendRequested().GetEnvelope().GetId(), Counterparty: tenantA})
		wantCode(t, err, codes.FailedPrecondition, fmt.Sprintf("receipt for an envelope with commitment %q", c))
	}
	entries := b.checkLog(in.svc.Storage(), bob, 4)
	for _, en := range byKind(entries, ledgerlog.KindReceived) {
		if en.Commitment != "" {
			t.Errorf("received entry with commitment %s", en.Commitment)
		}
	}
	if got := in.counter("alpd_ledger_deliveries_without_receipt_total"); got != 3 {
		t.Errorf("%v deliveries counted without receipt, want 3 (two given none, one malformed)", got)
	}
}

// TestOutboundStatusRepeat: a status event redelivered after the dedupe
// window (the bus's Repeat) records nothing twice; a receipt for another
// envelope or person is refused for good.
func TestOutboundStatusRepeat(t *testing.T) {
	x := newTwoBrokers(t, 100*time.Millisecond)
	x.deliver(t)
	ctx := context.Background()
	ev := x.a.publishStatus(x.alice, x.id, &alpv1.OutboundStatus{State: alpv1.DeliveryState_DELIVERY_STATE_DELIVERED,
		RemoteBroker: brokerB, To: "bob@" + tenantB, Receipt: x.receipt})
	fail := x.a.publishStatus(x.alice, x.id, &alpv1.OutboundStatus{State: alpv1.DeliveryState_DELIVERY_STATE_FAILED, Code: "refused"})
	x.a.waitDrained()
	x.a.checkLog(x.la.svc.Storage(), x.alice, 3)
	time.Sleep(300 * time.Millisecond) // past the dedupe window
	w := &consumers.Writer{Store: x.la.svc.Store(), Secrets: x.la.svc.Secrets(), Tenants: alp.Tenants{tenantA}, Logger: slog.Default(),
		Receipts: &receipts.Issuer{Store: x.la.svc.Store(), Keys: x.a.ks}}
	subject, _ := streams.OutboundStatusSubject(tenantA, x.alice, x.id)
	p := fmt.Sprint(consumers.Partition(tenantA, x.alice, 4))
	for _, e := range []*alpv1.Event{ev, fail} {
		if err := w.Handle(ctx, bus.Delivery{Event: e, Subject: subject + "." + p, Repeat: true}); err != nil {
			t.Fatal(err)
		}
	}
	x.la.svc.Store().Flush(ctx)
	x.a.checkLog(x.la.svc.Storage(), x.alice, 3)

	// Bob's receipt is for x.id: under another envelope, or on the log of
	// another person, it is refused, not recorded.
	other := personID(3)
	for _, c := range []struct{ person, id string }{{x.alice, "0192f0c4-0000-7000-8000-000000000000"}, {other, x.id}} {
		e, subj := x.a.status(c.person, c.id, &alpv1.OutboundStatus{State: alpv1.DeliveryState_DELIVERY_STATE_DELIVERED, Receipt: x.receipt})
		err := w.Handle(ctx, bus.Delivery{Event: e, Subject: subj + "." + fmt.Sprint(consumers.Partition(tenantA, c.person, 4))})
		if !bus.IsPermanent(err) {
			t.Errorf("receipt of %s recorded for %s/%s: %v", x.id, c.person, c.id, err)
		}
	}
}

// TestCosign: Bob's broker witnesses Alice's log (C2SP cosignature/v1 with
// its ledger key as b.example/alp/witness): the first checkpoint, then a
// larger one only with a consistency proof from the size it holds, never
// another root at that size (a split view); Alice's broker records the
// cosignature once as checkpoint.cosigned, and a verifier with B's ledger
// keys verifies it.
func TestCosign(t *testing.T) {
	x := newTwoBrokers(t, 0)
	x.deliver(t)
	ctx := context.Background()
	ra := x.la.svc.Storage()
	head, err := ra.Head(ctx, tenantA, x.alice)
	if err != nil {
		t.Fatal(err)
	}
	keysA := ledgerKeys(t, x.la, tenantA)
	cosign := func(cp []byte, old uint64, proof tlog.TreeProof) (*ledgerv1.CosignResponse, error) {
		var hs [][]byte
		for _, h := range proof {
			hs = append(hs, h[:])
		}
		return x.lb.svc.Cosign(ctx, &ledgerv1.CosignRequest{Tenant: tenantB, Checkpoint: cp, LogKeys: keysA, OldSize: old, ConsistencyProof: hs})
	}
	_, err = x.lb.svc.Cosign(ctx, &ledgerv1.CosignRequest{Tenant: tenantB, Checkpoint: head.SignedCheckpoint, LogKeys: ledgerKeys(t, x.lb, tenantB)})
	wantCode(t, err, codes.InvalidArgument, "cosigning a checkpoint with keys that did not sign it")
	c1, err := cosign(head.SignedCheckpoint, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Recorded in Alice's log, once however often it is sent.
	for range 2 {
		if _, err := x.la.svc.RecordCosignature(ctx, &ledgerv1.RecordCosignatureRequest{Tenant: tenantA, PersonId: x.alice,
			Checkpoint: head.SignedCheckpoint, Cosignature: c1.GetCosignature()}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = x.la.svc.RecordCosignature(ctx, &ledgerv1.RecordCosignatureRequest{Tenant: tenantA, PersonId: personID(9),
		Checkpoint: head.SignedCheckpoint, Cosignature: c1.GetCosignature()})
	wantCode(t, err, codes.InvalidArgument, "recording a cosignature of another person's checkpoint")
	x.la.svc.Store().Flush(ctx)
	alice := x.a.checkLog(ra, x.alice, int(head.Size)+1)
	cs := byKind(alice, ledgerlog.KindCheckpointCosigned)
	if len(cs) != 1 || cs[0].Counterparty != tenantB || cs[0].Checkpoint != string(head.SignedCheckpoint) {
		t.Fatalf("cosigned entries %+v", cs)
	}

	// The log grew: the witness wants the size it holds and a proof.
	head2, _ := ra.Head(ctx, tenantA, x.alice)
	_, err = cosign(head2.SignedCheckpoint, 0, nil)
	wantCode(t, err, codes.FailedPrecondition, "cosigning from a size the witness does not hold")
	_, err = cosign(head2.SignedCheckpoint, head.Size, nil)
	wantCode(t, err, codes.FailedPrecondition, "cosigning a larger checkpoint without a consistency proof")
	proof, err := ra.ConsistencyProof(ctx, tenantA, x.alice, head.Size, head2.Size)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cosign(head2.SignedCheckpoint, head.Size, proof); err != nil {
		t.Fatal(err)
	}
	// A checkpoint of the same size with another root, signed by A's real
	// key (an operator rewriting the log): refused as a split view.
	key, err := (&receipts.Issuer{Keys: x.a.ks}).Signer(ctx, tenantA)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ledgerlog.NoteSigner(tenantA, key)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := ledgerlog.SignCheckpoint(ledgerlog.Checkpoint{Origin: head2.Origin, Size: head2.Size, Root: tlog.Hash{1}}, signer)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cosign(forged, head2.Size, nil)
	wantCode(t, err, codes.FailedPrecondition, "cosigning another root at the size the witness holds")
	if !errorHas(err, ledger.CodeSplitView) {
		t.Errorf("split view refused as %v", err)
	}

	// Verify reports the cosignature: verified with B's ledger keys,
	// unverified without them.
	xa := throughFile(t, exportOfTenant(t, ra, tenantA, x.alice))
	rep, err := ledgerlog.Verify(xa, nil, ledgerlog.WithCounterpartyKeys(ledgerKeys(t, x.lb, tenantB)...))
	if err != nil || len(rep.Cosignatures) != 1 || rep.Cosignatures[0].Status != ledgerlog.ReceiptVerified || rep.Cosignatures[0].Size != head.Size {
		t.Fatalf("verify with B's keys: %v %+v", err, rep.Cosignatures)
	}
	rep, _ = ledgerlog.Verify(xa, nil)
	if len(rep.Cosignatures) != 1 || rep.Cosignatures[0].Status != "unverified: no key for "+ledgerlog.WitnessName(tenantB) {
		t.Fatalf("verify without B's keys: %+v", rep.Cosignatures)
	}
}

var updateFederation = flag.Bool("update-federation", false, "rewrite "+federationTestdata+" from TestAcrossBrokers")

// federationTestdata holds two exports of people on two brokers, built by
// TestAcrossBrokers, for alpctl's tests.
const federationTestdata = "../../cmd/alpctl/testdata/federation"

func writeFederationTestdata(t *testing.T, xa, xb *ledgerlog.Export, keysB []string) {
	t.Helper()
	if err := os.MkdirAll(federationTestdata, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, x := range map[string]*ledgerlog.Export{"alice.jsonl": xa, "bob.jsonl": xb} {
		var buf bytes.Buffer
		if err := ledgerlog.WriteExport(&buf, x); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(federationTestdata, name), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	keys := "# b.example's ledger verifier keys\n" + strings.Join(keysB, "\n") + "\n"
	doc, _ := json.MarshalIndent(map[string]any{"wire": "alp-wire/v1", "broker": brokerB, "ledger_keys": map[string][]string{tenantB: keysB}}, "", "  ")
	for name, b := range map[string][]byte{"b-keys.txt": []byte(keys), "b-broker-keys.json": doc} {
		if err := os.WriteFile(filepath.Join(federationTestdata, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func errorHas(err error, code string) bool {
	s, ok := status.FromError(err)
	return ok && len(s.Message()) >= len(code) && s.Message()[:len(code)] == code
}

func ledgerKeys(t *testing.T, in *instance, tenant string) []string {
	t.Helper()
	keys, err := in.svc.Storage().PublicKeys(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range keys {
		out = append(out, k.VerifierKey)
	}
	return out
}
