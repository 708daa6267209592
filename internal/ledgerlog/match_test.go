package ledgerlog

import (
	"strings"
	"testing"
)

func match(t *testing.T, p *pair) *MatchReport {
	t.Helper()
	return Match(roundTrip(t, p.a.export()), roundTrip(t, p.b.export()))
}

func matchRows(m *MatchReport) string {
	var b strings.Builder
	for _, r := range m.Rows {
		b.WriteString("  " + r.EnvelopeID + " " + r.Status + ": " + strings.Join(r.Problems, "; ") + "\n")
	}
	for _, p := range append(m.A.Problems, m.B.Problems...) {
		b.WriteString("  ledger problem: " + p.Error() + "\n")
	}
	return b.String()
}

// wantRow asserts envelope k's row has the status and a problem with all
// fragments.
func wantRow(t *testing.T, m *MatchReport, k int, status string, fragments ...string) {
	t.Helper()
	if m.OK() {
		t.Fatalf("matched, want envelope %d %s", k, status)
	}
	for _, r := range m.Rows {
		if r.EnvelopeID != envID(k) {
			continue
		}
		if r.Status != status {
			t.Fatalf("envelope %d: status %q, want %q\n%s", k, r.Status, status, matchRows(m))
		}
		for _, p := range r.Problems {
			all := true
			for _, f := range fragments {
				all = all && strings.Contains(p, f)
			}
			if all {
				return
			}
		}
		t.Fatalf("envelope %d: no problem with %q\n%s", k, fragments, matchRows(m))
	}
	t.Fatalf("no row for envelope %d\n%s", k, matchRows(m))
}

// onlyRowsBad asserts that every row other than the listed envelopes matched.
func onlyRowsBad(t *testing.T, m *MatchReport, bad ...int) {
	t.Helper()
	for _, r := range m.Rows {
		isBad := false
		for _, k := range bad {
			isBad = isBad || r.EnvelopeID == envID(k)
		}
		if !isBad && r.Status != MatchOK {
			t.Errorf("envelope %s: %s %v", r.EnvelopeID, r.Status, r.Problems)
		}
	}
}

func TestMatchAll(t *testing.T) {
	m := match(t, buildPair(t, 6, nil))
	if !m.OK() || m.Matched != 6 || m.Mismatched != 0 || len(m.Rows) != 6 {
		t.Fatalf("%s\n%s", m.Verdict(), matchRows(m))
	}
	if got, want := m.Verdict(), "both ledgers verified, and all 6 envelopes matched across them"; got != want {
		t.Fatalf("verdict %q", got)
	}
	for i, r := range m.Rows {
		if r.AIndex != int64(3*i) || r.BIndex != int64(3*i) {
			t.Errorf("row %d: indexes %d %d", i, r.AIndex, r.BIndex)
		}
	}
	// Symmetric.
	p := buildPair(t, 3, nil)
	if m := Match(p.b.export(), p.a.export()); !m.OK() {
		t.Fatalf("B,A: %s\n%s", m.Verdict(), matchRows(m))
	}
}

func TestMatchMissingOnOneSide(t *testing.T) {
	p := buildPair(t, 4, &pairHooks{skipB: func(k int) bool { return k == 2 }})
	m := match(t, p)
	wantRow(t, m, 2, MatchOnlyA, "ledger B has no entry for the envelope")
	wantRow(t, m, 2, MatchOnlyA, "ledger A holds no receipt from B")
	onlyRowsBad(t, m, 2)
	if !strings.HasPrefix(m.Verdict(), "MISMATCH: 1 of 4 envelopes do not match") {
		t.Fatalf("verdict %q", m.Verdict())
	}
}

func TestMatchDifferentDigest(t *testing.T) {
	p := buildPair(t, 4, &pairHooks{bDigest: func(k int, d [32]byte) [32]byte {
		if k == 1 {
			d[0] ^= 0xff
		}
		return d
	}})
	m := match(t, p)
	wantRow(t, m, 1, MatchMismatch, "the envelope digests differ")
	onlyRowsBad(t, m, 1)
}

