package main

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alpd-project/alpd/internal/ledgerlog"
)

// testdata/federation holds the exports of Alice (a.example) and Bob
// (b.example), two people on two brokers, as their ledgers recorded one
// envelope through federation's calls and events (services/ledger's
// TestAcrossBrokers writes them with -update-federation): Bob's receipt
// in Alice's log, and b.example's witness cosignature of her checkpoint.
const fedDir = "testdata/federation"

// TestLedgerVerifyAcrossBrokers: Alice's export verifies alone, with the
// other broker's receipt and cosignature unverified; given b.example's
// ledger keys (a key list, or a BrokerKeys document's ledger_keys) both
// verify; a key that is not b.example's makes the receipt invalid.
func TestLedgerVerifyAcrossBrokers(t *testing.T) {
	alice := filepath.Join(fedDir, "alice.jsonl")
	code, out, errOut := alpctl("ledger", "verify", alice, "--no-state")
	if code != 0 || !strings.Contains(out, "unverified: no key for b.example/alp/ledger/") ||
		!strings.Contains(out, "by b.example/alp/witness of size 5") || !strings.Contains(out, "unverified: no key for b.example/alp/witness") {
		t.Fatalf("verify alone: %d\n%s%s", code, out, errOut)
	}
	for _, keys := range []string{"b-keys.txt", "b-broker-keys.json"} {
		code, out, errOut := alpctl("ledger", "verify", alice, "--no-state", "--keys", filepath.Join(fedDir, keys))
		if code != 0 || !strings.Contains(out, "receipts     1 verified") || !strings.Contains(out, "of size 5 at ") ||
			strings.Contains(out, "unverified") {
			t.Fatalf("verify --keys %s: %d\n%s%s", keys, code, out, errOut)
		}
	}
	// Another tenant's key under b.example's name: the receipt is invalid.
	dir := t.TempDir()
	wrong := filepath.Join(dir, "wrong.txt")
	other, err := ledgerlog.VerifierKey("b.example", ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wrong, []byte(other+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := alpctl("ledger", "verify", alice, "--no-state", "--keys", wrong); code != exitFailed || !strings.Contains(out, "not among the keys given") {
		t.Fatalf("verify with a wrong key: %d\n%s%s", code, out, errOut)
	}
	if err := os.WriteFile(wrong, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := alpctl("ledger", "verify", alice, "--no-state", "--keys", wrong); code != exitUsage || !strings.Contains(errOut, "wrong.txt:1") {
		t.Fatalf("verify with a malformed keys file: %d %s", code, errOut)
	}
}

// TestLedgerMatchAcrossBrokers: the two people's exports match (every
// envelope between them, receipts and the cosignature verified with each
// other's keys); an export with Bob's receipt removed does not.
func TestLedgerMatchAcrossBrokers(t *testing.T) {
	alice, bob := filepath.Join(fedDir, "alice.jsonl"), filepath.Join(fedDir, "bob.jsonl")
	code, out, errOut := alpctl("ledger", "match", alice, bob)
	if code != 0 || !strings.Contains(out, "all 1 envelope matched") || !strings.Contains(out, "of size 5 at ") || strings.Contains(out, "unverified") {
		t.Fatalf("match: %d\n%s%s", code, out, errOut)
	}
	// Alice's log cut before Bob's receipt (so it no longer reproduces its
	// checkpoint either): the envelope is a mismatch.
	data, err := os.ReadFile(alice)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	var kept []string
	for _, l := range lines {
		if strings.Contains(l, `receipt.received`) {
			break
		}
		kept = append(kept, l)
	}
	cut := filepath.Join(t.TempDir(), "alice-cut.jsonl")
	kept[0] = strings.Replace(kept[0], `"entries":6`, fmt.Sprintf(`"entries":%d`, len(kept)-1), 1)
	if err := os.WriteFile(cut, []byte(strings.Join(kept, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := alpctl("ledger", "match", cut, bob); code != exitFailed || !strings.Contains(out, "holds no receipt from B") {
		t.Fatalf("match without the receipt: %d\n%s%s", code, out, errOut)
	}
}
