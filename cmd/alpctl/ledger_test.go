package main

import (
	"context"
	"crypto"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"golang.org/x/mod/sumdb/note"
)

// fixtureLog is a minimal ledger writer for these tests.
type fixtureLog struct {
	t       *testing.T
	origin  string
	tenant  string
	signer  crypto.Signer
	ns      note.Signer
	key     ledgerlog.ExportKey
	tree    *ledgerlog.MemoryTree
	entries []ledgerlog.ExportEntry
}

func newFixtureLog(t *testing.T, ks keystore.KeyStore, tenant, person string) *fixtureLog {
	t.Helper()
	ctx := context.Background()
	info, err := ks.Active(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER)
	if err != nil {
		if info, err = ks.Generate(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER); err != nil {
			t.Fatal(err)
		}
	}
	signer, err := ks.Signer(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER, info.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := ledgerlog.NoteSigner(tenant, signer)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ledgerlog.NewExportKey(tenant, info.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return &fixtureLog{t: t, origin: ledgerlog.Origin(tenant, person), tenant: tenant, signer: signer, ns: ns, key: key, tree: ledgerlog.NewMemoryTree(0)}
}

func (l *fixtureLog) add(e ledgerlog.Entry, digest *[32]byte) uint64 {
	l.t.Helper()
	e.V, e.Log, e.Index = ledgerlog.EntryVersion, l.origin, l.tree.Size()
	e.Time = ledgerlog.FormatTime(time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC).Add(time.Duration(e.Index) * time.Second))
	e.SourceEvent = fmt.Sprintf("evt-%d", e.Index)
	var xe ledgerlog.ExportEntry
	if digest != nil {
		salt, err := ledgerlog.NewSalt()
		if err != nil {
			l.t.Fatal(err)
		}
		xe.Salt, xe.Digest = salt, digest[:]
		e.Commitment = ledgerlog.Commit(salt, *digest)
	}
	leaf, err := e.Canonical()
	if err != nil {
		l.t.Fatal(err)
	}
	xe.Leaf = leaf
	if _, err := l.tree.Append(leaf); err != nil {
		l.t.Fatal(err)
	}
	l.entries = append(l.entries, xe)
	return e.Index
}

func (l *fixtureLog) checkpoint() []byte {
	l.t.Helper()
	cp, err := l.tree.Checkpoint(l.origin, l.tree.Size())
	if err != nil {
		l.t.Fatal(err)
	}
	signed, err := ledgerlog.SignCheckpoint(cp, l.ns)
	if err != nil {
		l.t.Fatal(err)
	}
	return signed
}

func (l *fixtureLog) receipt(i uint64, to string) *ledgerlog.Receipt {
	l.t.Helper()
	proof, err := l.tree.InclusionProof(i, l.tree.Size())
	if err != nil {
		l.t.Fatal(err)
	}
	r, err := ledgerlog.IssueReceipt(l.signer, l.tenant, l.entries[i].Leaf, i, l.checkpoint(), proof, to)
	if err != nil {
		l.t.Fatal(err)
	}
	return r
}

// write exports the log to dir/name.
func (l *fixtureLog) write(dir, name string) string {
	l.t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		l.t.Fatal(err)
	}
	defer f.Close()
	x := &ledgerlog.Export{Log: l.origin, Keys: []ledgerlog.ExportKey{l.key}, Checkpoint: l.checkpoint(), Entries: l.entries}
	if err := ledgerlog.WriteExport(f, x); err != nil {
		l.t.Fatal(err)
	}
	return path
}

func envelopeID(k int) string { return fmt.Sprintf("0192f0c4-7b1e-7a00-8000-%012d", k) }

// exchange records envelope k sent from a to b, with receipts both ways;
// skipB leaves B's side out.
func exchange(t *testing.T, a, b *fixtureLog, k int, skipB bool) {
	d := [32]byte{byte(k), 1}
	ia := a.add(ledgerlog.Entry{Kind: ledgerlog.KindSendRequested, EnvelopeID: envelopeID(k), Counterparty: b.origin}, &d)
	if skipB {
		return
	}
	ib := b.add(ledgerlog.Entry{Kind: ledgerlog.KindReceived, EnvelopeID: envelopeID(k), Counterparty: a.origin}, &d)
	b.add(ledgerlog.Entry{Kind: ledgerlog.KindReceiptReceived, EnvelopeID: envelopeID(k), Counterparty: a.origin, Receipt: a.receipt(ia, b.origin)}, nil)
	a.add(ledgerlog.Entry{Kind: ledgerlog.KindReceiptReceived, EnvelopeID: envelopeID(k), Counterparty: b.origin, Receipt: b.receipt(ib, a.origin)}, nil)
}

