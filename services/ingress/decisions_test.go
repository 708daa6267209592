package ingress

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/service"
	"github.com/alpd-project/alpd/internal/streams"
)

// TestRetryFindsADecisionStoredUnseen: policy's publish reaches the first
// request's subscription a moment before the decided stream stores it, so
// a retry of that request can look in the stream too early and subscribe
// too late to see the publish. It must still find the decision once it is
// stored, not answer pending. The test stores the decision without any
// publish on its subject (the decided stream sources it from a staging
// stream), after the retry has looked.
func TestRetryFindsADecisionStoredUnseen(t *testing.T) {
	const tenant, person = "example.org", "p_1"
	nc := natstest.Connect(t, natstest.RunJetStream(t))
	b, err := bus.New(nc, bus.Options{Namespace: "alpd"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	decidedFilter := streams.TenantFilter("decided", tenant)
	if _, err := b.EnsureStream(ctx, bus.StreamSpec{Name: "staging", Subjects: []string{"staged." + decidedFilter}}); err != nil {
		t.Fatal(err)
	}
	decided := b.Config(bus.StreamSpec{Name: streams.Decided})
	decided.Sources = []*jetstream.StreamSource{{Name: b.StreamName("staging"),
		SubjectTransforms: []jetstream.SubjectTransformConfig{{Source: "staged.alp.decided.*.*.*",
			Destination: "alp.decided.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}"}}}}
	if _, err := b.EnsureStreamConfig(ctx, decided); err != nil {
		t.Fatal(err)
	}
	s := New(service.Deps{Bus: b, Tenants: alp.Tenants{tenant}}, Options{})
	id := "0192f0c4-7b1e-7a00-8000-000000000001"
	w, err := s.Await(tenant, person, id)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	subject, err := streams.DecidedSubject(tenant, person, id)
	if err != nil {
		t.Fatal(err)
	}
	ev := &alpv1.Event{
		Header: &alpv1.EventHeader{Type: "decided", SchemaVersion: 1, EventId: "d-1", Tenant: tenant, ProducerRole: alpv1.Role_ROLE_POLICY},
		Body: &alpv1.Event_Decided{Decided: &alpv1.Decided{Envelope: &alpv1.Envelope{Id: id},
			Outcome: alpv1.Outcome_OUTCOME_REFUSE, SenderPersonId: person}},
	}
	data, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond) // after the retry read the stream
		if _, err := b.JetStream().Publish(ctx, "staged."+subject, data); err != nil {
			t.Error(err)
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	d, err := w.Wait(wctx, true)
	if err != nil || d.GetEnvelope().GetId() != id || d.GetOutcome() != alpv1.Outcome_OUTCOME_REFUSE {
		t.Fatalf("retry waited out with %v, %v; want the stored decision", d, err)
	}
}
