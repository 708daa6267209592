package standing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/streams"
)

const tenant = "example.org"

var hosted = []string{tenant}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func newBus(t *testing.T) *bus.Bus {
	t.Helper()
	srv := natstest.RunJetStream(t)
	b, err := bus.New(natstest.Connect(t, srv), bus.Options{Namespace: "t", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ensureStream(t *testing.T, b *bus.Bus) {
	t.Helper()
	def, _ := streams.ByName(streams.Approvals)
	if _, err := b.EnsureStream(ctx(t), def.Spec(hosted, streams.Limits{})); err != nil {
		t.Fatal(err)
	}
}

func event(tn, kind string, role alpv1.Role) *alpv1.Event {
	return &alpv1.Event{Header: &alpv1.EventHeader{Type: kind, SchemaVersion: 1, EventId: uuid.NewString(),
		Tenant: tn, ProducerRole: role, Occurred: timestamppb.Now()}}
}

func created(tn, person, id string, expires *timestamppb.Timestamp) *alpv1.Event {
	ev := event(tn, "standing_rule_created", alpv1.Role_ROLE_APPROVALS)
	ev.Body = &alpv1.Event_StandingRuleCreated{StandingRuleCreated: &alpv1.StandingRuleCreated{RuleId: id, PersonId: person,
		Type: "meeting.accept/v1", Counterparty: "ana@example.org", Action: "meeting", Expires: expires}}
	return ev
}

func revoked(tn, person, id string) *alpv1.Event {
	ev := event(tn, "standing_rule_revoked", alpv1.Role_ROLE_APPROVALS)
	ev.Body = &alpv1.Event_StandingRuleRevoked{StandingRuleRevoked: &alpv1.StandingRuleRevoked{RuleId: id, PersonId: person}}
	return ev
}

func appendAt(t *testing.T, b *bus.Bus, person, rule string, ev *alpv1.Event) uint64 {
	t.Helper()
	subj, err := streams.StandingRuleSubject(tenant, person, rule)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := b.Publish(ctx(t), subj, ev)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStandingRules: opened before the approvals stream exists, the store
// is not fresh until it does; then it projects created rules, drops
// revoked ones, and refuses events that do not fit their subject.
func TestStandingRules(t *testing.T) {
	b := newBus(t)
	s, err := Open(b, hosted, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	time.Sleep(300 * time.Millisecond)
	if err := s.Fresh(time.Hour); !errors.Is(err, ErrNotOpen) {
		t.Fatalf("fresh without the stream: %v, want ErrNotOpen", err)
	}
	if got := s.Rules(tenant, "p_lee"); len(got) != 0 {
		t.Fatalf("rules without the stream: %+v", got)
	}
	ensureStream(t, b)
	waitFor(t, func() bool { return s.Fresh(5*time.Second) == nil })

	exp := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
	appendAt(t, b, "p_lee", "s2", created(tenant, "p_lee", "s2", timestamppb.New(exp)))
	appendAt(t, b, "p_lee", "s1", created(tenant, "p_lee", "s1", nil))
	appendAt(t, b, "p_kim", "s3", created(tenant, "p_kim", "s3", nil))
	// Refused: on another rule's subject, a revoke of nothing, the wrong
	// producer, an action that is no commit word.
	appendAt(t, b, "p_lee", "s9", created(tenant, "p_lee", "s8", nil))
	appendAt(t, b, "p_lee", "s7", revoked(tenant, "p_lee", "s7"))
	forged := created(tenant, "p_lee", "s6", nil)
	forged.Header.ProducerRole = alpv1.Role_ROLE_INGRESS
	appendAt(t, b, "p_lee", "s6", forged)
	bad := created(tenant, "p_lee", "s5", nil)
	bad.GetStandingRuleCreated().Action = "Not A Word"
	seq := appendAt(t, b, "p_lee", "s5", bad)
	waitFor(t, func() bool { return s.Applied() >= seq })

	got := s.Rules(tenant, "p_lee")
	if len(got) != 2 || got[0].ID != "s1" || got[1].ID != "s2" || !got[1].Expires.Equal(exp) || !got[0].Expires.IsZero() ||
		got[0].Type != "meeting.accept/v1" || got[0].Counterparty != "ana@example.org" || got[0].Action != "meeting" {
		t.Fatalf("lee's rules %+v", got)
	}
	seq = appendAt(t, b, "p_lee", "s1", revoked(tenant, "p_lee", "s1"))
	waitFor(t, func() bool { return s.Applied() >= seq })
	if got := s.Rules(tenant, "p_lee"); len(got) != 1 || got[0].ID != "s2" {
		t.Fatalf("after the revoke %+v", got)
	}
	if got := s.Rules(tenant, "p_kim"); len(got) != 1 || got[0].ID != "s3" {
		t.Fatalf("kim's rules %+v", got)
	}
	if got := s.Rules("other.example", "p_lee"); len(got) != 0 {
		t.Fatalf("another tenant's %+v", got)
	}

	// A second replica opened later rebuilds the same state.
	r2, err := Open(b, hosted, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r2.Close)
	waitFor(t, func() bool { return r2.Applied() == s.Applied() })
	if got := r2.Rules(tenant, "p_lee"); len(got) != 1 || got[0].ID != "s2" {
		t.Fatalf("second replica %+v", got)
	}
	if _, err := Open(nil, hosted, nil); err == nil {
		t.Fatal("open without a bus")
	}
}