// TestLedgerVerifyDecisions: a ledger holding policy's decisions next to
// the envelopes verifies, and a decision changed after signing is named.
func TestLedgerVerifyDecisions(t *testing.T) {
	dir := t.TempDir()
	a := newFixtureLog(t, keystore.NewMemory(), "a.example", "alice")
	d := [32]byte{7, 1}
	a.add(ledgerlog.Entry{Kind: ledgerlog.KindSendRequested, EnvelopeID: envelopeID(0), Counterparty: "b.example"}, &d)
	a.add(ledgerlog.Entry{Kind: ledgerlog.KindDecided, EnvelopeID: envelopeID(0), Counterparty: "b.example", Outcome: ledgerlog.OutcomeDeliverPartial,
		Fields: []ledgerlog.FieldVerdict{{Pointer: "/title", Class: "internal", Action: ledgerlog.ActionAllow},
			{Pointer: "/budget", Class: "confidential", Action: ledgerlog.ActionDeny,
				Reasons: []ledgerlog.Reason{{Party: "recipient_org", Code: "confidential_egress"}}}},
		RuleVersions: []string{"sender_org:a.example:3"}}, nil)
	path := a.write(dir, "a.jsonl")
	if code, out, errOut := alpctl("ledger", "verify", path, "--no-state"); code != 0 || !strings.Contains(out, "entries      2 ") ||
		!strings.Contains(out, "openings     1 checked") {
		t.Fatalf("verify: %d\n%s%s", code, out, errOut)
	}
	e, err := ledgerlog.ParseEntry(a.entries[1].Leaf)
	if err != nil {
		t.Fatal(err)
	}
	e.Fields[1].Action, e.Fields[1].Reasons = ledgerlog.ActionAllow, nil // "/budget crossed"
	leaf, err := e.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	// The recorded leaf hash stays the tree's, as an editor of the file
	// leaves it: the changed entry can be named.
	a.entries[1].LeafHash = ledgerlog.LeafHash(a.entries[1].Leaf)
	a.entries[1].Leaf = leaf
	path = a.write(dir, "forged.jsonl")
	if code, out, _ := alpctl("ledger", "verify", path, "--no-state"); code != 1 ||
		!strings.Contains(out, "entry 1 (envelope "+envelopeID(0)+"): leaf hash does not match the checkpoint's tree") {
		t.Fatalf("forged decision: %d\n%s", code, out)
	}
}

