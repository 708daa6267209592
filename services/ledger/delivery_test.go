package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/service"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/ledger"
	"github.com/alpd-project/alpd/services/ledger/consumers"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

// exchangeOf publishes what a same-broker send from s's sender to
// recipient makes, as ingress and policy publish it: the SendRequested
// (already published by send), policy's Decided and the recipient's
// Deliverable. It returns the Decided and the Deliverable.
func (e *rig) exchangeOf(s sent, recipient string) (*alpv1.Event, *alpv1.Event) {
	e.t.Helper()
	dec := decision(s, recipient)
	e.publishDecided(dec)
	dl := deliverable(s, recipient)
	e.publishDeliverable(dl)
	return dec, dl
}

// throughFile writes x as an export file and reads it back.
func throughFile(t *testing.T, x *ledgerlog.Export) *ledgerlog.Export {
	t.Helper()
	var buf bytes.Buffer
	if err := ledgerlog.WriteExport(&buf, x); err != nil {
		t.Fatal(err)
	}
	y, err := ledgerlog.ReadExport(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

// byKind returns the entries of kind.
func byKind(entries []ledgerlog.Entry, kind string) []ledgerlog.Entry {
	var out []ledgerlog.Entry
	for _, en := range entries {
		if en.Kind == kind {
			out = append(out, en)
		}
	}
	return out
}

// checkExchange checks one same-broker delivery of envelope id from
// sender to recipient in both logs (entries as checkLog returns them):
// the recipient's envelope.received carries the sender's commitment; the
// recipient's receipt for it is in the recipient's log once and, the
// same receipt, in the sender's once; it verifies with the tenant's key
// and proves the received leaf.
func checkExchange(t *testing.T, r storage.Reader, senderLog, recipientLog []ledgerlog.Entry, id string) *ledgerlog.Receipt {
	t.Helper()
	find := func(entries []ledgerlog.Entry, kind string) []ledgerlog.Entry {
		var out []ledgerlog.Entry
		for _, en := range byKind(entries, kind) {
			if en.EnvelopeID == id {
				out = append(out, en)
			}
		}
		return out
	}
	sent, received := find(senderLog, ledgerlog.KindSendRequested), find(recipientLog, ledgerlog.KindReceived)
	issued, got := find(recipientLog, ledgerlog.KindReceiptIssued), find(senderLog, ledgerlog.KindReceiptReceived)
	if len(sent) != 1 || len(received) != 1 || len(issued) != 1 || len(got) != 1 {
		t.Fatalf("envelope %s: %d sent, %d received, %d receipts issued, %d recorded; want one each",
			id, len(sent), len(received), len(issued), len(got))
	}
	rv := received[0]
	if rv.Commitment == "" || rv.Commitment != sent[0].Commitment || rv.Counterparty != sent[0].Log {
		t.Fatalf("received entry %+v\nfor the sent %+v", rv, sent[0])
	}
	ri, rr := issued[0].Receipt, got[0].Receipt
	if ri.Signature != rr.Signature || ri.Index != rv.Index || ri.Log != rv.Log || ri.Counterparty != sent[0].Log ||
		issued[0].Counterparty != sent[0].Log || got[0].Counterparty != rv.Log {
		t.Fatalf("receipt issued %+v (entry %+v), recorded %+v (entry %+v)", ri, issued[0], rr, got[0])
	}
	ctx := context.Background()
	keys, err := r.PublicKeys(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	vs, _ := ledgerlog.Verifiers(keys[0].VerifierKey)
	if _, err := ledgerlog.VerifyReceipt(rr, vs); err != nil {
		t.Fatal(err)
	}
	_, person, _ := ledgerlog.ParseOrigin(rv.Log)
	es, err := r.Entries(ctx, tenant, person, rv.Index, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := ledgerlog.CheckReceiptLeaf(rr, es[0].Leaf); err != nil {
		t.Fatal(err)
	}
	// No opening: the commitment is the sender's.
	if es[0].Opening != nil || es[0].Erased {
		t.Fatalf("received entry stored with an opening %+v", es[0])
	}
	return rr
}

// TestSameBrokerDelivery: a delivery from a person of this broker to
// another gives the recipient's log an envelope.received entry carrying
// the sender's commitment (besides the deliverable) and a receipt for it
// that the sender's log records; both logs export and verify, and Match
// relates the two exports through that receipt.
func TestSameBrokerDelivery(t *testing.T) {
	e := newRig(t, 0)
	in := e.startLedger(ledger.Options{})
	r := in.svc.Storage()
	ana, lee := personID(1), personID(2)
	s := e.send(ana, `{"subject":"Budget","budget":"`+secretValue+`"}`)
	dec, _ := e.exchangeOf(s, lee)
	id := s.ev.GetSendRequested().GetEnvelope().GetId()

	anaLog, leeLog := e.checkLog(r, ana, 3), e.checkLog(r, lee, 3)
	checkExchange(t, r, anaLog, leeLog, id)
	if anaLog[0].Kind != ledgerlog.KindSendRequested || anaLog[1].Kind != ledgerlog.KindDecided || anaLog[2].Kind != ledgerlog.KindReceiptReceived {
		t.Fatalf("ana's log holds %s, %s, %s", anaLog[0].Kind, anaLog[1].Kind, anaLog[2].Kind)
	}
	if len(byKind(leeLog, ledgerlog.KindDeliverable)) != 1 {
		t.Fatalf("lee's log: %+v", leeLog)
	}
	rv := byKind(leeLog, ledgerlog.KindReceived)[0]
	want := ledgerlog.Entry{V: 1, Log: ledgerlog.Origin(tenant, lee), Index: rv.Index, Kind: ledgerlog.KindReceived,
		SourceEvent: dec.GetHeader().GetEventId(), EnvelopeID: id, Commitment: anaLog[0].Commitment,
		Counterparty: ledgerlog.Origin(tenant, ana), Time: ledgerlog.FormatTime(dec.GetHeader().GetOccurred().AsTime())}
	wantLeaf, err := want.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := rv.Canonical(); !bytes.Equal(got, wantLeaf) {
		t.Errorf("received entry\n%s\nwant\n%s", got, wantLeaf)
	}
	t.Logf("received entry: %s", wantLeaf)

	a, b := exportOf(t, r, ana), exportOf(t, r, lee)
	for _, x := range []*ledgerlog.Export{a, b} {
		if rep, err := ledgerlog.Verify(x, nil); err != nil {
			t.Fatalf("%s: %v\n%+v", x.Log, err, rep.Problems)
		}
	}
	// Through files, as alpctl ledger match reads them.
	m := ledgerlog.Match(throughFile(t, a), throughFile(t, b))
	if !m.OK() || m.Matched != 1 || len(m.Rows) != 1 || m.Rows[0].AIndex != 0 || m.Rows[0].BIndex != int64(rv.Index) {
		t.Fatalf("%s\n%+v\n%+v %+v", m.Verdict(), m.Rows, m.A.Problems, m.B.Problems)
	}

	// A person writing to themselves (their own agents): one log, no
	// receipt. A refused envelope: no receipt either.
	self := e.send(ana, `{"subject":"note to self"}`)
	e.exchangeOf(self, ana)
	refused := e.send(ana, `{"subject":"refused"}`)
	rdec := decision(refused, lee)
	rdec.GetDecided().Outcome = alpv1.Outcome_OUTCOME_REFUSE
	e.publishDecided(rdec)
	rdl := deliverable(refused, lee)
	rdl.GetDeliverable().Outcome = alpv1.Outcome_OUTCOME_REFUSE
	rdl.GetDeliverable().Held, rdl.GetDeliverable().Views = nil, nil
	e.publishDeliverable(rdl)
	e.waitDrained()
	// ana: the first exchange (3), the note to self (envelope, decision,
	// deliverable), the refused one (envelope, decision); lee: the first
	// exchange (3) and the refused deliverable.
	anaLog, leeLog = e.checkLog(r, ana, 3+3+2), e.checkLog(r, lee, 3+1)
	if n := len(byKind(anaLog, ledgerlog.KindReceiptReceived)) + len(byKind(leeLog, ledgerlog.KindReceiptIssued)); n != 2 {
		t.Errorf("%d receipt entries, want the first delivery's 2", n)
	}
	if n := len(byKind(anaLog, ledgerlog.KindReceived)) + len(byKind(leeLog, ledgerlog.KindReceived)); n != 1 {
		t.Errorf("%d received entries, want 1", n)
	}
}

// TestSameBrokerDeliveryOnce: the Decided redelivered after each of its
// entries was stored but before it was acknowledged (beyond the dedupe
// window), and published again later: each entry of the delivery is in
// its log once, and both logs hold the same receipt.
func TestSameBrokerDeliveryOnce(t *testing.T) {
	e := newRig(t, 100*time.Millisecond) // a short dedupe window: recognising the leaves is the writer's work
	ana, lee := personID(1), personID(2)
	// Fail once after each of the delivery's leaves: ana's decision, lee's
	// received entry and receipt, ana's copy of it.
	var (
		mu      sync.Mutex
		crashed = map[string]bool{}
		crashes atomic.Int32
	)
	in := e.startLedger(ledger.Options{Workers: 1, AfterPublish: func(_, person string, first uint64, _ int) error {
		mu.Lock()
		key := fmt.Sprint(person, first)
		crash := (person == lee || person == ana && first >= 1) && !crashed[key]
		crashed[key] = true
		mu.Unlock()
		if crash {
			crashes.Add(1)
			time.Sleep(150 * time.Millisecond) // out of the dedupe window
			return errors.New("injected crash after storing a leaf")
		}
		return nil
	}})
	r := in.svc.Storage()
	s := e.send(ana, `{"subject":"once"}`)
	// lee's deliverable is left out: his log is the received entry, then
	// the receipt.
	dec := decision(s, lee)
	e.publishDecided(dec)
	id := s.ev.GetSendRequested().GetEnvelope().GetId()
	e.waitDrained()
	first := checkExchange(t, r, e.checkLog(r, ana, 3), e.checkLog(r, lee, 2), id)
	if n := crashes.Load(); n != 4 {
		t.Fatalf("%d crashes injected, want 4", n)
	}
	// Policy publishing the same Decided again, long after.
	time.Sleep(200 * time.Millisecond)
	e.publishDecided(dec)
	e.waitDrained()
	again := checkExchange(t, r, e.checkLog(r, ana, 3), e.checkLog(r, lee, 2), id)
	if again.Signature != first.Signature {
		t.Error("the receipt changed")
	}
}

// ackOf is the InboxAcked ingress appends when agent acknowledges the item
// of dl's envelope, built as a service builds its events: a command of the
// agent's (no cause), so that the acknowledgements of one item by several
// agents have message ids of their own (one derived from the Deliverable
// would make the inbox stream drop all but the first as duplicates).
func ackOf(b *service.Base, dl *alpv1.Event, agent string, class alpv1.TrustClass, withheld, held []string) *alpv1.Event {
	d := dl.GetDeliverable()
	ev := b.NewEvent("inbox_acked", dl.GetHeader().GetTenant(), nil, d.GetEnvelope().GetId(), &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_AGENT, Id: agent})
	ev.Body = &alpv1.Event_InboxAcked{InboxAcked: &alpv1.InboxAcked{RecipientPersonId: d.GetRecipientPersonId(),
		EnvelopeId: d.GetEnvelope().GetId(), AgentId: agent, AgentClass: class, Withheld: withheld, Held: held}}
	return ev
}

// appendAck appends ev on its acknowledgement subject, written once, as
// ingress does.
func (e *rig) appendAck(ev *alpv1.Event, subjectAgent string) {
	e.t.Helper()
	a := ev.GetInboxAcked()
	subject, err := streams.InboxAckSubject(ev.GetHeader().GetTenant(), a.GetRecipientPersonId(), streams.AgentToken(subjectAgent), a.GetEnvelopeId())
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.b.Append(context.Background(), subject, 0, ev); err != nil {
		e.t.Fatal(err)
	}
	e.published.Add(1)
}

// TestInboxDelivered: each agent's acknowledgement of an item becomes one
// inbox.delivered entry in the recipient's log — agent, trust class, the
// pointers its view left out, the held items it was told about, never a
// value — recorded once however often it is redelivered; an
// acknowledgement whose subject names another agent is refused.
func TestInboxDelivered(t *testing.T) {
	e := newRig(t, 100*time.Millisecond)
	var failed atomic.Bool
	lee := personID(2)
	in := e.startLedger(ledger.Options{AfterPublish: func(_, person string, first uint64, _ int) error {
		if person == lee && first == 4 && !failed.Swap(true) {
			time.Sleep(150 * time.Millisecond)
			return errors.New("injected crash after storing the delivery")
		}
		return nil
	}})
	r := in.svc.Storage()
	ana := personID(1)
	s := e.send(ana, `{"subject":"Budget","budget":"`+secretValue+`"}`)
	_, dl := e.exchangeOf(s, lee)
	e.checkLog(r, lee, 3)
	ingress := service.NewBase(alpv1.Role_ROLE_INGRESS, service.Deps{Bus: e.b})
	dot := ackOf(&ingress, dl, "dot", alpv1.TrustClass_TRUST_CLASS_COMPANY, nil, nil)
	muse := ackOf(&ingress, dl, "https://muse.example/client", alpv1.TrustClass_TRUST_CLASS_CONSUMER,
		[]string{"/budget"}, []string{"c-" + s.ev.GetSendRequested().GetEnvelope().GetId()})
	e.appendAck(dot, "dot")
	e.appendAck(muse, "https://muse.example/client")
	// An acknowledgement filed under another agent's subject.
	forged := ackOf(&ingress, dl, "mallory", alpv1.TrustClass_TRUST_CLASS_COMPANY, nil, nil)
	e.appendAck(forged, "dot2")
	e.waitDrained()
	leeLog := e.checkLog(r, lee, 5)
	got := byKind(leeLog, ledgerlog.KindInboxDelivered)
	if len(got) != 2 {
		t.Fatalf("%d deliveries recorded, want 2", len(got))
	}
	id := s.ev.GetSendRequested().GetEnvelope().GetId()
	for _, c := range []struct {
		ev   *alpv1.Event
		want ledgerlog.Entry
	}{
		{dot, ledgerlog.Entry{Agent: "dot", TrustClass: "company"}},
		{muse, ledgerlog.Entry{Agent: "https://muse.example/client", TrustClass: "consumer", Withheld: []string{"/budget"}, HeldIDs: []string{"c-" + id}}},
	} {
		var en ledgerlog.Entry
		for _, g := range got {
			if g.SourceEvent == c.ev.GetHeader().GetEventId() {
				en = g
			}
		}
		w := c.want
		w.V, w.Log, w.Index, w.Kind = 1, ledgerlog.Origin(tenant, lee), en.Index, ledgerlog.KindInboxDelivered
		w.SourceEvent, w.EnvelopeID, w.Time = c.ev.GetHeader().GetEventId(), id, ledgerlog.FormatTime(c.ev.GetHeader().GetOccurred().AsTime())
		wantLeaf, err := w.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		if gotLeaf, _ := en.Canonical(); !bytes.Equal(gotLeaf, wantLeaf) {
			t.Errorf("delivery to %s\n%s\nwant\n%s", w.Agent, gotLeaf, wantLeaf)
		}
		t.Logf("delivery entry: %s", wantLeaf)
	}
	if !failed.Load() {
		t.Fatal("no crash injected")
	}
	if d := in.counter("alpd_ledger_append_duplicates_total"); d < 1 {
		t.Errorf("%v duplicates recognised: the redelivered acknowledgement was not looked for", d)
	}
	leaves, _ := e.streamLeaves(lee)
	for i, leaf := range leaves {
		if bytes.Contains(leaf, []byte(secretValue)) {
			t.Errorf("leaf %d holds the value", i)
		}
	}
	if rep, err := ledgerlog.Verify(exportOf(t, r, lee), nil); err != nil {
		t.Fatalf("%v\n%+v", err, rep.Problems)
	}
	// The refusal of the forged one is permanent.
	subject, _ := streams.InboxAckSubject(tenant, lee, streams.AgentToken("dot2"), id)
	w := &consumers.Writer{Store: in.svc.Store(), Secrets: in.svc.Secrets(), Tenants: alp.Tenants{tenant}, Logger: slog.Default()}
	if err := w.Handle(context.Background(), bus.Delivery{Event: forged, Subject: subject + ".0"}); !bus.IsPermanent(err) {
		t.Errorf("handling the forged acknowledgement: %v, want a permanent error", err)
	}
}
