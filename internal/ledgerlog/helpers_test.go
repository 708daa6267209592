package ledgerlog

import (
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/alpd-project/alpd/internal/keystore"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// testLog is a ledger kept in memory the way the ledger service keeps one:
// leaves, their openings, a tree, and a KeyStore signer.
type testLog struct {
	t       testing.TB
	tenant  string
	origin  string
	signer  crypto.Signer
	ns      note.Signer
	key     ExportKey
	tree    *MemoryTree
	entries []ExportEntry
	clock   time.Time
	rnd     *rand.ChaCha8
}

// newKeyStore returns a memory KeyStore; seeded makes its keys reproducible.
func newKeyStore(seed byte) *keystore.MemoryStore {
	if seed == 0 {
		return keystore.NewMemory()
	}
	return keystore.NewMemory(keystore.WithRandom(rand.NewChaCha8([32]byte{seed})))
}

func newTestLog(t testing.TB, ks keystore.KeyStore, tenant, person string) *testLog {
	t.Helper()
	ctx := context.Background()
	info, err := ks.Active(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER)
	if err != nil {
		info, err = ks.Generate(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER)
		if err != nil {
			t.Fatal(err)
		}
	}
	signer, err := ks.Signer(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER, info.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := NoteSigner(tenant, signer)
	if err != nil {
		t.Fatal(err)
	}
	key, err := NewExportKey(tenant, info.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	origin := Origin(tenant, person)
	if origin == "" {
		t.Fatalf("bad origin %s %s", tenant, person)
	}
	return &testLog{t: t, tenant: tenant, origin: origin, signer: signer, ns: ns, key: key,
		tree: NewMemoryTree(0), clock: time.Date(2026, 11, 30, 16, 4, 5, 0, time.UTC),
		rnd: rand.NewChaCha8([32]byte{byte(len(person)), 'x'})}
}

// salt is deterministic so that examples are reproducible.
func (l *testLog) salt() []byte {
	s := make([]byte, SaltSize)
	_, _ = l.rnd.Read(s)
	return s
}

// add appends an entry (filling v, log, i, ts) and, if digest is non-nil,
// a fresh salted commitment with its opening. It returns the index.
func (l *testLog) add(e Entry, digest *[32]byte) uint64 {
	l.t.Helper()
	e.V, e.Log, e.Index = EntryVersion, l.origin, l.tree.Size()
	if e.Time == "" {
		e.Time = FormatTime(l.clock)
	}
	if e.SourceEvent == "" {
		e.SourceEvent = fmt.Sprintf("evt-%s-%d", l.tenant, e.Index)
	}
	l.clock = l.clock.Add(1500 * time.Millisecond)
	var xe ExportEntry
	if digest != nil {
		xe.Salt = l.salt()
		xe.Digest = append([]byte(nil), digest[:]...)
		e.Commitment = Commit(xe.Salt, *digest)
	}
	leaf, err := e.Canonical()
	if err != nil {
		l.t.Fatal(err)
	}
	xe.Leaf, xe.LeafHash = leaf, LeafHash(leaf)
	if _, err := l.tree.Append(leaf); err != nil {
		l.t.Fatal(err)
	}
	l.entries = append(l.entries, xe)
	return e.Index
}

// entry parses leaf i.
func (l *testLog) entry(i uint64) Entry {
	e, err := ParseEntry(l.entries[i].Leaf)
	if err != nil {
		l.t.Fatal(err)
	}
	return e
}

// checkpoint signs the checkpoint of the current size.
func (l *testLog) checkpoint() []byte {
	l.t.Helper()
	cp, err := l.tree.Checkpoint(l.origin, l.tree.Size())
	if err != nil {
		l.t.Fatal(err)
	}
	signed, err := SignCheckpoint(cp, l.ns)
	if err != nil {
		l.t.Fatal(err)
	}
	return signed
}

// receipt issues a receipt for entry i against a fresh checkpoint.
func (l *testLog) receipt(i uint64, counterparty string) *Receipt {
	l.t.Helper()
	cp := l.checkpoint()
	proof, err := l.tree.InclusionProof(i, l.tree.Size())
	if err != nil {
		l.t.Fatal(err)
	}
	r, err := IssueReceipt(l.signer, l.tenant, l.entries[i].Leaf, i, cp, proof, counterparty)
	if err != nil {
		l.t.Fatal(err)
	}
	return r
}

// export exports everything with a checkpoint of the whole log.
func (l *testLog) export() *Export {
	return &Export{Log: l.origin, Keys: []ExportKey{l.key}, Checkpoint: l.checkpoint(),
		Entries: append([]ExportEntry(nil), l.entries...)}
}

func (l *testLog) verifiers() note.Verifiers {
	v, err := Verifiers(l.key.Verifier)
	if err != nil {
		l.t.Fatal(err)
	}
	return v
}

// testDigest is the digest of a small envelope k from a to b.
func testDigest(t testing.TB, k int, from, to string) [32]byte {
	t.Helper()
	d, err := EnvelopeDigest(EnvelopeFields{
		ID: envID(k), From: from, To: to, Type: "meeting.propose",
		Body:    []byte(fmt.Sprintf(`{"duration_min":30,"start":"2026-12-0%dT10:00:00Z","title":"sync %d"}`, k%9+1, k)),
		Created: time.Date(2026, 11, 30, 16, 4, 0, 0, time.UTC),
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func envID(k int) string { return fmt.Sprintf("0192f0c4-7b1e-7a00-8000-%012d", k) }

// pair is two ledgers that exchanged envelopes: A sent, B received, each
// recorded the other's receipt.
type pair struct {
	a, b *testLog
	// aSent[k] and bRecv[k] are the envelope entries of envelope k.
	aSent, bRecv []uint64
}

const (
	addrA = "alice@a.example"
	addrB = "bob@b.example"
)

func fields() []FieldVerdict {
	return []FieldVerdict{
		{Pointer: "/budget", Class: "confidential", Action: ActionDeny,
			Reasons: []Reason{{Party: "sender_org", Policy: "no-confidential-outside", Code: "confidential_egress"}}},
		{Pointer: "/duration", Class: "internal", Action: ActionAllow},
		{Pointer: "/start", Class: "internal", Action: ActionAllow},
		{Pointer: "/subject", Class: "internal", Action: ActionAllow},
	}
}

// deliverableEntry is policy's recipient-side decision on envelope k for
// bob, as the ledger writer records it.
func deliverableEntry(k int, counterparty string) Entry {
	return Entry{Kind: KindDeliverable, EnvelopeID: envID(k), Counterparty: counterparty, Outcome: OutcomeHold,
		Fields: []FieldVerdict{
			{Pointer: "/duration", Class: "internal", Action: ActionHold, Reasons: []Reason{{Party: "broker", Code: "commitment_held"}}},
			{Pointer: "/start", Class: "internal", Action: ActionHold, Reasons: []Reason{{Party: "broker", Code: "commitment_held"}}},
			{Pointer: "/subject", Class: "internal", Action: ActionAllow},
		},
		Held:         []HeldItem{{ID: "held-" + envID(k) + "-commitment", Kind: HeldCommitment, Pointers: []string{"/duration", "/start"}, Commits: "meeting"}},
		Views:        []View{{TrustClass: "company", Pointers: []string{"/subject"}}, {TrustClass: "consumer", Pointers: []string{"/subject"}}},
		RuleVersions: []string{"recipient_org:b.example:1", "recipient:bob:4"}}
}

// decidedEntry is policy's sender-side decision on envelope k, as the
// ledger writer records it.
func decidedEntry(k int, counterparty string) Entry {
	return Entry{Kind: KindDecided, EnvelopeID: envID(k), Counterparty: counterparty, Outcome: OutcomeDeliverPartial,
		Fields: fields(), RuleVersions: []string{"sender_org:a.example:3", "sender:alice:1"}}
}

// pairHooks alter how buildPair builds a pair, to make broken pairs.
type pairHooks struct {
	// bDigest changes the digest B records for envelope k.
	bDigest func(k int, d [32]byte) [32]byte
	// skipB: B records nothing of envelope k (and issues no receipt).
	skipB func(k int) bool
	// bReceipt changes the receipt B issues for envelope k before A
	// records it.
	bReceipt func(p *pair, k int, r *Receipt) *Receipt
	// decisions: each envelope entry is followed by policy's decision on
	// it (A's policy.decided, B's policy.deliverable), as the ledger
	// service records them.
	decisions bool
}

// buildPair makes n exchanges between alice@a.example and bob@b.example.
func buildPair(t testing.TB, n int, hooks *pairHooks) *pair {
	t.Helper()
	if hooks == nil {
		hooks = &pairHooks{}
	}
	ksA, ksB := newKeyStore(1), newKeyStore(2)
	p := &pair{a: newTestLog(t, ksA, "a.example", "alice"), b: newTestLog(t, ksB, "b.example", "bob")}
	for k := range n {
		d := testDigest(t, k, addrA, addrB)
		ia := p.a.add(Entry{Kind: KindSendRequested, EnvelopeID: envID(k), Counterparty: p.b.origin}, &d)
		p.aSent = append(p.aSent, ia)
		if hooks.decisions {
			p.a.add(decidedEntry(k, "b.example"), nil)
		}
		if hooks.skipB != nil && hooks.skipB(k) {
			p.bRecv = append(p.bRecv, 0)
			continue
		}
		db := d
		if hooks.bDigest != nil {
			db = hooks.bDigest(k, d)
		}
		ib := p.b.add(Entry{Kind: KindReceived, EnvelopeID: envID(k), Counterparty: p.a.origin}, &db)
		p.bRecv = append(p.bRecv, ib)
		if hooks.decisions {
			p.b.add(deliverableEntry(k, "a.example"), nil)
		}

		ra := p.a.receipt(ia, p.b.origin)
		p.a.add(Entry{Kind: KindReceiptIssued, EnvelopeID: envID(k), Counterparty: p.b.origin, Receipt: ra}, nil)
		p.b.add(Entry{Kind: KindReceiptReceived, EnvelopeID: envID(k), Counterparty: p.a.origin, Receipt: ra}, nil)
		rb := p.b.receipt(ib, p.a.origin)
		p.b.add(Entry{Kind: KindReceiptIssued, EnvelopeID: envID(k), Counterparty: p.a.origin, Receipt: rb}, nil)
		if hooks.bReceipt != nil {
			rb = hooks.bReceipt(p, k, rb)
		}
		p.a.add(Entry{Kind: KindReceiptReceived, EnvelopeID: envID(k), Counterparty: p.b.origin, Receipt: rb}, nil)
	}
	return p
}

// resign signs an altered receipt again with the log's key, as a broker
// lying in its receipts would.
func (l *testLog) resign(r *Receipt) *Receipt {
	l.t.Helper()
	c := *r
	c.Signature = ""
	msg, err := c.SignedBytes()
	if err != nil {
		l.t.Fatal(err)
	}
	sig, err := l.ns.Sign(msg)
	if err != nil {
		l.t.Fatal(err)
	}
	c.Signature = base64.StdEncoding.EncodeToString(sig)
	return &c
}

// rewritten returns the log rebuilt by its own operator, with change
// applied to each entry, issued receipts re-issued from the new tree, and
// signed with the same key: a history rewrite that verifies on its own.
func (l *testLog) rewritten(change func(i int, e *Entry)) *testLog {
	l.t.Helper()
	f := *l
	f.tree, f.entries = NewMemoryTree(0), nil
	for i := range l.entries {
		e := l.entry(uint64(i))
		change(i, &e)
		if e.Kind == KindReceiptIssued {
			e.Receipt = f.receipt(e.Receipt.Index, e.Receipt.Counterparty)
		}
		leaf, err := e.Canonical()
		if err != nil {
			l.t.Fatal(err)
		}
		f.entries = append(f.entries, ExportEntry{Leaf: leaf, LeafHash: LeafHash(leaf), Salt: l.entries[i].Salt, Digest: l.entries[i].Digest})
		if _, err := f.tree.Append(leaf); err != nil {
			l.t.Fatal(err)
		}
	}
	return &f
}

func sha256sum(b []byte) []byte {
	h := sha256.Sum256(b)
	return h[:]
}