func TestLedgerVerifyRemembersCheckpoints(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state", "ledgers.json")
	ksA := keystore.NewMemory()
	a, b := newFixtureLog(t, ksA, "a.example", "alice"), newFixtureLog(t, keystore.NewMemory(), "b.example", "bob")
	for k := range 3 {
		exchange(t, a, b, k, false)
	}
	v1 := a.write(dir, "a1.jsonl")
	bPath := b.write(dir, "b.jsonl")

	code, out, errOut := alpctl("ledger", "verify", v1, "--state", state, "--peer", bPath)
	if code != 0 || !strings.Contains(out, "VERIFIED") || !strings.Contains(out, "first verification") ||
		!strings.Contains(out, "3 verified") || !strings.Contains(out, "remembered checkpoint size 6") {
		t.Fatalf("first verify: %d\n%s%s", code, out, errOut)
	}
	fi, err := os.Stat(state)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v %v", err, fi)
	}
	// Without the peer's keys, receipts are reported unverified, not failed.
	code, out, _ = alpctl("ledger", "verify", "--no-state", v1)
	if code != 0 || !strings.Contains(out, "unverified: no key for b.example/alp/ledger/bob") {
		t.Fatalf("no peer: %d\n%s", code, out)
	}

	// The ledger grows: consistency from the remembered checkpoint.
	exchange(t, a, b, 3, false)
	v2 := a.write(dir, "a2.jsonl")
	code, out, errOut = alpctl("ledger", "verify", "--state", state, v2)
	if code != 0 || !strings.Contains(out, "extends size 6 from the checkpoint remembered") || !strings.Contains(out, "remembered checkpoint size 8") {
		t.Fatalf("second verify: %d\n%s%s", code, out, errOut)
	}

	// An older export is refused: the remembered checkpoint is larger.
	code, out, _ = alpctl("ledger", "verify", "--state", state, v1)
	if code != 1 || !strings.Contains(out, "smaller than the one held before (size 8)") {
		t.Fatalf("rollback: %d\n%s", code, out)
	}

	// The operator rewrites history with the same key and re-signs: the
	// export verifies alone, but not against the remembered checkpoint.
	forged := newFixtureLog(t, ksA, "a.example", "alice")
	for i := range a.entries {
		leaf := a.entries[i].Leaf
		if i == 0 {
			leaf = []byte(strings.Replace(string(leaf), `"counterparty":"b.example/alp/ledger/bob"`, `"counterparty":"c.example/alp/ledger/bob"`, 1))
		}
		forged.entries = append(forged.entries, ledgerlog.ExportEntry{Leaf: leaf})
		if _, err := forged.tree.Append(leaf); err != nil {
			t.Fatal(err)
		}
	}
	forged.add(ledgerlog.Entry{Kind: ledgerlog.KindSendRequested, EnvelopeID: envelopeID(9)}, nil)
	f := forged.write(dir, "forged.jsonl")
	if code, out, _ := alpctl("ledger", "verify", "--no-state", f); code != 0 {
		t.Fatalf("forged log alone: %d\n%s", code, out)
	}
	before, _ := os.ReadFile(state)
	code, out, _ = alpctl("ledger", "verify", "--state", state, f)
	if code != 1 || !strings.Contains(out, "not consistent with the checkpoint held before (size 8") {
		t.Fatalf("forged: %d\n%s", code, out)
	}
	if after, _ := os.ReadFile(state); string(after) != string(before) {
		t.Fatal("a failed verification changed the state")
	}

	// An explicit --since overrides the remembered checkpoint; the state is
	// not replaced by a checkpoint inconsistent with what it holds.
	cpFile := filepath.Join(dir, "held.cp")
	if err := os.WriteFile(cpFile, []byte(fmt.Sprintf("%s\n1\n%s\n", a.origin, rootB64(t, forged, 1))), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = alpctl("ledger", "verify", f, "--state", state, "--since", cpFile)
	if code != 0 || !strings.Contains(out, "extends size 1 from "+cpFile) || !strings.Contains(errOut, "WARNING: not remembering size 9") {
		t.Fatalf("--since: %d\n%s%s", code, out, errOut)
	}
	if after, _ := os.ReadFile(state); string(after) != string(before) {
		t.Fatal("--since replaced an inconsistent remembered checkpoint")
	}
}

func rootB64(t *testing.T, l *fixtureLog, size uint64) string {
	cp, err := l.tree.Checkpoint(l.origin, size)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(cp.Body()), "\n")[2]
}

func TestLedgerVerifyNamesTamperedEntry(t *testing.T) {
	dir := t.TempDir()
	a, b := newFixtureLog(t, keystore.NewMemory(), "a.example", "alice"), newFixtureLog(t, keystore.NewMemory(), "b.example", "bob")
	for k := range 3 {
		exchange(t, a, b, k, false)
	}
	path := a.write(dir, "a.jsonl")
	data, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(data), "\n")
	lines[3] = strings.Replace(lines[3], `\"counterparty\":\"b.example/alp/ledger/bob\"`, `\"counterparty\":\"c.example/alp/ledger/bob\"`, 1)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := alpctl("ledger", "verify", "--no-state", path)
	if code != 1 || !strings.Contains(out, "FAILED") ||
		!strings.Contains(out, "entry 2 (envelope "+envelopeID(1)+"): leaf hash does not match the checkpoint's tree") {
		t.Fatalf("%d\n%s", code, out)
	}
}

func TestLedgerMatch(t *testing.T) {
	dir := t.TempDir()
	a, b := newFixtureLog(t, keystore.NewMemory(), "a.example", "alice"), newFixtureLog(t, keystore.NewMemory(), "b.example", "bob")
	for k := range 3 {
		exchange(t, a, b, k, false)
	}
	pa, pb := a.write(dir, "a.jsonl"), b.write(dir, "b.jsonl")
	code, out, errOut := alpctl("ledger", "match", pa, pb)
	if code != 0 || !strings.Contains(out, "both ledgers verified, and all 3 envelopes matched across them") ||
		!strings.Contains(out, envelopeID(2)+"  4  4  matched") {
		t.Fatalf("%d\n%s%s", code, out, errOut)
	}
	exchange(t, a, b, 3, true) // B's broker never recorded envelope 3
	pa = a.write(dir, "a.jsonl")
	code, out, _ = alpctl("ledger", "match", pa, pb)
	if code != 1 || !strings.Contains(out, "only in A") || !strings.Contains(out, "ledger B has no entry for the envelope") ||
		!strings.Contains(out, "MISMATCH: 1 of 4 envelopes do not match") {
		t.Fatalf("%d\n%s", code, out)
	}
}