func TestMatchReceiptOverWrongCommitment(t *testing.T) {
	p := buildPair(t, 4, &pairHooks{bReceipt: func(p *pair, k int, r *Receipt) *Receipt {
		if k != 3 {
			return r
		}
		c := *r
		c.Commitment = Commit(make([]byte, SaltSize), [32]byte{1})
		return p.b.resign(&c)
	}})
	m := match(t, p)
	wantRow(t, m, 3, MatchMismatch, "A's receipt from B", "commits to", "the receipt to")
	onlyRowsBad(t, m, 3)
	if !m.A.OK() || !m.B.OK() {
		t.Fatalf("each ledger should verify alone:\n%s", matchRows(m))
	}
}

func TestMatchReceiptIndexAtAnotherEnvelope(t *testing.T) {
	p := buildPair(t, 4, &pairHooks{bReceipt: func(p *pair, k int, r *Receipt) *Receipt {
		if k != 2 {
			return r
		}
		// A genuine receipt for envelope 1's leaf, relabelled envelope 2.
		other := p.b.receipt(p.bRecv[1], p.a.origin)
		other.EnvelopeID = envID(2)
		other.Commitment = r.Commitment
		return p.b.resign(other)
	}})
	m := match(t, p)
	wantRow(t, m, 2, MatchMismatch, "A's receipt from B", "leaf 3 is envelope \""+envID(1)+"\", the receipt names \""+envID(2))
	onlyRowsBad(t, m, 2)
}

func TestMatchIssuerRewroteAfterReceipt(t *testing.T) {
	p := buildPair(t, 4, nil)
	// B's operator rewrites B's entry 6 (envelope 2) and re-signs; B's
	// export verifies alone, but A holds receipts with B's old checkpoints.
	p.b = p.b.rewritten(func(i int, e *Entry) {
		if i == 6 {
			e.Time = "2027-01-01T00:00:00.000Z"
		}
	})
	m := match(t, p)
	if !m.B.OK() {
		t.Fatalf("B should verify alone:\n%s", matchRows(m))
	}
	wantRow(t, m, 2, MatchMismatch, "A's receipt from B", "not the leaf the receipt names")
	wantRow(t, m, 3, MatchMismatch, "A's receipt from B", "inconsistent with the export's checkpoint", "rewritten")
	onlyRowsBad(t, m, 2, 3)
}

func TestMatchLedgerFails(t *testing.T) {
	p := buildPair(t, 2, nil)
	b := p.b.export()
	b.Entries[0].Leaf = []byte(strings.Replace(string(b.Entries[0].Leaf), "a.example/alp/ledger/alice", "a.example/alp/ledger/alma", 1))
	m := Match(p.a.export(), b)
	if m.OK() || m.B.OK() || !strings.Contains(m.Verdict(), "ledger B does not verify") {
		t.Fatalf("%s\n%s", m.Verdict(), matchRows(m))
	}
}

func TestMatchIssuerExportOlderThanReceipt(t *testing.T) {
	p := buildPair(t, 3, nil)
	b := p.b.export()
	// B shows an old export: its checkpoint and entries stop at size 4,
	// before the checkpoints in the receipts A holds for envelopes 1 and 2.
	old, err := p.b.tree.Checkpoint(p.b.origin, 4)
	if err != nil {
		t.Fatal(err)
	}
	b.Checkpoint, _ = SignCheckpoint(old, p.b.ns)
	b.Entries = b.Entries[:4]
	m := Match(p.a.export(), b)
	wantRow(t, m, 2, MatchOnlyA, "ledger B has no entry")
	wantRow(t, m, 1, MatchMismatch, "older than checkpoint", "withholds entries")
}

func TestVerifyErrorText(t *testing.T) {
	_, x := fresh(t)
	x.Entries[3], x.Entries[6] = x.Entries[6], x.Entries[3]
	_, err := Verify(x, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "ledger a.example/alp/ledger/alice does not verify: ") ||
		!strings.Contains(err.Error(), "more problems)") {
		t.Fatalf("%v", err)
	}
}

func TestConsistentWith(t *testing.T) {
	p, x := fresh(t)
	held, _ := p.a.tree.Checkpoint(p.a.origin, 5)
	if err := ConsistentWith(x, held); err != nil {
		t.Fatal(err)
	}
	rewrite(t, x, 2, func(e *Entry) { e.Counterparty = "someone else" })
	if err := ConsistentWith(x, held); err == nil {
		t.Fatal("rewritten prefix accepted")
	}
	held.Size = 99
	if err := ConsistentWith(x, held); err == nil {
		t.Fatal("longer checkpoint accepted")
	}
	held.Origin = "x"
	if err := ConsistentWith(x, held); err == nil {
		t.Fatal("other origin accepted")
	}
}

