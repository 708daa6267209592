package ledger_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	"github.com/alpd-project/alpd/services/ledger"
)

// TestWitnessProof: the log's side of cosigning. Alice's broker submits her
// latest checkpoint with the proof from the size Bob's witness holds, and the
// witness takes it: the first time from 0, then from the size it cosigned
// after her log grew. A checkpoint not yet covering min_size is "not yet",
// and a witness holding more than the log signed is refused.
func TestWitnessProof(t *testing.T) {
	x := newTwoBrokers(t, 0)
	x.deliver(t)
	ctx := context.Background()
	keysA := ledgerKeys(t, x.la, tenantA)
	cosign := func(p *ledgerv1.WitnessProofResponse, old uint64) *ledgerv1.CosignResponse {
		t.Helper()
		c, err := x.lb.svc.Cosign(ctx, &ledgerv1.CosignRequest{Tenant: tenantB, Checkpoint: p.GetCheckpoint().GetNote(), LogKeys: keysA,
			OldSize: old, ConsistencyProof: p.GetConsistencyProof()})
		if err != nil {
			t.Fatalf("cosigning the checkpoint of size %d from %d: %v", p.GetCheckpoint().GetSize(), old, err)
		}
		return c
	}
	p1, err := x.la.svc.WitnessProof(ctx, &ledgerv1.WitnessProofRequest{Tenant: tenantA, PersonId: x.alice, MinSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(p1.GetConsistencyProof()) != 0 || p1.GetCheckpoint().GetSize() == 0 {
		t.Fatalf("first proof %+v", p1)
	}
	c1 := cosign(p1, 0)
	if _, err := x.la.svc.RecordCosignature(ctx, &ledgerv1.RecordCosignatureRequest{Tenant: tenantA, PersonId: x.alice,
		Checkpoint: p1.GetCheckpoint().GetNote(), Cosignature: c1.GetCosignature()}); err != nil {
		t.Fatal(err)
	}
	size1 := p1.GetCheckpoint().GetSize()
	// The recorded cosignature grew the log; wait for its checkpoint.
	var p2 *ledgerv1.WitnessProofResponse
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		p2, err = x.la.svc.WitnessProof(ctx, &ledgerv1.WitnessProofRequest{Tenant: tenantA, PersonId: x.alice, OldSize: size1, MinSize: size1 + 1})
		if err == nil || time.Now().After(deadline) {
			break
		}
		wantCode(t, err, codes.NotFound, "a checkpoint not covering min_size yet")
	}
	if err != nil {
		t.Fatal(err)
	}
	if p2.GetCheckpoint().GetSize() <= size1 || len(p2.GetConsistencyProof()) == 0 {
		t.Fatalf("second proof %+v", p2)
	}
	cosign(p2, size1)

	size2 := p2.GetCheckpoint().GetSize()
	_, err = x.la.svc.WitnessProof(ctx, &ledgerv1.WitnessProofRequest{Tenant: tenantA, PersonId: x.alice, MinSize: size2 + 100})
	wantCode(t, err, codes.NotFound, "a checkpoint not covering min_size")
	_, err = x.la.svc.WitnessProof(ctx, &ledgerv1.WitnessProofRequest{Tenant: tenantA, PersonId: x.alice, OldSize: size2 + 100})
	wantCode(t, err, codes.FailedPrecondition, "a witness holding more than the log signed")
	if !errorHas(err, ledger.CodeCheckpointAhead) {
		t.Errorf("refused as %v", err)
	}
	_, err = x.la.svc.WitnessProof(ctx, &ledgerv1.WitnessProofRequest{Tenant: "c.example", PersonId: x.alice})
	wantCode(t, err, codes.NotFound, "a tenant not hosted")
}
