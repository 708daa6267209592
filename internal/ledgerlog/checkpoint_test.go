package ledgerlog

import (
	"crypto/ed25519"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

func TestCheckpointSignOpen(t *testing.T) {
	l := newTestLog(t, newKeyStore(1), "a.example", "alice")
	l.add(sampleEntryFor(l, 0), nil)
	signed := l.checkpoint()
	text, _, _ := strings.Cut(string(signed), "\n\n")
	lines := strings.Split(text, "\n")
	if len(lines) != 3 || lines[0] != l.origin || lines[1] != "1" {
		t.Fatalf("body %q", text)
	}
	if !strings.Contains(string(signed), "\n\n— a.example/alp/ledger ") {
		t.Fatalf("signature line: %q", signed)
	}
	cp, err := OpenCheckpoint(signed, l.origin, l.verifiers())
	if err != nil {
		t.Fatal(err)
	}
	if root, _ := l.tree.Root(1); cp.Size != 1 || cp.Root != root || string(cp.Body()) != text+"\n" {
		t.Fatalf("%+v", cp)
	}
	// The verifier key is the standard signed-note one: sumdb/note accepts
	// our signature with a verifier built from the raw public key.
	pub := ed25519.PublicKey(l.key.PublicKey)
	vkey, err := note.NewEd25519VerifierKey("a.example/alp/ledger", pub)
	if err != nil || vkey != l.key.Verifier {
		t.Fatalf("%v %s %s", err, vkey, l.key.Verifier)
	}
	if !strings.HasPrefix(vkey, "a.example/alp/ledger+"+l.key.KeyID+"+") {
		t.Fatalf("key id %s not in %s", l.key.KeyID, vkey)
	}

	// Wrong origin expected.
	if _, err := OpenCheckpoint(signed, Origin("a.example", "bob"), l.verifiers()); err == nil || !strings.Contains(err.Error(), "is for") {
		t.Fatalf("other origin: %v", err)
	}
	// A tenant key cannot sign another tenant's log.
	if _, err := SignCheckpoint(Checkpoint{Origin: Origin("b.example", "bob")}, l.ns); err == nil {
		t.Fatal("signed another tenant's checkpoint")
	}
	// Unknown extra signatures (a witness) are ignored.
	wsk, wvk, err := note.GenerateKey(randReader{}, "witness.example")
	if err != nil {
		t.Fatal(err)
	}
	ws, _ := note.NewSigner(wsk)
	n, err := note.Open(signed, l.verifiers())
	if err != nil {
		t.Fatal(err)
	}
	cosigned, err := note.Sign(n, ws)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenCheckpoint(cosigned, l.origin, l.verifiers()); err != nil {
		t.Fatalf("cosigned: %v", err)
	}
	// Signed only by the witness: refused even if the witness key is known.
	wv, _ := note.NewVerifier(wvk)
	onlyWitness, _ := note.Sign(&note.Note{Text: n.Text}, ws)
	if _, err := OpenCheckpoint(onlyWitness, l.origin, note.VerifierList(wv)); err == nil || !strings.Contains(err.Error(), "not signed by the log's key") {
		t.Fatalf("witness only: %v", err)
	}
}

type randReader struct{}

func (randReader) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte(i * 7)
	}
	return len(b), nil
}

func sampleEntryFor(l *testLog, k int) Entry {
	return Entry{Kind: KindSendRequested, EnvelopeID: envID(k), Counterparty: Origin("b.example", "bob")}
}

func TestParseCheckpointBodyStrict(t *testing.T) {
	good := "a.example/alp/ledger/alice\n12\n" + strings.Repeat("A", 43) + "=\n"
	if _, err := ParseCheckpointBody(good); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]string{
		"extension line": good + "ext\n",
		"no final nl":    strings.TrimSuffix(good, "\n"),
		"leading zero":   strings.Replace(good, "\n12\n", "\n012\n", 1),
		"plus size":      strings.Replace(good, "\n12\n", "\n+12\n", 1),
		"short root":     strings.Replace(good, strings.Repeat("A", 43)+"=", "AAAA", 1),
		"bad origin":     strings.Replace(good, "a.example/alp/ledger/alice", "go.sum database tree", 1),
		"crlf":           strings.ReplaceAll(good, "\n", "\r\n"),
	} {
		if _, err := ParseCheckpointBody(bad); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	if _, err := OpenCheckpoint([]byte(strings.Repeat("x", MaxCheckpointBytes+1)), "a.example/alp/ledger/alice", nil); err == nil {
		t.Error("huge checkpoint accepted")
	}
}

func TestNoteSignerRefusesNonEd25519(t *testing.T) {
	if _, err := NoteSigner("a.example", nil); err == nil {
		t.Fatal("nil key")
	}
	if _, err := NoteSigner("A", nil); err == nil {
		t.Fatal("bad tenant")
	}
	if _, err := VerifierKey("a.example", []byte{1, 2}); err == nil {
		t.Fatal("short key")
	}
}