// localPair is n deliveries from alice to bob on one broker (one tenant,
// one key), as the ledger service records them: alice's envelope entry and
// decision; bob's envelope.received carrying alice's own commitment (no
// opening), his deliverable and his receipt for the received entry, which
// alice records. mutate, if set, changes bob's received entry of
// envelope k; skipReceipt drops alice's copy of bob's receipt for k.
func localPair(t *testing.T, n int, mutate func(k int, e *Entry), skipReceipt func(k int) bool) *pair {
	t.Helper()
	ks := newKeyStore(3)
	p := &pair{a: newTestLog(t, ks, "a.example", "alice"), b: newTestLog(t, ks, "a.example", "bob")}
	for k := range n {
		d := testDigest(t, k, addrA, "bob@a.example")
		ia := p.a.add(Entry{Kind: KindSendRequested, EnvelopeID: envID(k), Counterparty: "a.example"}, &d)
		p.a.add(decidedEntry(k, "a.example"), nil)
		recv := Entry{Kind: KindReceived, EnvelopeID: envID(k), Counterparty: p.a.origin, Commitment: p.a.entry(ia).Commitment}
		if mutate != nil {
			mutate(k, &recv)
		}
		ib := p.b.add(recv, nil)
		p.b.add(deliverableEntry(k, "a.example"), nil)
		rb := p.b.receipt(ib, p.a.origin)
		p.b.add(Entry{Kind: KindReceiptIssued, EnvelopeID: envID(k), Counterparty: p.a.origin, Receipt: rb}, nil)
		if skipReceipt == nil || !skipReceipt(k) {
			p.a.add(Entry{Kind: KindReceiptReceived, EnvelopeID: envID(k), Counterparty: p.b.origin, Receipt: rb}, nil)
		}
		p.b.add(Entry{Kind: KindInboxDelivered, EnvelopeID: envID(k), Agent: "dot", TrustClass: "company"}, nil)
	}
	return p
}

// TestMatchSameBroker: one receipt, the recipient's, relates two people of
// one broker: the recipient's entry carries the sender's commitment
// instead of holding the sender's receipt.
func TestMatchSameBroker(t *testing.T) {
	m := match(t, localPair(t, 3, nil, nil))
	if !m.OK() || m.Matched != 3 || len(m.Rows) != 3 {
		t.Fatalf("%s\n%s", m.Verdict(), matchRows(m))
	}
	for _, r := range m.Rows {
		if r.AIndex < 0 || r.BIndex < 0 {
			t.Errorf("row %+v", r)
		}
	}
	if m.B.Openings != 0 || m.A.Openings != 3 {
		t.Errorf("openings: A %d, B %d", m.A.Openings, m.B.Openings)
	}
	// The sender's side still needs the recipient's receipt.
	m = match(t, localPair(t, 3, nil, func(k int) bool { return k == 1 }))
	wantRow(t, m, 1, MatchMismatch, "ledger A holds no receipt from B")
	onlyRowsBad(t, m, 1)
	// A received entry with another commitment than the sender's is an
	// envelope of its own: it needs the sender's receipt, and the
	// recipient's receipt no longer proves the sender's commitment.
	m = match(t, localPair(t, 3, func(k int, e *Entry) {
		if k == 2 {
			e.Commitment = Commit(make([]byte, SaltSize), [32]byte{2})
		}
	}, nil))
	wantRow(t, m, 2, MatchMismatch, "ledger B holds no receipt from A")
	onlyRowsBad(t, m, 2)
}

// TestVerifySameTenantReceipts: a receipt from another log of the same
// tenant is signed with the tenant's key, which the export lists, so
// verifying the sender's export alone checks it (no counterparty keys).
func TestVerifySameTenantReceipts(t *testing.T) {
	p := localPair(t, 2, nil, nil)
	rep, err := Verify(roundTrip(t, p.a.export()), nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rc := range rep.Receipts {
		if rc.Kind == KindReceiptReceived {
			n++
			if rc.Status != ReceiptVerified {
				t.Errorf("receipt at %d: %s, want verified", rc.Index, rc.Status)
			}
		}
	}
	if n != 2 {
		t.Fatalf("%d received receipts checked, want 2", n)
	}
}
