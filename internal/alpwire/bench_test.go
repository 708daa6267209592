package alpwire

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The floors are bare Ed25519 over a message the size of an envelope's
// signing input; BenchmarkSignEnvelope and BenchmarkVerifyEnvelope add the
// strict parse, RFC 8785 and sigstore's signature API on top. Report them
// as ratios against the floors of the same run.

func benchEnvelope() *Envelope {
	return &Envelope{ID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Origin: "broker.a.example", Destination: "b.example",
		From: "ana@a.example", FromAgent: "agt_7f3a", AgentClass: AgentCompany, To: "lee@b.example", Type: "meeting.request/v1",
		Body: json.RawMessage(`{"title":"Roadmap review","notes":"` + strings.Repeat("agenda ", 60) +
			`","slots":[{"start_ts":1735725600000,"end_ts":1735729200000},{"start_ts":1735812000000,"end_ts":1735815600000}]}`),
		CreatedTS: 1735689600000, ExpiresTS: 1735776000000}
}

func benchKey() (ed25519.PrivateKey, string) {
	priv := ed25519.NewKeyFromSeed(make([]byte, 32))
	return priv, KeyID(priv.Public().(ed25519.PublicKey))
}

func BenchmarkSignEnvelope(b *testing.B) {
	priv, kid := benchKey()
	e := benchEnvelope()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SignEnvelope(e, e.Origin, kid, priv); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyEnvelope(b *testing.B) {
	priv, kid := benchKey()
	e := benchEnvelope()
	raw, err := SignEnvelope(e, e.Origin, kid, priv)
	if err != nil {
		b.Fatal(err)
	}
	pub := priv.Public().(ed25519.PublicKey)
	keys := func(string, string, time.Time) (ed25519.PublicKey, error) { return pub, nil }
	now := time.Now()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := VerifyEnvelope(raw, keys, now); err != nil {
			b.Fatal(err)
		}
	}
}

func floorMessage(b *testing.B) []byte {
	priv, kid := benchKey()
	e := benchEnvelope()
	raw, err := SignEnvelope(e, e.Origin, kid, priv)
	if err != nil {
		b.Fatal(err)
	}
	obj, _ := parseObject(raw, MaxEnvelopeBytes)
	msg, err := signingInput(raw, obj, CtxEnvelope)
	if err != nil {
		b.Fatal(err)
	}
	return msg
}

func BenchmarkEd25519SignFloor(b *testing.B) {
	priv, _ := benchKey()
	msg := floorMessage(b)
	for b.Loop() {
		ed25519.Sign(priv, msg)
	}
}

func BenchmarkEd25519VerifyFloor(b *testing.B) {
	priv, _ := benchKey()
	msg := floorMessage(b)
	sig := ed25519.Sign(priv, msg)
	pub := priv.Public().(ed25519.PublicKey)
	for b.Loop() {
		if !ed25519.Verify(pub, msg, sig) {
			b.Fatal("verify")
		}
	}
}
