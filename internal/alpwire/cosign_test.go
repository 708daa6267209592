package alpwire

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/alpd-project/alpd/internal/ledgerlog"
)

// The vectors' keys of cosign.json's description: a.example's ledger key
// signs the checkpoints, b.example's witness key the cosignature.
const (
	vectorLogKey      = "a.example/alp/ledger+292e46eb+Ae0yNLJ21M7aV9WbrRT7r1p3PA8xjJmd46YNU8Wls0wF"
	vectorCosignerKey = "b.example/alp/witness+f055eb2b+BE5gCLAbdOSeONixE5K/rMx7W/+GyiBIy7D3g2M6YeLd"
)

func cosignVectors(t *testing.T) map[string]validCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vectorDir, "cosign.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f vectorFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	out := map[string]validCase{}
	for _, c := range f.Valid {
		out[c.Name] = c
	}
	return out
}

// TestCosignVectorsMeanWhatTheySay: the vectors are not only well formed.
// Their checkpoints verify with a.example's ledger key, the proof joins the
// checkpoint of size 3 to the one of size 5, the cosignature verifies with
// b.example's cosigner key (derived from its ledger key), and the request's
// signature by broker.a.example verifies under CtxCosign only.
func TestCosignVectorsMeanWhatTheySay(t *testing.T) {
	keys := loadKeys(t)
	vs := cosignVectors(t)
	first, err := ParseCosignRequest([]byte(vs["cosign request, first"].Bytes))
	if err != nil {
		t.Fatal(err)
	}
	grown, err := ParseCosignRequest([]byte(vs["cosign request, from size 3 with a proof"].Bytes))
	if err != nil {
		t.Fatal(err)
	}
	verifiers, err := ledgerlog.Verifiers(vectorLogKey)
	if err != nil {
		t.Fatal(err)
	}
	old, err := ledgerlog.OpenCheckpoint([]byte(first.Checkpoint), first.Log, verifiers)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := ledgerlog.OpenCheckpoint([]byte(grown.Checkpoint), grown.Log, verifiers)
	if err != nil {
		t.Fatal(err)
	}
	var proof tlog.TreeProof
	for _, h := range grown.ProofHashes() {
		proof = append(proof, tlog.Hash(h))
	}
	if old.Size != uint64(grown.OldSize) || ledgerlog.VerifyConsistency(proof, old, cp) != nil {
		t.Fatalf("the proof does not join %s to %s", old, cp)
	}
	raw := []byte(vs["cosign request, first"].Bytes)
	now := time.UnixMilli(vectorNow)
	if err := VerifySigned(raw, CtxCosign, first.Origin, resolver(keys), now); err != nil {
		t.Fatal(err)
	}
	if err := VerifySigned(raw, CtxReceipt, first.Origin, resolver(keys), now); CodeOf(err) != CodeBadSignature {
		t.Fatalf("a cosign request's signature verifies as a receipt notice's: %v", err)
	}

	a, err := ParseCosigned([]byte(vs["cosigned"].Bytes))
	if err != nil {
		t.Fatal(err)
	}
	// The cosigner key follows from b.example's ledger verifier key (seed
	// e5…e5), which is what its broker publishes.
	wb := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0xe5}, ed25519.SeedSize)).Public().(ed25519.PublicKey)
	ledgerKey, err := ledgerlog.VerifierKey("b.example", wb)
	if err != nil {
		t.Fatal(err)
	}
	if derived, err := ledgerlog.CosignerKeyOf(ledgerKey); err != nil || derived != vectorCosignerKey {
		t.Fatalf("cosigner key of %s is %s (%v), want %s", ledgerKey, derived, err, vectorCosignerKey)
	}
	if a.Size != int64(cp.Size) || a.Log != cp.Origin {
		t.Fatalf("cosigned %+v is not of %s", a, cp)
	}
	if _, err := ledgerlog.VerifyCosignature(a.Cosignature, cp, vectorCosignerKey); err != nil {
		t.Fatal(err)
	}
	if _, err := ledgerlog.VerifyCosignature(a.Cosignature, old, vectorCosignerKey); err == nil {
		t.Fatal("the cosignature of size 5 verifies for the checkpoint of size 3")
	}
}

// TestSignCosignRequestChecks: what would be refused is never signed, and
// what is signed parses back as it was.
func TestSignCosignRequestChecks(t *testing.T) {
	keys := loadKeys(t)
	k := keys["a1"]
	vs := cosignVectors(t)
	var r CosignRequest
	mustStrict(t, vs["cosign request, from size 3 with a proof"].Input, &r)
	for name, mutate := range map[string]func(*CosignRequest){
		"another log":      func(r *CosignRequest) { r.Log = "a.example/alp/ledger/bo" },
		"no proof":         func(r *CosignRequest) { r.ConsistencyProof = nil },
		"old size too big": func(r *CosignRequest) { r.OldSize = 6 },
		"not a broker":     func(r *CosignRequest) { r.Origin = "Broker A" },
	} {
		bad := r
		mutate(&bad)
		if _, err := SignCosignRequest(&bad, k.KeyID, k.private(t)); err == nil {
			t.Errorf("%s: signed", name)
		}
	}
	raw, err := SignCosignRequest(&r, k.KeyID, k.private(t))
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseCosignRequest(raw)
	if err != nil {
		t.Fatal(err)
	}
	if back.Checkpoint != r.Checkpoint || back.OldSize != 3 || len(back.ProofHashes()) != len(r.ConsistencyProof) || back.Wire != Version {
		t.Fatalf("parsed back %+v", back)
	}
	if got := EncodeProof(back.ProofHashes()); strings.Join(got, ",") != strings.Join(r.ConsistencyProof, ",") {
		t.Fatalf("proof %v, want %v", got, r.ConsistencyProof)
	}
}
