package ledgerlog

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestReceiptIssueVerify(t *testing.T) {
	p := buildPair(t, 3, nil)
	rc := p.b.receipt(p.bRecv[1], p.a.origin)
	cp, err := VerifyReceipt(rc, p.b.verifiers())
	if err != nil {
		t.Fatal(err)
	}
	if cp.Origin != p.b.origin || cp.Size != p.b.tree.Size() {
		t.Fatalf("%v", cp)
	}
	if err := CheckReceiptLeaf(rc, p.b.entries[p.bRecv[1]].Leaf); err != nil {
		t.Fatal(err)
	}
	if err := CheckReceiptLeaf(rc, p.b.entries[p.bRecv[2]].Leaf); err == nil {
		t.Fatal("another leaf accepted")
	}
	// The signed bytes start with the type string.
	msg, _ := rc.SignedBytes()
	if !strings.HasPrefix(string(msg), "alp-receipt/v1\n{") || strings.Contains(string(msg), `"sig"`) {
		t.Fatalf("%s", msg)
	}
	// Without the issuer's key: unverified, typed.
	_, err = VerifyReceipt(rc, p.a.verifiers())
	if _, ok := err.(*NoKeyError); !ok {
		t.Fatalf("%T %v", err, err)
	}
	// Any changed field breaks the signature (or the form).
	for name, mut := range map[string]func(*Receipt){
		"envelope":     func(r *Receipt) { r.EnvelopeID = envID(9) },
		"commitment":   func(r *Receipt) { r.Commitment = p.a.entry(p.aSent[1]).Commitment },
		"index":        func(r *Receipt) { r.Index++ },
		"counterparty": func(r *Receipt) { r.Counterparty = "x" },
		"leaf hash":    func(r *Receipt) { r.LeafHash = encodeHash(LeafHash([]byte("x"))) },
		"proof":        func(r *Receipt) { r.Proof = r.Proof[1:] },
		"type":         func(r *Receipt) { r.Type = "alp-receipt/v2" },
		"log":          func(r *Receipt) { r.Log = Origin("b.example", "carol") },
		"sig":          func(r *Receipt) { r.Signature = r.Signature[:10] },
		"key id":       func(r *Receipt) { r.KeyID = "zz" },
	} {
		c := *rc
		mut(&c)
		if _, err := VerifyReceipt(&c, p.b.verifiers()); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A re-signed receipt with a bad proof is refused on the proof.
	c := *rc
	c.Proof = c.Proof[1:]
	if _, err := VerifyReceipt(p.b.resign(&c), p.b.verifiers()); err == nil || !strings.Contains(err.Error(), "is not in") {
		t.Fatalf("bad proof: %v", err)
	}
	// JSON round trip through an entry keeps it verifiable.
	raw, _ := json.Marshal(rc)
	var back Receipt
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyReceipt(&back, p.b.verifiers()); err != nil {
		t.Fatal(err)
	}
}

func TestIssueReceiptRefuses(t *testing.T) {
	p := buildPair(t, 2, nil)
	b := p.b
	cp := b.checkpoint()
	proof, _ := b.tree.InclusionProof(p.bRecv[1], b.tree.Size())
	leaf := b.entries[p.bRecv[1]].Leaf
	if _, err := IssueReceipt(b.signer, b.tenant, leaf, p.bRecv[1], cp, proof, p.a.origin); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func() error{
		"wrong index": func() error {
			_, err := IssueReceipt(b.signer, b.tenant, leaf, p.bRecv[1]+1, cp, proof, "")
			return err
		},
		"wrong tenant": func() error {
			_, err := IssueReceipt(p.a.signer, "a.example", leaf, p.bRecv[1], cp, proof, "")
			return err
		},
		"wrong proof": func() error {
			_, err := IssueReceipt(b.signer, b.tenant, leaf, p.bRecv[1], cp, proof[1:], "")
			return err
		},
		"receipt entry": func() error {
			i := p.bRecv[1] + 1
			pr, _ := b.tree.InclusionProof(i, b.tree.Size())
			_, err := IssueReceipt(b.signer, b.tenant, b.entries[i].Leaf, i, cp, pr, "")
			return err
		},
		"checkpoint by another key": func() error {
			_, err := IssueReceipt(b.signer, b.tenant, leaf, p.bRecv[1], p.a.checkpoint(), proof, "")
			return err
		},
	}
	for name, f := range cases {
		if f() == nil {
			t.Errorf("%s: issued", name)
		}
	}
}
