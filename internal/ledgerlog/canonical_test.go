package ledgerlog

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
)

// The direct encoder must agree byte for byte with a general RFC 8785
// implementation on every shape of entry and receipt.

func jcsOf(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jcs.Transform(raw)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

var nastyRunes = []rune{'a', 'Z', '0', ' ', '"', '\\', '/', '<', '>', '&', '\b', '\t', '\n', '\f', '\r', 0x01, 0x1f, 0x7f,
	'é', 'ß', '€', 0x2028, 0x2029, 0xfeff, 0xfffd, '😀', 0x10ffff, '—'}

func randString(r *rand.Rand, empty bool) string {
	n := r.IntN(12)
	if !empty && n == 0 {
		n = 1
	}
	var b strings.Builder
	for range n {
		b.WriteRune(nastyRunes[r.IntN(len(nastyRunes))])
	}
	return b.String()
}

func TestCanonicalEncoderMatchesJCS(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		e := Entry{V: r.IntN(3), Log: randString(r, false), Index: r.Uint64N(MaxIndex + 1), Kind: randString(r, false),
			SourceEvent: randString(r, true), EnvelopeID: randString(r, true), Commitment: randString(r, true),
			Counterparty: randString(r, true), Time: randString(r, false)}
		randReasons := func() []Reason {
			var rs []Reason
			for range r.IntN(3) {
				rs = append(rs, Reason{Party: randString(r, true), Policy: randString(r, true), Code: randString(r, true), Pointer: randString(r, true)})
			}
			return rs
		}
		randStrings := func() []string {
			var ss []string
			for range r.IntN(3) {
				ss = append(ss, randString(r, true))
			}
			return ss
		}
		for range r.IntN(4) {
			e.Fields = append(e.Fields, FieldVerdict{Pointer: randString(r, true), Class: randString(r, true),
				Action: randString(r, true), Reasons: randReasons()})
		}
		e.Outcome, e.Reasons, e.RuleVersions = randString(r, true), randReasons(), randStrings()
		for range r.IntN(3) {
			e.Held = append(e.Held, HeldItem{ID: randString(r, true), Kind: randString(r, true), Pointers: randStrings(), Commits: randString(r, true)})
		}
		for range r.IntN(3) {
			e.Views = append(e.Views, View{TrustClass: randString(r, true), Pointers: randStrings()})
		}
		e.Agent, e.TrustClass, e.Withheld, e.HeldIDs = randString(r, true), randString(r, true), randStrings(), randStrings()
		e.Broker, e.Code, e.OriginSignature, e.WireDigest = randString(r, true), randString(r, true), randString(r, true), randString(r, true)
		e.Checkpoint, e.Cosignature = randString(r, true), randString(r, true)
		e.Item, e.HeldKind, e.PayloadDigest, e.BindingCode = randString(r, true), randString(r, true), randString(r, true), randString(r, true)
		e.Expires, e.State, e.Rule, e.Type, e.Action = randString(r, true), randString(r, true), randString(r, true), randString(r, true), randString(r, true)
		if r.IntN(3) == 0 {
			rc := &Receipt{Type: randString(r, true), EnvelopeID: randString(r, true), Commitment: randString(r, true),
				Log: randString(r, true), Index: r.Uint64N(1 << 40), LeafHash: randString(r, true),
				Checkpoint:   "x.example/alp/ledger/p\n12\nAAAA\n\n— x " + randString(r, true) + "\n",
				Counterparty: randString(r, true), KeyID: randString(r, true), Signature: randString(r, true)}
			for range r.IntN(3) {
				rc.Proof = append(rc.Proof, randString(r, false))
			}
			e.Receipt = rc
			c := *rc
			c.Signature = ""
			if got, want := string(rc.appendCanonical(nil, false)), jcsOf(t, c); got != want {
				t.Fatalf("receipt %d:\n got %s\nwant %s", i, got, want)
			}
		}
		if got, want := string(e.appendCanonical(nil)), jcsOf(t, e); got != want {
			t.Fatalf("entry %d:\n got %s\nwant %s", i, got, want)
		}
	}
}
