package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger"
)

// TestReceipts: a receipt issued for an envelope's entry verifies with the
// tenant's ledger key and proves the leaf; issuing and recording receipts
// append receipt entries through the same fork-free append.
func TestReceipts(t *testing.T) {
	e := newRig(t, 0)
	// Checkpoint rounds too rare to help: IssueReceipt signs at once.
	in := e.startLedger(ledger.Options{Workers: 1, CheckpointInterval: time.Hour})
	a, b := personID(1), personID(2)
	s0 := e.send(a, `{"m":0}`)
	e.send(a, `{"m":1}`)
	e.waitDrained()
	ctx := context.Background()
	counterparty := ledgerlog.Origin("other.example", "bob")
	r, err := in.svc.IssueLeafReceipt(ctx, tenant, a, ledger.ByEnvelope(s0.ev.GetSendRequested().GetEnvelope().GetId()), counterparty)
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := in.svc.Storage().PublicKeys(ctx, tenant)
	vs, _ := ledgerlog.Verifiers(keys[0].VerifierKey)
	cp, err := ledgerlog.VerifyReceipt(r, vs)
	if err != nil {
		t.Fatal(err)
	}
	if r.Index != 0 || cp.Size != 2 {
		t.Fatalf("receipt for leaf %d in a checkpoint of %d", r.Index, cp.Size)
	}
	leaves, _ := e.streamLeaves(a)
	if err := ledgerlog.CheckReceiptLeaf(r, leaves[0]); err != nil {
		t.Fatal(err)
	}
	// The issuance is in the log; a retry records nothing more.
	if _, err := in.svc.IssueLeafReceipt(ctx, tenant, a, ledger.ByIndex(0), counterparty); err != nil {
		t.Fatal(err)
	}
	entries := e.checkLog(in.svc.Storage(), a, 3)
	if entries[2].Kind != ledgerlog.KindReceiptIssued || entries[2].Receipt == nil || entries[2].Counterparty != counterparty {
		t.Fatalf("issued entry: %+v", entries[2])
	}
	// Receipts cannot be issued for receipt entries or missing envelopes.
	if _, err := in.svc.IssueLeafReceipt(ctx, tenant, a, ledger.ByIndex(2), counterparty); err == nil {
		t.Fatal("receipt issued for a receipt entry")
	}
	if _, err := in.svc.IssueLeafReceipt(ctx, tenant, a, ledger.ByEnvelope("nope"), counterparty); err == nil {
		t.Fatal("receipt issued for an unknown envelope")
	}
	// Recording a counterparty's receipt (here: ours, as b's counterparty).
	i, err := in.svc.RecordReceipt(ctx, tenant, b, r)
	if err != nil || i != 0 {
		t.Fatalf("record: %d %v", i, err)
	}
	if again, err := in.svc.RecordReceipt(ctx, tenant, b, r); err != nil || again != 0 {
		t.Fatalf("recording again: %d %v", again, err)
	}
	in.svc.Store().Flush(ctx)
	got := e.checkLog(in.svc.Storage(), b, 1)
	if got[0].Kind != ledgerlog.KindReceiptReceived || got[0].Receipt.Signature != r.Signature || got[0].Counterparty != r.Log {
		t.Fatalf("received entry: %+v", got[0])
	}
}
