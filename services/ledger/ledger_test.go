package ledger_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger"
)

// TestSendRequestedBecomesEntry: each SendRequested becomes the next leaf
// of its sender's log, with a commitment that the stored opening opens to
// the envelope's digest; the checkpoint opens with the tenant's key and
// matches the tree recomputed from the stream.
func TestSendRequestedBecomesEntry(t *testing.T) {
	e := newRig(t, 0)
	in := e.startLedger(ledger.Options{})
	a, b := personID(1), personID(2)
	var sentA []sent
	for i := range 5 {
		sentA = append(sentA, e.send(a, fmt.Sprintf(`{"n": %d, "text": "hello %d"}`, i, i)))
	}
	e.send(b, `{"x":1}`)
	r := in.svc.Storage()
	entries := e.checkLog(r, a, 5)
	if len(entries) != 5 {
		t.Fatalf("%d entries for a", len(entries))
	}
	e.checkLog(r, b, 1)
	ctx := context.Background()
	stored, err := r.Entries(ctx, tenant, a, 0, 10)
	if err != nil || len(stored) != 5 {
		t.Fatalf("entries: %d, %v", len(stored), err)
	}
	bySource := map[string]sent{}
	for _, s := range sentA {
		bySource[s.ev.GetHeader().GetEventId()] = s
	}
	for i, se := range stored {
		en := entries[i]
		s, ok := bySource[en.SourceEvent]
		if !ok || en.Kind != ledgerlog.KindSendRequested || en.EnvelopeID != s.ev.GetSendRequested().GetEnvelope().GetId() {
			t.Fatalf("entry %d: %+v", i, en)
		}
		if en.Counterparty != "other.example" {
			t.Errorf("counterparty %q", en.Counterparty)
		}
		if se.Index != uint64(i) || !bytes.Equal(se.Leaf, mustLeaf(t, e, a, i)) || se.Opening == nil {
			t.Fatalf("stored entry %d: %+v", i, se)
		}
		env := s.ev.GetSendRequested().GetEnvelope()
		canon, _ := jcs.Transform(s.body)
		digest, err := ledgerlog.EnvelopeDigest(ledgerlog.EnvelopeFields{ID: env.GetId(), From: env.GetFrom(), To: env.GetTo(),
			Type: env.GetType(), Body: canon, Created: env.GetCreated().AsTime()})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(se.Opening.Digest, digest[:]) {
			t.Fatalf("entry %d: opening digest differs from the envelope's", i)
		}
		if err := ledgerlog.CheckOpening(en.Commitment, se.Opening.Salt, digest); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	// Inclusion and consistency proofs from the read interface.
	head, _ := r.Head(ctx, tenant, a)
	cp, _ := ledgerlog.CheckpointText(head.SignedCheckpoint)
	for i := range uint64(5) {
		p, err := r.InclusionProof(ctx, tenant, a, i, head.Size)
		if err != nil {
			t.Fatal(err)
		}
		if err := ledgerlog.VerifyInclusion(p, cp, i, ledgerlog.LeafHash(stored[i].Leaf)); err != nil {
			t.Fatal(err)
		}
	}
	hr, err := r.HashReader(ctx, tenant, a)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := ledgerlog.TreeHash(hr, 2)
	p, err := r.ConsistencyProof(ctx, tenant, a, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := ledgerlog.VerifyConsistency(p, ledgerlog.Checkpoint{Origin: cp.Origin, Size: 2, Root: old}, cp); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Head(ctx, tenant, personID(99)); err == nil {
		t.Fatal("head of an empty log")
	}
	if n := in.counter("alpd_ledger_checkpoints_signed_total"); n < 2 {
		t.Errorf("%v checkpoints signed", n)
	}
	_ = time.Second
}

func mustLeaf(t *testing.T, e *rig, person string, i int) []byte {
	t.Helper()
	leaves, _ := e.streamLeaves(person)
	return leaves[i]
}
