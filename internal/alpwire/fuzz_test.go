package alpwire

import (
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// seeds returns the valid bytes and invalid raws of the vector files whose
// kind is kind, so fuzzing starts from every rule's edge.
func seeds(f *testing.F, kind string) [][]byte {
	f.Helper()
	files, _ := filepath.Glob(filepath.Join(vectorDir, "*.json"))
	var out [][]byte
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		var vf vectorFile
		if json.Unmarshal(b, &vf) != nil {
			continue
		}
		for _, c := range vf.Valid {
			switch {
			case c.Kind == kind && c.Bytes != "":
				out = append(out, []byte(c.Bytes))
			case c.Kind == kind:
				out = append(out, c.Input)
			case kind == "authorization" && c.Authorization != "":
				out = append(out, []byte(c.Authorization))
			}
		}
		for _, c := range vf.Invalid {
			if c.Kind == kind && c.PadTo == 0 && c.RawB64 == "" {
				out = append(out, []byte(c.Raw))
			}
		}
	}
	if len(out) == 0 {
		f.Fatalf("no seeds for %s", kind)
	}
	return out
}

// Parsers never panic, and what they accept re-encodes to input they
// accept again.

func FuzzParseEnvelope(f *testing.F) {
	for _, s := range seeds(f, "envelope") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		e, err := ParseEnvelope(raw)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T is not an *Error", err)
			}
			return
		}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseEnvelope(b); err != nil {
			t.Fatalf("accepted %q but not its re-encoding %q: %v", raw, b, err)
		}
		// Verification of accepted input never panics either.
		// (An all-zero key would accept an all-zero signature: small-order
		// points are the publisher's own weakness, so a real key is used.)
		other := ed25519.NewKeyFromSeed(make([]byte, 32)).Public().(ed25519.PublicKey)
		keys := func(string, string, time.Time) (ed25519.PublicKey, error) { return other, nil }
		if VerifySigned(raw, CtxEnvelope, e.Origin, keys, Time(0)) == nil {
			t.Fatalf("%q verifies under an unrelated key", raw)
		}
	})
}

func FuzzParseAuthorization(f *testing.F) {
	for _, s := range seeds(f, "authorization") {
		f.Add(string(s))
	}
	f.Fuzz(func(t *testing.T, h string) {
		a, err := ParseAuthorization(h)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T is not an *Error", err)
			}
			return
		}
		b, err := ParseAuthorization(a.String())
		if err != nil || *b != *a {
			t.Fatalf("accepted %q but its String %q gives %+v, %v", h, a.String(), b, err)
		}
	})
}

func FuzzParseBrokerKeys(f *testing.F) {
	for _, s := range seeds(f, "broker_keys") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := ParseBrokerKeys(raw)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T is not an *Error", err)
			}
			return
		}
		for id := range b.VerifyKeys {
			if _, err := b.Key(id, Time(0)); err != nil {
				t.Fatalf("current key %s: %v", id, err)
			}
		}
	})
}

func FuzzParseDomainDoc(f *testing.F) {
	for _, s := range seeds(f, "domain_doc") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := ParseDomainDoc(raw)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T is not an *Error", err)
			}
			return
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseDomainDoc(b); err != nil {
			t.Fatalf("accepted %q but not its re-encoding %q: %v", raw, b, err)
		}
	})
}

func FuzzParseCosignRequest(f *testing.F) {
	for _, s := range seeds(f, "cosign_request") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := ParseCosignRequest(raw)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T is not an *Error", err)
			}
			return
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseCosignRequest(b); err != nil {
			t.Fatalf("accepted %q but not its re-encoding %q: %v", raw, b, err)
		}
		if len(r.ProofHashes()) != len(r.ConsistencyProof) {
			t.Fatalf("%d proof hashes of %d", len(r.ProofHashes()), len(r.ConsistencyProof))
		}
		other := ed25519.NewKeyFromSeed(make([]byte, 32)).Public().(ed25519.PublicKey)
		keys := func(string, string, time.Time) (ed25519.PublicKey, error) { return other, nil }
		if VerifySigned(raw, CtxCosign, r.Origin, keys, Time(0)) == nil {
			t.Fatalf("%q verifies under an unrelated key", raw)
		}
	})
}

func FuzzParseCosigned(f *testing.F) {
	for _, s := range seeds(f, "cosigned") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := ParseCosigned(raw)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T is not an *Error", err)
			}
			return
		}
		b, err := MarshalCosigned(c)
		if err != nil {
			t.Fatalf("accepted %q but cannot marshal it: %v", raw, err)
		}
		if _, err := ParseCosigned(b); err != nil {
			t.Fatalf("accepted %q but not its re-encoding %q: %v", raw, b, err)
		}
	})
}
