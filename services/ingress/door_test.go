package ingress_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/msgtypes/typestore"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/seal"
	"github.com/alpd-project/alpd/internal/service"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ingress"
)

const tenant = "example.org"

// doorRig is ingress on a real NATS with policy's and identity's streams
// (as those services create them), and the policy side's type store, to
// register organizations' types as an admin would.
type doorRig struct {
	b     *bus.Bus
	svc   *ingress.Service
	door  *ingress.Door
	types *typestore.Store
}

func newDoorRig(t *testing.T) *doorRig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	nc := natstest.Connect(t, natstest.RunJetStream(t))
	b, err := bus.New(nc, bus.Options{Namespace: "alpd", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []alpv1.Role{alpv1.Role_ROLE_POLICY, alpv1.Role_ROLE_IDENTITY, alpv1.Role_ROLE_APPROVALS} {
		for _, spec := range streams.Owned(role, []string{tenant}, streams.Limits{}) {
			if _, err := b.EnsureStream(ctx, spec); err != nil {
				t.Fatal(err)
			}
		}
	}
	ks := keystore.NewMemory()
	if _, err := ks.Generate(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_DATA); err != nil {
		t.Fatal(err)
	}
	kv, err := b.JetStream().CreateOrUpdateKeyValue(ctx, seal.BucketConfig(b.StreamName(natsauth.DataKeysBucket)))
	if err != nil {
		t.Fatal(err)
	}
	svc := ingress.New(service.Deps{Bus: b, Keys: ks, Sealer: seal.New(kv, ks), Tenants: alp.Tenants{tenant}},
		ingress.Options{Door: ingress.DoorConfig{DecisionWait: time.Millisecond}})
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, svc.Ready, "ingress ready")
	types, err := typestore.Open(ctx, b, []string{tenant}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(types.Close)
	return &doorRig{b: b, svc: svc, door: svc.Door(), types: types}
}

func (r *doorRig) send(t *testing.T, typ, body string) (ingress.Outcome, error) {
	t.Helper()
	return r.door.Send(context.Background(), ingress.Submission{
		Sender: ingress.Sender{Tenant: tenant, PersonID: "p1", Address: "ana@" + tenant, AgentID: "agent-1",
			Trust: nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED, TrustReason: "test", Scopes: []string{alp.ScopeSend}},
		Envelope: &alpv1.Envelope{To: "bo@other.example", Type: typ, Body: []byte(body)},
	})
}

// stored is how many SendRequested events the send stream holds.
func (r *doorRig) stored(t *testing.T) uint64 {
	t.Helper()
	st, err := r.b.JetStream().Stream(context.Background(), r.b.StreamName(streams.Send))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func bodyError(t *testing.T, err error, code string) *ingress.BodyError {
	t.Helper()
	var be *ingress.BodyError
	if !errors.As(err, &be) || be.Code != code {
		t.Fatalf("err = %v; want a *BodyError %s", err, code)
	}
	return be
}

// TestDoorRefusesBodiesItsTypesRefuse: an unknown type and a body that
// fails its schema (a built-in or an organization's type) are refused at
// the door with every failure's pointer and keyword, and nothing is
// stored; valid bodies pass, and a type registered after ingress started
// is known as soon as ingress's projection has it.
func TestDoorRefusesBodiesItsTypesRefuse(t *testing.T) {
	r := newDoorRig(t)

	be := bodyError(t, func() error { _, err := r.send(t, "nope/v1", `{}`); return err }(), ingress.CodeUnknownMessageType)
	if be.Type != "nope/v1" || len(be.Errors) != 0 {
		t.Errorf("unknown type: %+v", be)
	}
	// The NLIP form of a name is not a type name.
	bodyError(t, func() error { _, err := r.send(t, "alp:note/v1", `{"text":"hi"}`); return err }(), ingress.CodeUnknownMessageType)

	_, err := r.send(t, "note/v1", `{"text":"","colour":"red"}`)
	be = bodyError(t, err, ingress.CodeInvalidBody)
	want := msgtypes.ValidationErrors{{Pointer: "", Keyword: "additionalProperties"}, {Pointer: "/text", Keyword: "minLength"}}
	if !slices.EqualFunc(be.Errors, want, func(a, b msgtypes.ValidationError) bool {
		return a.Pointer == b.Pointer && a.Keyword == b.Keyword && a.Message != ""
	}) {
		t.Errorf("failures %+v, want %+v", be.Errors, want)
	}
	_, err = r.send(t, "meeting.request/v1", `{"subject":"x","start":"tomorrow","duration":"PT30M","attendees":["not an address"]}`)
	be = bodyError(t, err, ingress.CodeInvalidBody)
	var pointers []string
	for _, e := range be.Errors {
		pointers = append(pointers, e.Pointer+" "+e.Keyword)
	}
	if !slices.Equal(pointers, []string{"/attendees/0 format", "/start format"}) {
		t.Errorf("meeting failures %v", pointers)
	}
	_, err = r.send(t, "note/v1", `not json`)
	if be := bodyError(t, err, ingress.CodeInvalidBody); be.Errors[0].Keyword != "json" {
		t.Errorf("not JSON: %+v", be.Errors)
	}
	if n := r.stored(t); n != 0 {
		t.Fatalf("%d events stored for refused bodies", n)
	}

	if o, err := r.send(t, "note/v1", `{"text":"hello"}`); err != nil || o.EnvelopeID == "" {
		t.Fatalf("valid note: %+v, %v", o, err)
	}
	if n := r.stored(t); n != 1 {
		t.Fatalf("%d events stored, want the valid note", n)
	}

	// An organization registers its type (on policy's side): ingress
	// learns it from the stream.
	const expense = "example.org/expense.approval/v1"
	bodyError(t, func() error { _, err := r.send(t, expense, `{"amount":"12.50"}`); return err }(), ingress.CodeUnknownMessageType)
	schema := []byte(`{"type":"object","properties":{"amount":{"type":"string","pattern":"^[0-9]+\\.[0-9]{2}$","x-alp-class":"internal"}},"required":["amount"],"additionalProperties":false}`)
	if _, err := r.types.Register(context.Background(), tenant, expense, schema, &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_PERSON, Id: "p_admin"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error { _, err := r.send(t, expense, `{"amount":"12.50"}`); return err },
		"ingress accepts the organization's type")
	_, err = r.send(t, expense, `{"amount":12.5}`)
	if be := bodyError(t, err, ingress.CodeInvalidBody); be.Errors[0].Pointer != "/amount" || be.Errors[0].Keyword != "type" {
		t.Errorf("organization's type failures %+v", be.Errors)
	}
	if n := r.stored(t); n != 2 {
		t.Fatalf("%d events stored, want the note and the expense", n)
	}
}
