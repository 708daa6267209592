package envelope

import (
	"errors"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	nlipv1 "github.com/alpd-project/alpd/gen/alp/nlip/v1"
	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

func withHeaders() *alpv1.Envelope {
	env := &alpv1.Envelope{Id: "env-1", Tenant: "example.org", Type: "note/v1"}
	SetNLIP(env, &nlipv1.NlipHeader{Messagetype: "alp.send", Format: "structured", Subformat: "json", CorrelationId: "c1"})
	SetNMP(env, &nmpv1.NmpHeader{
		Trust:   nmpv1.TrustLevel_TRUST_LEVEL_TRUSTED,
		Signals: &nmpv1.Signals{UrgencyMilli: 700, RewardMilli: -200},
		Budget:  &nmpv1.Budget{MaxTokens: 5000, SystemMode: nmpv1.SystemMode_SYSTEM_MODE_STANDARD},
	})
	return env
}

func TestExtensionsRoundTrip(t *testing.T) {
	env := withHeaders()
	data, err := proto.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	got := &alpv1.Envelope{}
	if err := proto.Unmarshal(data, got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(env, got) {
		t.Fatalf("round trip changed the envelope:\n%v\n%v", env, got)
	}
	if NLIP(got).GetCorrelationId() != "c1" || NMP(got).GetBudget().GetMaxTokens() != 5000 {
		t.Fatalf("headers lost: %v", got)
	}
}

// TestHopThatDoesNotKnowExtensions decodes the envelope the way a service
// built without the NLIP/NMP packages would (an empty type registry),
// changes a core field, re-encodes it, and checks that a service that knows
// the extensions still reads them unchanged — including one from a protocol
// nobody here knows (field 300).
func TestHopThatDoesNotKnowExtensions(t *testing.T) {
	env := withHeaders()
	data, err := proto.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	data = protowire.AppendTag(data, 300, protowire.BytesType)
	data = protowire.AppendBytes(data, []byte("future protocol header"))

	ignorant := &alpv1.Envelope{}
	if err := (proto.UnmarshalOptions{Resolver: new(protoregistry.Types)}).Unmarshal(data, ignorant); err != nil {
		t.Fatal(err)
	}
	if proto.HasExtension(ignorant, nmpv1.E_Nmp) {
		t.Fatal("ignorant decoder resolved NMP")
	}
	ignorant.InReplyTo = "env-0"
	passed, err := proto.Marshal(ignorant)
	if err != nil {
		t.Fatal(err)
	}

	got := &alpv1.Envelope{}
	if err := proto.Unmarshal(passed, got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(NLIP(got), NLIP(env)) || !proto.Equal(NMP(got), NMP(env)) {
		t.Fatalf("headers changed through an ignorant hop:\n%v\n%v", got, env)
	}
	if got.GetInReplyTo() != "env-0" {
		t.Fatal("core field edit lost")
	}
	if len(got.ProtoReflect().GetUnknown()) == 0 {
		t.Fatal("unknown extension 300 dropped")
	}
	// And the known-extension hop keeps the unknown one too.
	Begin(alpv1.Role_ROLE_POLICY, "decide").End(got)
	again := &alpv1.Envelope{}
	b, _ := proto.Marshal(got)
	if err := proto.Unmarshal(b, again); err != nil || len(again.ProtoReflect().GetUnknown()) == 0 {
		t.Fatalf("unknown extension lost after a hop: %v", err)
	}
}

func TestOnlySettersSetTrust(t *testing.T) {
	for _, r := range Roles() {
		err := Begin(r, "x").SetTrust(nmpv1.TrustLevel_TRUST_LEVEL_TRUSTED, "credential")
		if TrustSetter(r) != (err == nil) {
			t.Errorf("%s: SetTrust err %v", ServiceName(r), err)
		}
		if !TrustSetter(r) && !errors.Is(err, ErrNotTrustSetter) {
			t.Errorf("%s: want ErrNotTrustSetter, got %v", ServiceName(r), err)
		}
	}
}

func TestHopAppendsTraceAndRecordsReasons(t *testing.T) {
	env := &alpv1.Envelope{Id: "e"}
	h := Begin(alpv1.Role_ROLE_INGRESS, "accept")
	if err := h.SetTrust(nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED, "consumer agent credential"); err != nil {
		t.Fatal(err)
	}
	h.AddTokens(42)
	if got := h.End(env); got != nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED {
		t.Fatalf("trust %v", got)
	}
	p := Begin(alpv1.Role_ROLE_POLICY, "decide")
	p.LowerTrust(nmpv1.TrustLevel_TRUST_LEVEL_UNTRUSTED, "free text from a stranger")
	p.End(env)
	Begin(alpv1.Role_ROLE_LEDGER, "append").End(env)

	tr := NMP(env).GetTrace()
	if len(tr) != 3 {
		t.Fatalf("trace has %d entries", len(tr))
	}
	if tr[0].GetService() != "ingress" || tr[0].GetTrustReason() != "consumer agent credential" || tr[0].GetTokens() != 42 {
		t.Errorf("ingress entry %v", tr[0])
	}
	if tr[1].GetTrust() != nmpv1.TrustLevel_TRUST_LEVEL_UNTRUSTED || tr[1].GetTrustReason() != "free text from a stranger" {
		t.Errorf("policy entry %v", tr[1])
	}
	if tr[2].GetTrust() != nmpv1.TrustLevel_TRUST_LEVEL_UNTRUSTED || tr[2].GetTrustReason() != "" {
		t.Errorf("ledger entry %v", tr[2])
	}
}

func TestUnsetTrustIsHostile(t *testing.T) {
	env := &alpv1.Envelope{}
	if got := Begin(alpv1.Role_ROLE_POLICY, "decide").End(env); got != nmpv1.TrustLevel_TRUST_LEVEL_HOSTILE {
		t.Fatalf("unset trust became %v", got)
	}
	if NMP(env).GetTrace()[0].GetTrustReason() == "" {
		t.Fatal("no reason recorded for failing closed")
	}
}

// TestTrustNeverIncreases is a property test: across random sequences of
// hops by services that are not trust-setting points, with random lowering
// requests (including "raise" attempts through LowerTrust and agent-claimed
// headers), trust never goes up, and every lowering has a reason.
func TestTrustNeverIncreases(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	others := []alpv1.Role{alpv1.Role_ROLE_POLICY, alpv1.Role_ROLE_LEDGER, alpv1.Role_ROLE_APPROVALS, alpv1.Role_ROLE_IDENTITY}
	for run := range 2000 {
		env := &alpv1.Envelope{Id: "p"}
		h := Begin(alpv1.Role_ROLE_INGRESS, "accept")
		if err := h.SetTrust(nmpv1.TrustLevel(1+rng.IntN(4)), "credential"); err != nil {
			t.Fatal(err)
		}
		prev := h.End(env)
		for hop := range 1 + rng.IntN(12) {
			r := others[rng.IntN(len(others))]
			h := Begin(r, "step")
			// A non-setter may try to set: it must fail and change nothing.
			if rng.IntN(3) == 0 {
				if err := h.SetTrust(nmpv1.TrustLevel_TRUST_LEVEL_TRUSTED, "claim"); err == nil {
					t.Fatalf("run %d hop %d: %s could set trust", run, hop, ServiceName(r))
				}
			}
			for range rng.IntN(3) {
				h.LowerTrust(nmpv1.TrustLevel(rng.IntN(5)), "rule")
			}
			got := h.End(env)
			if got > prev {
				t.Fatalf("run %d hop %d: trust rose from %v to %v", run, hop, prev, got)
			}
			last := NMP(env).GetTrace()[len(NMP(env).GetTrace())-1]
			if got < prev && last.GetTrustReason() == "" {
				t.Fatalf("run %d hop %d: lowered without a reason", run, hop)
			}
			prev = got
		}
	}
}

func TestRoleNames(t *testing.T) {
	for _, r := range Roles() {
		back, ok := RoleByName(ServiceName(r))
		if !ok || back != r {
			t.Errorf("%v does not round-trip", r)
		}
	}
	if _, ok := RoleByName("mailer"); ok {
		t.Error("unknown service accepted")
	}
}