// TestLedgerMatchSameBroker: two people of one broker, as its ledger
// records a delivery between them: the recipient's envelope.received
// carries the sender's commitment and the sender holds the recipient's
// receipt, the only one. match relates them; without that receipt it
// names the envelope.
func TestLedgerMatchSameBroker(t *testing.T) {
	dir := t.TempDir()
	ks := keystore.NewMemory()
	a, b := newFixtureLog(t, ks, "a.example", "alice"), newFixtureLog(t, ks, "a.example", "bob")
	deliver := func(k int, receipt bool) {
		d := [32]byte{byte(k), 2}
		ia := a.add(ledgerlog.Entry{Kind: ledgerlog.KindSendRequested, EnvelopeID: envelopeID(k), Counterparty: "a.example"}, &d)
		sent, _ := ledgerlog.ParseEntry(a.entries[ia].Leaf)
		ib := b.add(ledgerlog.Entry{Kind: ledgerlog.KindReceived, EnvelopeID: envelopeID(k), Counterparty: a.origin, Commitment: sent.Commitment}, nil)
		r := b.receipt(ib, a.origin)
		b.add(ledgerlog.Entry{Kind: ledgerlog.KindReceiptIssued, EnvelopeID: envelopeID(k), Counterparty: a.origin, Receipt: r}, nil)
		if receipt {
			a.add(ledgerlog.Entry{Kind: ledgerlog.KindReceiptReceived, EnvelopeID: envelopeID(k), Counterparty: b.origin, Receipt: r}, nil)
		}
	}
	deliver(0, true)
	deliver(1, true)
	pa, pb := a.write(dir, "a.jsonl"), b.write(dir, "b.jsonl")
	code, out, errOut := alpctl("ledger", "match", pa, pb)
	if code != 0 || !strings.Contains(out, "both ledgers verified, and all 2 envelopes matched across them") ||
		!strings.Contains(out, envelopeID(1)+"  2  2  matched") {
		t.Fatalf("%d\n%s%s", code, out, errOut)
	}
	deliver(2, false)
	pa, pb = a.write(dir, "a.jsonl"), b.write(dir, "b.jsonl")
	code, out, _ = alpctl("ledger", "match", pa, pb)
	if code != 1 || !strings.Contains(out, "ledger A holds no receipt from B") || !strings.Contains(out, "MISMATCH: 1 of 3 envelopes do not match") {
		t.Fatalf("%d\n%s", code, out)
	}
}

func TestLedgerUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"ledger"}, {"ledger", "frob"}, {"ledger", "verify"}, {"ledger", "match", "x"}, {"ledger", "verify", "--bogus", "x"}} {
		if code, _, _ := alpctl(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := alpctl("ledger", "verify", "--no-state", filepath.Join(dir, "missing")); code != 1 || !strings.Contains(errOut, "no such file") {
		t.Errorf("missing file: %d %s", code, errOut)
	}
	a := newFixtureLog(t, keystore.NewMemory(), "a.example", "alice")
	a.add(ledgerlog.Entry{Kind: ledgerlog.KindSendRequested, EnvelopeID: envelopeID(0)}, nil)
	path := a.write(dir, "a.jsonl")
	state := filepath.Join(dir, "ledgers.json")
	if err := os.WriteFile(state, []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := alpctl("ledger", "verify", "--state", state, path); code != 2 || !strings.Contains(errOut, "damaged") {
		t.Errorf("damaged state: %d %s", code, errOut)
	}
	// XDG_STATE_HOME is honoured.
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "xdg"))
	if code, out, errOut := alpctl("ledger", "verify", path); code != 0 || !strings.Contains(out, filepath.Join(dir, "xdg", "alpctl", "ledgers.json")) {
		t.Errorf("xdg: %d %s %s", code, out, errOut)
	}
}
