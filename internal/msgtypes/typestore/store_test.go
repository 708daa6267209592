package typestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
)

const tenant = "example.org"

var (
	hosted = []string{tenant, "other.example"}
	admin  = &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_PERSON, Id: "p_admin"}
)

// schema is a valid organization's type; its maxLength tells versions of
// it apart.
func schema(maxLength int) []byte {
	return fmt.Appendf(nil, `{"type":"object","properties":{"amount":{"type":"string","maxLength":%d,"x-alp-class":"internal"}},"required":["amount"],"additionalProperties":false}`, maxLength)
}

const expense = "example.org/expense.approval/v1"

// newBus starts a server with the policy stream, as the policy service
// creates it, and a bus on it.
func newBus(t *testing.T) *bus.Bus {
	t.Helper()
	srv := natstest.RunJetStream(t)
	nc := natstest.Connect(t, srv, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	b, err := bus.New(nc, bus.Options{Namespace: "t", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	def, _ := streams.ByName(streams.Policy)
	if _, err := b.EnsureStream(context.Background(), def.Spec(hosted, streams.Limits{})); err != nil {
		t.Fatal(err)
	}
	return b
}

func open(t *testing.T, b *bus.Bus, log *slog.Logger) *Store {
	t.Helper()
	s, err := Open(ctx(t), b, hosted, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// events is how many events the policy stream holds.
func events(t *testing.T, b *bus.Bus) uint64 {
	t.Helper()
	st, err := b.JetStream().Stream(ctx(t), b.StreamName(streams.Policy))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func wantCode(t *testing.T, err error, code msgtypes.Code) {
	t.Helper()
	var re *msgtypes.RegistrationError
	if !errors.As(err, &re) || re.Code != code {
		t.Fatalf("err = %v; want a *RegistrationError %s", err, code)
	}
}

func visible(s *Store, name, digest string) func() error {
	return func() error {
		got, ok := s.Registry().Lookup(name)
		if !ok || got.Digest() != digest {
			return fmt.Errorf("%s not registered with digest %s (have %v)", name, digest, got)
		}
		return nil
	}
}

func TestRegisterIsVisibleOnEveryReplica(t *testing.T) {
	b := newBus(t)
	s1, s2 := open(t, b, nil), open(t, b, nil)
	typ, err := s1.Register(ctx(t), tenant, expense, schema(9), admin)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s1.Registry().Lookup(expense); !ok || got != typ {
		t.Fatalf("the registering replica answers %v, %v", got, ok)
	}
	if err := typ.Validate([]byte(`{"amount":"12"}`)); err != nil {
		t.Fatalf("a body of the registered type: %v", err)
	}
	testkit.Eventually(t, 5*time.Second, visible(s2, expense, typ.Digest()), "the second replica")
	// A replica opened later replays it.
	testkit.Eventually(t, time.Second, visible(open(t, b, nil), expense, typ.Digest()), "a new replica")
	if err := s2.Fresh(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestReRegister(t *testing.T) {
	b := newBus(t)
	s := open(t, b, nil)
	typ, err := s.Register(ctx(t), tenant, expense, schema(9), admin)
	if err != nil {
		t.Fatal(err)
	}
	// The identical schema, spelled differently: the registered type, no
	// second event.
	spaced := []byte(" " + strings.ReplaceAll(string(schema(9)), ":", ": "))
	again, err := s.Register(ctx(t), tenant, expense, spaced, admin)
	if err != nil || again != typ {
		t.Fatalf("identical re-registration = %v, %v; want the registered type", again, err)
	}
	if n := events(t, b); n != 1 {
		t.Fatalf("%d events after an identical re-registration, want 1", n)
	}
	// A different schema under the name: type_exists, nothing stored.
	_, err = s.Register(ctx(t), tenant, expense, schema(10), admin)
	wantCode(t, err, msgtypes.CodeTypeExists)
	if n := events(t, b); n != 1 {
		t.Fatalf("%d events after a conflicting registration, want 1", n)
	}
	if got, _ := s.Registry().Lookup(expense); got != typ {
		t.Fatalf("the conflicting registration replaced the type: %v", got)
	}
	// The next version is another name.
	if _, err := s.Register(ctx(t), tenant, "example.org/expense.approval/v2", schema(10), admin); err != nil {
		t.Fatal(err)
	}
}

func TestRefusedRegistrations(t *testing.T) {
	b := newBus(t)
	s := open(t, b, nil)
	cases := []struct {
		name, tenant, typ string
		schema            []byte
		code              msgtypes.Code
	}{
		{"unclassified property", tenant, "example.org/bad/v1",
			[]byte(`{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}`), msgtypes.CodeUnclassifiedProperty},
		{"not JSON", tenant, "example.org/bad/v1", []byte(`{"type":`), msgtypes.CodeInvalidSchema},
		{"another tenant's name", tenant, "other.example/x/v1", schema(9), msgtypes.CodeNameNotNamespaced},
		{"not namespaced", tenant, "expense.approval/v1", schema(9), msgtypes.CodeNameNotNamespaced},
		{"no version", tenant, "example.org/expense", schema(9), msgtypes.CodeInvalidName},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.Register(ctx(t), c.tenant, c.typ, c.schema, admin)
			wantCode(t, err, c.code)
			if _, ok := s.Registry().Lookup(c.typ); ok {
				t.Fatal("a refused type is registered")
			}
		})
	}
	if n := events(t, b); n != 0 {
		t.Fatalf("refusals appended %d events", n)
	}
	if _, err := s.Register(ctx(t), "elsewhere.example", "elsewhere.example/x/v1", schema(9), admin); !errors.Is(err, ErrNotHosted) {
		t.Fatalf("an unhosted tenant = %v, want ErrNotHosted", err)
	}
	if _, err := s.Register(ctx(t), tenant, expense, schema(9), nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no actor = %v, want ErrInvalid", err)
	}
}

// TestBadEventIsSkipped: an event whose schema does not register (written
// by hand here, as a foreign writer or an older rule set would) is logged
// and skipped; later events apply, and the name can still be registered.
func TestBadEventIsSkipped(t *testing.T) {
	b := newBus(t)
	var logs testkit.LockedBuffer
	s := open(t, b, slog.New(slog.NewJSONHandler(&logs, nil)))
	bad := []byte(`{"additionalProperties":false,"properties":{"a":{"type":"string"}},"type":"object"}`)
	sum := sha256.Sum256(bad)
	ev := registeredEvent(tenant, mustCheck(t, expense, schema(9)), admin)
	ev.GetMessageTypeRegistered().Schema, ev.GetMessageTypeRegistered().Digest = bad, hex.EncodeToString(sum[:])
	subj, _ := streams.PolicySubject(tenant, streams.PolicyType, streams.PolicyTypeID(expense))
	seq, err := b.Append(ctx(t), subj, 0, ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.f.WaitApplied(ctx(t), seq); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Registry().Lookup(expense); ok {
		t.Fatal("a refused schema was registered")
	}
	recs := logs.Records("event skipped")
	if len(recs) != 1 || !strings.Contains(fmt.Sprint(recs[0]["err"]), string(msgtypes.CodeUnclassifiedProperty)) {
		t.Fatalf("skipped-event log = %v; want one naming %s", recs, msgtypes.CodeUnclassifiedProperty)
	}
	// Later events apply, on other subjects and on the refused one.
	other, err := s.Register(ctx(t), tenant, "example.org/other/v1", schema(5), admin)
	if err != nil {
		t.Fatal(err)
	}
	typ, err := s.Register(ctx(t), tenant, expense, schema(9), admin)
	if err != nil {
		t.Fatalf("registering the name after a refused event: %v", err)
	}
	s2 := open(t, b, nil)
	testkit.Eventually(t, 5*time.Second, visible(s2, expense, typ.Digest()))
	testkit.Eventually(t, time.Second, visible(s2, other.Name(), other.Digest()))
}

func mustCheck(t *testing.T, name string, schema []byte) *msgtypes.Type {
	t.Helper()
	r, err := msgtypes.New()
	if err != nil {
		t.Fatal(err)
	}
	typ, err := r.Check(tenant, name, schema)
	if err != nil {
		t.Fatal(err)
	}
	return typ
}

// TestRaceOneWins: two replicas register different schemas under one name
// at the same moment (both decided before either appended); exactly one
// registers, the other answers type_exists, and both replicas end with the
// winner's type.
func TestRaceOneWins(t *testing.T) {
	b := newBus(t)
	s1, s2 := open(t, b, nil), open(t, b, nil)
	var gate sync.WaitGroup
	gate.Add(2)
	var once1, once2 sync.Once
	s1.beforeCommit = func(string) { once1.Do(func() { gate.Done(); gate.Wait() }) }
	s2.beforeCommit = func(string) { once2.Do(func() { gate.Done(); gate.Wait() }) }
	var wg sync.WaitGroup
	types := make([]*msgtypes.Type, 2)
	errs := make([]error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); types[0], errs[0] = s1.Register(ctx(t), tenant, expense, schema(9), admin) }()
	go func() { defer wg.Done(); types[1], errs[1] = s2.Register(ctx(t), tenant, expense, schema(10), admin) }()
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("errors %v, %v; want exactly one registration to win", errs[0], errs[1])
	}
	won := types[0]
	if errs[0] != nil {
		wantCode(t, errs[0], msgtypes.CodeTypeExists)
		won = types[1]
	} else {
		wantCode(t, errs[1], msgtypes.CodeTypeExists)
	}
	if n := events(t, b); n != 1 {
		t.Fatalf("%d events, want the winner's only", n)
	}
	for _, s := range []*Store{s1, s2} {
		testkit.Eventually(t, 5*time.Second, visible(s, expense, won.Digest()))
	}
}
