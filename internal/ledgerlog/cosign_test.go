package ledgerlog

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"
)

// TestCosignature: a cosignature/v1 line verifies with the witness's
// cosigner key (derived from its ledger verifier key too), not with
// another key, not over another checkpoint; its key id is the 0x04 one;
// a cosignature entry holds a checkpoint of its own log only.
func TestCosignature(t *testing.T) {
	seed := make([]byte, ed25519.SeedSize)
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	c := Checkpoint{Origin: Origin("a.example", "alice"), Size: 3, Root: tlog.Hash{7}}
	at := time.Unix(1700000000, 0)
	line, err := Cosign(priv, "b.example", c, at)
	if err != nil {
		t.Fatal(err)
	}
	ck, _ := CosignerKey("b.example", pub)
	vk, _ := VerifierKey("b.example", pub)
	derived, err := CosignerKeyOf(vk)
	if err != nil || derived != ck {
		t.Fatalf("derived cosigner key %s (%v), want %s", derived, err, ck)
	}
	cs, err := VerifyCosignature(line, c, ck)
	if err != nil || cs.Time != 1700000000 || cs.Name != "b.example/alp/witness" || cs.KeyID == KeyID(cs.Name, pub) {
		t.Fatalf("verify: %+v %v", cs, err)
	}
	other := c
	other.Size = 4
	if _, err := VerifyCosignature(line, other, ck); err == nil {
		t.Fatal("a cosignature verified over another checkpoint")
	}
	otherKey, _ := CosignerKey("b.example", ed25519.NewKeyFromSeed(append(make([]byte, 31), 1)).Public().(ed25519.PublicKey))
	var nokey *NoKeyError
	if _, err := VerifyCosignature(line, c, otherKey); !errors.As(err, &nokey) {
		t.Fatalf("with another key: %v, want unverified", err)
	}
	if _, err := VerifyCosignature(line, c, vk); err == nil {
		t.Fatal("a ledger (0x01) key accepted as a cosigner key")
	}
	// The entry.
	signed := string(c.Body()) + "\n— a.example/alp/ledger AAAAAA==\n"
	e := Entry{V: EntryVersion, Log: c.Origin, Kind: KindCheckpointCosigned, SourceEvent: "s", Counterparty: "b.example",
		Checkpoint: signed, Cosignature: TrimSignatureLine(line), Time: FormatTime(at)}
	leaf, err := e.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseEntry(leaf); err != nil {
		t.Fatal(err)
	}
	e.Log = Origin("a.example", "bob")
	if _, err := e.Canonical(); err == nil || !strings.Contains(err.Error(), "checkpoint of") {
		t.Fatalf("a cosigned checkpoint of another log: %v", err)
	}
}
