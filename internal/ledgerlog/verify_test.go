package ledgerlog

import (
	"bytes"
	"context"
	"strings"
	"testing"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// roundTrip writes and reads an export, as a file would carry it.
func roundTrip(t *testing.T, x *Export) *Export {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteExport(&buf, x); err != nil {
		t.Fatal(err)
	}
	y, err := ReadExport(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

// wantProblem asserts that verification failed with a problem about entry
// idx (-1: the ledger) whose text contains every fragment.
func wantProblem(t *testing.T, r *Report, err error, idx int64, fragments ...string) {
	t.Helper()
	if err == nil || r.OK() {
		t.Fatalf("verified, want a problem at entry %d", idx)
	}
	for _, p := range r.Problems {
		if p.Index != idx {
			continue
		}
		all := true
		for _, f := range fragments {
			all = all && strings.Contains(p.Error(), f)
		}
		if all {
			return
		}
	}
	t.Fatalf("no problem at entry %d containing %q; got:\n%s", idx, fragments, problems(r))
}

func problems(r *Report) string {
	var b strings.Builder
	for _, p := range r.Problems {
		b.WriteString("  " + p.Error() + "\n")
	}
	return b.String()
}

func TestVerifyGood(t *testing.T) {
	p := buildPair(t, 4, nil)
	x := roundTrip(t, p.a.export())
	r, err := Verify(x, nil, WithCounterpartyKeys(p.b.key.Verifier))
	if err != nil {
		t.Fatalf("%v\n%s", err, problems(r))
	}
	if r.Entries != 12 || r.Checkpoint.Size != 12 || r.Unsigned != 0 || r.Openings != 4 || r.Erased != 0 {
		t.Fatalf("report %+v", r)
	}
	if len(r.Receipts) != 8 {
		t.Fatalf("%d receipts checked", len(r.Receipts))
	}
	for _, rc := range r.Receipts {
		if rc.Status != ReceiptVerified {
			t.Errorf("receipt at %d: %s", rc.Index, rc.Status)
		}
	}
	// Without the counterparty's keys, received receipts are unverified,
	// which is not a failure.
	r, err = Verify(x, nil)
	if err != nil {
		t.Fatal(err)
	}
	unverified := 0
	for _, rc := range r.Receipts {
		if rc.Status == "unverified: no key for "+p.b.origin {
			unverified++
		}
	}
	if unverified != 4 {
		t.Fatalf("%d unverified receipts, want 4: %+v", unverified, r.Receipts)
	}
}

func TestVerifyEmptyAndUnsigned(t *testing.T) {
	l := newTestLog(t, newKeyStore(1), "a.example", "alice")
	x := roundTrip(t, l.export())
	if r, err := Verify(x, nil); err != nil || r.Checkpoint.Size != 0 {
		t.Fatalf("empty ledger: %v", err)
	}
	// Entries beyond the checkpoint are reported, not failed.
	d := testDigest(t, 0, addrA, addrB)
	l.add(Entry{Kind: KindSendRequested, EnvelopeID: envID(0)}, &d)
	cp := l.checkpoint()
	l.add(Entry{Kind: KindSendRequested, EnvelopeID: envID(1)}, &d)
	x = l.export()
	x.Checkpoint = cp
	r, err := Verify(roundTrip(t, x), nil)
	if err != nil || r.Unsigned != 1 || r.Checkpoint.Size != 1 {
		t.Fatalf("unsigned: %v %+v", err, r)
	}
}

func TestVerifyAcrossKeyRotation(t *testing.T) {
	ks := newKeyStore(4)
	old := newTestLog(t, ks, "a.example", "alice")
	d := testDigest(t, 0, addrA, addrB)
	old.add(Entry{Kind: KindSendRequested, EnvelopeID: envID(0)}, &d)
	rc := old.receipt(0, "b.example/alp/ledger/bob")
	old.add(Entry{Kind: KindReceiptIssued, EnvelopeID: envID(0), Receipt: rc}, nil)
	if _, err := ks.Rotate(context.Background(), "a.example", alpv1.KeyPurpose_KEY_PURPOSE_LEDGER); err != nil {
		t.Fatal(err)
	}
	cur := newTestLog(t, ks, "a.example", "alice")
	cur.tree, cur.entries = old.tree, old.entries
	x := cur.export()
	// Only the new key listed: the receipt signed by the old one is invalid.
	r, err := Verify(roundTrip(t, x), nil)
	wantProblem(t, r, err, 1, "issued receipt")
	// Both keys listed (the old one retired): everything verifies.
	x.Keys = []ExportKey{old.key, cur.key}
	if r, err := Verify(roundTrip(t, x), nil); err != nil {
		t.Fatalf("%v\n%s", err, problems(r))
	}
	// The retired key can no longer sign.
	if _, err := SignCheckpoint(Checkpoint{Origin: old.origin}, old.ns); err == nil {
		t.Fatal("a retired key signed")
	}
}
