package ledgerlog

import (
	"encoding/base64"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

// Tamper tests: each alteration of an export is detected, and the problem
// names the entry concerned (or the ledger, where no entry can be named).

func fresh(t *testing.T) (*pair, *Export) {
	p := buildPair(t, 4, nil)
	return p, roundTrip(t, p.a.export())
}

// rewrite re-canonicalizes entry i of x after fn changed it, keeping the
// export's recorded leaf hash (what an editor of the file would do).
func rewrite(t *testing.T, x *Export, i int, fn func(*Entry)) {
	t.Helper()
	e, err := ParseEntry(x.Entries[i].Leaf)
	if err != nil {
		t.Fatal(err)
	}
	fn(&e)
	leaf, err := e.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	x.Entries[i].Leaf = leaf
}

func TestTamperChangedLeaf(t *testing.T) {
	_, x := fresh(t)
	rewrite(t, x, 3, func(e *Entry) { e.Counterparty = "c.example" }) // the envelope "went" elsewhere
	r, err := Verify(roundTrip(t, x), nil)
	wantProblem(t, r, err, 3, "entry 3 (envelope "+envID(1)+")", "leaf hash does not match the checkpoint's tree")
	// The receipt A issued for that entry (entry 4) no longer matches it
	// either; nothing else is blamed.
	for _, p := range r.Problems {
		if p.EnvelopeID != envID(1) {
			t.Errorf("unexpected problem: %v", p)
		}
	}
}

func TestTamperChangedLeafAndItsRecordedHash(t *testing.T) {
	_, x := fresh(t)
	rewrite(t, x, 3, func(e *Entry) { e.Counterparty = "c.example" })
	x.Entries[3].LeafHash = LeafHash(x.Entries[3].Leaf)
	r, err := Verify(roundTrip(t, x), nil)
	// Detected; which entry cannot be told from the export alone.
	wantProblem(t, r, err, -1, "do not reproduce the checkpoint's root at size 12")
}

func TestTamperNonCanonicalLeaf(t *testing.T) {
	_, x := fresh(t)
	x.Entries[6].Leaf = []byte(strings.Replace(string(x.Entries[6].Leaf), `"v":1`, `"v": 1`, 1))
	r, err := Verify(roundTrip(t, x), nil)
	wantProblem(t, r, err, 6, "entry 6 (envelope "+envID(2)+")", "not in canonical")
}

func TestTamperRemovedLeaf(t *testing.T) {
	_, x := fresh(t)
	x.Entries = append(x.Entries[:4:4], x.Entries[5:]...) // the header count follows: WriteExport recounts
	r, err := Verify(roundTrip(t, x), nil)
	wantProblem(t, r, err, 4, "entry 4 (envelope "+envID(1)+")", "says it is entry 5 but stands at position 4")
	wantProblem(t, r, err, -1, "covers 12 entries but the export holds only 11")
}

func TestTamperRemovedLineKeepingHeaderCount(t *testing.T) {
	_, x := fresh(t)
	var buf strings.Builder
	if err := WriteExport(&buf, x); err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(buf.String(), "\n")
	edited := strings.Join(append(lines[:5:5], lines[6:]...), "")
	if _, err := ReadExport(strings.NewReader(edited)); err == nil || !strings.Contains(err.Error(), "export line 4 is numbered 5") {
		t.Fatalf("read: %v", err)
	}
}

func TestTamperReordered(t *testing.T) {
	_, x := fresh(t)
	x.Entries[3], x.Entries[6] = x.Entries[6], x.Entries[3]
	r, err := Verify(roundTrip(t, x), nil)
	wantProblem(t, r, err, 3, "entry 3 (envelope "+envID(2)+")", "says it is entry 6")
	wantProblem(t, r, err, 6, "entry 6 (envelope "+envID(1)+")", "says it is entry 3")
}

func TestTamperRewrittenAndResigned(t *testing.T) {
	p, x := fresh(t)
	held, err := OpenCheckpoint(x.Checkpoint, x.Log, p.a.verifiers())
	if err != nil {
		t.Fatal(err)
	}
	// The operator rebuilds the log with entry 3 changed, appends more, and
	// signs a new checkpoint with the real key: alone, it verifies.
	forged := p.a.rewritten(func(i int, e *Entry) {
		if i == 3 {
			e.Counterparty = "c.example"
		}
	})
	d := testDigest(t, 9, addrA, addrB)
	forged.add(Entry{Kind: KindSendRequested, EnvelopeID: envID(9), Counterparty: p.b.origin}, &d)
	y := roundTrip(t, forged.export())
	if r, err := Verify(y, nil); err != nil {
		t.Fatalf("the forged log should verify alone: %v\n%s", err, problems(r))
	}
	// Against the checkpoint the person held, it does not.
	r, err := Verify(y, &held)
	wantProblem(t, r, err, -1, "not consistent with the checkpoint held before (size 12", "first 12 entries")
	if r.Consistent {
		t.Error("Consistent is set")
	}
	// The honest continuation of the same log is consistent.
	p.a.add(Entry{Kind: KindSendRequested, EnvelopeID: envID(9), Counterparty: p.b.origin}, &d)
	r, err = Verify(roundTrip(t, p.a.export()), &held)
	if err != nil || !r.Consistent {
		t.Fatalf("honest extension: %v\n%s", err, problems(r))
	}
	// And a rollback to a smaller checkpoint is refused.
	later, _ := OpenCheckpoint(p.a.export().Checkpoint, x.Log, p.a.verifiers())
	r, err = Verify(x, &later)
	wantProblem(t, r, err, -1, "smaller than the one held before (size 13)")
}

func TestTamperForgedCheckpointSignature(t *testing.T) {
	_, x := fresh(t)
	text, sig, _ := strings.Cut(string(x.Checkpoint), "\n\n— ")
	name, b64, _ := strings.Cut(strings.TrimSuffix(sig, "\n"), " ")
	raw, _ := base64.StdEncoding.DecodeString(b64)
	raw[10] ^= 1
	x.Checkpoint = []byte(text + "\n\n— " + name + " " + base64.StdEncoding.EncodeToString(raw) + "\n")
	r, err := Verify(roundTrip(t, x), nil)
	wantProblem(t, r, err, -1, "checkpoint", "does not verify")

	// A checkpoint signed by another key under the log's key name.
	_, x = fresh(t)
	other := newTestLog(t, newKeyStore(9), "a.example", "alice")
	cp, _ := CheckpointText(x.Checkpoint)
	signed, err := SignCheckpoint(cp, other.ns)
	if err != nil {
		t.Fatal(err)
	}
	x.Checkpoint = signed
	r, err = Verify(roundTrip(t, x), nil)
	wantProblem(t, r, err, -1, "no signature by a known key of a.example/alp/ledger")

	// A changed size or root under the original signature.
	_, x = fresh(t)
	x.Checkpoint = []byte(strings.Replace(string(x.Checkpoint), "\n12\n", "\n11\n", 1))
	r, err = Verify(roundTrip(t, x), nil)
	wantProblem(t, r, err, -1, "does not verify")
}

func TestTamperReceiptSignedByWrongKey(t *testing.T) {
	p, _ := fresh(t)
	// A second b.example key (not the one B's export lists) issues a
	// receipt for envelope 1, and A's ledger records it.
	impostor := newTestLog(t, newKeyStore(7), "b.example", "bob")
	for i := range p.b.entries[:4] {
		impostor.entries = append(impostor.entries, p.b.entries[i])
		if _, err := impostor.tree.Append(p.b.entries[i].Leaf); err != nil {
			t.Fatal(err)
		}
	}
	rc := impostor.receipt(p.bRecv[1], p.a.origin)
	i := p.a.add(Entry{Kind: KindReceiptReceived, EnvelopeID: envID(1), Counterparty: p.b.origin, Receipt: rc}, nil)
	x := roundTrip(t, p.a.export())
	r, err := Verify(x, nil, WithCounterpartyKeys(p.b.key.Verifier))
	wantProblem(t, r, err, int64(i), "entry 12 (envelope "+envID(1)+")", "not among the keys given for b.example")

	// Without B's keys, the receipt is only unverified.
	if r, err := Verify(x, nil); err != nil {
		t.Fatalf("%v\n%s", err, problems(r))
	}

	// A receipt altered after signing.
	p, _ = fresh(t)
	rc = p.b.receipt(p.bRecv[2], p.a.origin)
	rc.Commitment = p.a.entry(p.aSent[2]).Commitment
	i = p.a.add(Entry{Kind: KindReceiptReceived, EnvelopeID: envID(2), Counterparty: p.b.origin, Receipt: rc}, nil)
	r, err = Verify(roundTrip(t, p.a.export()), nil, WithCounterpartyKeys(p.b.key.Verifier))
	wantProblem(t, r, err, int64(i), "envelope "+envID(2), "signature does not verify")
}

func TestTamperOpening(t *testing.T) {
	_, x := fresh(t)
	x.Entries[3].Digest = append([]byte(nil), x.Entries[3].Digest...)
	x.Entries[3].Digest[0] ^= 1
	r, err := Verify(roundTrip(t, x), nil)
	wantProblem(t, r, err, 3, "entry 3 (envelope "+envID(1)+")", "do not open the commitment")
}

func TestTamperKeys(t *testing.T) {
	p, x := fresh(t)
	// Swapping in the operator's other key for the listed one.
	x.Keys = []ExportKey{newTestLog(t, newKeyStore(9), "a.example", "x").key}
	r, err := Verify(roundTrip(t, x), nil)
	wantProblem(t, r, err, -1, "no signature by a known key")
	// Keys of another tenant.
	x.Keys = []ExportKey{p.b.key}
	r, err = Verify(x, nil)
	wantProblem(t, r, err, -1, "named \"b.example/alp/ledger\"")
	// A listed key whose parts disagree.
	x.Keys = []ExportKey{p.a.key}
	x.Keys[0].PublicKey = p.b.key.PublicKey
	r, err = Verify(x, nil)
	wantProblem(t, r, err, -1, "disagree")
	_ = note.VerifierList
}

// TestTamperChangedDecision: turning a withheld field into an allowed one
// in a policy.decided entry is caught like any other change of a leaf.
func TestTamperChangedDecision(t *testing.T) {
	p := buildPair(t, 2, &pairHooks{decisions: true})
	x := roundTrip(t, p.a.export())
	e, err := ParseEntry(x.Entries[5].Leaf)
	if err != nil || e.Kind != KindDecided || e.Fields[0].Action != ActionDeny {
		t.Fatalf("entry 5 is not the decision withholding /budget: %+v, %v", e, err)
	}
	rewrite(t, x, 5, func(e *Entry) { e.Fields[0].Action, e.Fields[0].Reasons = ActionAllow, nil }) // "/budget was withheld" becomes "allowed"
	r, err := Verify(roundTrip(t, x), nil)
	wantProblem(t, r, err, 5, "entry 5 (envelope "+envID(1)+")", "leaf hash does not match the checkpoint's tree")
}
