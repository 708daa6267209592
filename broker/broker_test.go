package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/alpd-project/alpd/broker"
	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/seal"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ingress"
)

// rig is a broker started on the given NATS connection and stopped, checked
// to stop cleanly, when the test ends.
type rig struct {
	b    *broker.Broker
	ks   keystore.KeyStore
	done chan error
}

func start(t *testing.T, nc *nats.Conn, reg prometheus.Registerer, name string, tenants ...string) rig {
	t.Helper()
	return startWith(t, nc, reg, keystore.NewMemory(), name, tenants...)
}

func startWith(t *testing.T, nc *nats.Conn, reg prometheus.Registerer, ks keystore.KeyStore, name string, tenants ...string) rig {
	t.Helper()
	b, err := broker.New(broker.Config{Name: name, Tenants: tenants}, broker.Deps{NATS: nc, KeyStore: ks, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := rig{b: b, ks: ks, done: make(chan error, 1)}
	go func() { r.done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("broker %s stopped with %v", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("broker %s did not stop", name)
		}
	})
	<-b.Started()
	if err := b.StartError(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, b.Ready)
	return r
}

func submission(tenant, person, key string) ingress.Submission {
	return ingress.Submission{
		Sender: ingress.Sender{Tenant: tenant, PersonID: person, Address: "ana@" + tenant, AgentID: "agent-1",
			Trust: nmpv1.TrustLevel_TRUST_LEVEL_TRUSTED, TrustReason: "company agent credential"},
		Envelope:       &alpv1.Envelope{To: "bo@other.example", Type: "note/v1", Body: []byte(`{"text":"hello"}`)},
		IdempotencyKey: key,
	}
}

func streamMsgs(t *testing.T, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestMessageFlowsThroughServices submits through ingress and follows the
// event through the policy workers: trace and trust propagate, the body is
// sealed on every stream, and a retry with the same idempotency key is one
// message.
func TestMessageFlowsThroughServices(t *testing.T) {
	s := natstest.RunJetStream(t)
	nc := natstest.Connect(t, s)
	r := start(t, nc, prometheus.NewRegistry(), "alpd", "example.org")
	ctx := context.Background()
	js := r.b.Bus().JetStream()

	id, err := r.b.Ingress().Submit(ctx, submission("example.org", "p1", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := r.b.Ingress().Submit(ctx, submission("example.org", "p1", "k1"))
	if err != nil || again != id {
		t.Fatalf("retry with the same key: %s %v, want %s", again, err, id)
	}

	decided, err := js.Stream(ctx, "ALPD_DECIDED")
	if err != nil {
		t.Fatal(err)
	}
	var msg *jetstream.RawStreamMsg
	testkit.Eventually(t, 10*time.Second, func() error {
		msg, err = decided.GetLastMsgForSubject(ctx, "alp.decided.example_org.p1."+id)
		return err
	})
	ev, err := bus.Decode(msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	d := ev.GetDecided()
	// p1 never signed in here, so policy cannot tell who sends: it fails
	// closed.
	if d.GetOutcome() != alpv1.Outcome_OUTCOME_REFUSE || d.GetReasons()[0].GetCode() != "unknown_sender" {
		t.Fatalf("decision %v", d)
	}
	if ev.GetHeader().GetProducerRole() != alpv1.Role_ROLE_POLICY || ev.GetHeader().GetCorrelationId() != id || ev.GetHeader().GetCausationId() == "" {
		t.Fatalf("header %v", ev.GetHeader())
	}
	env := d.GetEnvelope()
	trace := envelope.NMP(env).GetTrace()
	if len(trace) != 2 || trace[0].GetService() != "ingress" || trace[1].GetService() != "policy" {
		t.Fatalf("trace %v", trace)
	}
	if envelope.Trust(env) != nmpv1.TrustLevel_TRUST_LEVEL_TRUSTED {
		t.Fatalf("trust %v", envelope.Trust(env))
	}
	if len(env.GetBody()) != 0 || env.GetSealedBody() != nil {
		t.Fatal("a refused envelope leaves policy with a body")
	}
	sendStream, err := js.Stream(ctx, "ALPD_SEND")
	if err != nil {
		t.Fatal(err)
	}
	sentMsg, err := sendStream.GetLastMsgForSubject(ctx, "alp.send.example_org.p1."+id)
	if err != nil {
		t.Fatal(err)
	}
	sent, err := bus.Decode(sentMsg.Data)
	if err != nil {
		t.Fatal(err)
	}
	if env = sent.GetSendRequested().GetEnvelope(); len(env.GetBody()) != 0 || env.GetSealedBody() == nil {
		t.Fatal("plain body on the send stream")
	}
	kv, err := js.KeyValue(ctx, "ALPD_DATAKEYS")
	if err != nil {
		t.Fatal(err)
	}
	sealer := seal.New(kv, r.ks)
	body, err := sealer.Open(ctx, env.GetSealedBody(), []byte(id))
	if err != nil || string(body) != `{"text":"hello"}` {
		t.Fatalf("open body: %q %v", body, err)
	}
	if n := streamMsgs(t, js, "ALPD_SEND"); n != 1 {
		t.Fatalf("send stream has %d events after a retried submit, want 1", n)
	}
	if n := streamMsgs(t, js, "ALPD_DECIDED"); n != 1 {
		t.Fatalf("decided stream has %d events, want 1", n)
	}

	// Erasure: the person's data key is destroyed; the events stay, the
	// bodies are unreadable, a tombstone is recorded.
	if err := r.b.Identity().Erase(ctx, "example.org", "p1", "operator-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := seal.New(kv, r.ks).Open(ctx, env.GetSealedBody(), []byte(id)); !errors.Is(err, seal.ErrKeyDestroyed) {
		t.Fatalf("after erasure: %v, want ErrKeyDestroyed", err)
	}
	if n := streamMsgs(t, js, "ALPD_DECIDED"); n != 1 {
		t.Fatal("erasure rewrote a stream")
	}
	if _, err := r.b.Ingress().Submit(ctx, submission("example.org", "p1", "k2")); !errors.Is(err, seal.ErrKeyDestroyed) {
		t.Fatalf("submit for an erased person: %v", err)
	}
}

func TestSubmitRejectsBadInput(t *testing.T) {
	s := natstest.RunJetStream(t)
	r := start(t, natstest.Connect(t, s), nil, "alpd", "example.org")
	ok := submission("example.org", "p1", "")
	cases := map[string]func(*ingress.Submission){
		"other tenant":  func(s *ingress.Submission) { s.Sender.Tenant = "other.example" },
		"no person":     func(s *ingress.Submission) { s.Sender.PersonID = "" },
		"person token":  func(s *ingress.Submission) { s.Sender.PersonID = "a.b" },
		"no agent":      func(s *ingress.Submission) { s.Sender.AgentID = "" },
		"no recipient":  func(s *ingress.Submission) { s.Envelope.To = "" },
		"no type":       func(s *ingress.Submission) { s.Envelope.Type = "" },
		"body not json": func(s *ingress.Submission) { s.Envelope.Body = []byte("{oops") },
		"no envelope":   func(s *ingress.Submission) { s.Envelope = nil },
		"unset trust":   func(s *ingress.Submission) { s.Sender.Trust = nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED },
	}
	for name, mod := range cases {
		sub := ok
		sub.Envelope = proto.CloneOf(ok.Envelope)
		mod(&sub)
		if _, err := r.b.Ingress().Submit(context.Background(), sub); !errors.Is(err, ingress.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if n := streamMsgs(t, r.b.Bus().JetStream(), "ALPD_SEND"); n != 0 {
		t.Fatalf("rejected submissions left %d events", n)
	}
}

// TestTwoBrokersOneNATS runs two brokers for two tenants in one process on
// one NATS and one metrics registry: no panic, and neither sees the other's
// traffic.
func TestTwoBrokersOneNATS(t *testing.T) {
	s := natstest.RunJetStream(t)
	nc := natstest.Connect(t, s)
	reg := prometheus.NewRegistry()
	a := start(t, nc, reg, "tenant_a", "a.example")
	b := start(t, nc, reg, "tenant_b", "b.example")
	ctx := context.Background()
	js := a.b.Bus().JetStream()

	if _, err := a.b.Ingress().Submit(ctx, submission("a.example", "p1", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.b.Ingress().Submit(ctx, submission("a.example", "p1", "")); !errors.Is(err, ingress.ErrInvalid) {
		t.Fatalf("broker b accepted a's tenant: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if n := streamMsgs(t, js, "TENANT_A_DECIDED"); n != 1 {
			return fmt.Errorf("a decided %d", n)
		}
		return nil
	})
	for _, name := range []string{"TENANT_B_SEND", "TENANT_B_DECIDED", "TENANT_B_LEDGER_WORK"} {
		if n := streamMsgs(t, js, name); n != 0 {
			t.Errorf("%s holds %d messages of the other broker", name, n)
		}
	}
	// Each broker's keys are its own tenant's.
	if _, err := b.ks.Active(ctx, "a.example", alpv1.KeyPurpose_KEY_PURPOSE_DATA); err == nil {
		t.Error("broker b has keys for tenant a")
	}
	// Metrics of both live in the shared registry, labelled by broker.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	brokers := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "broker" {
					brokers[l.GetValue()] = true
				}
			}
		}
	}
	if !brokers["tenant_a"] || !brokers["tenant_b"] {
		t.Fatalf("metrics labelled by broker: %v", brokers)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	s := natstest.RunJetStream(t)
	nc := natstest.Connect(t, s)
	ks := keystore.NewMemory()
	cases := []struct {
		name string
		cfg  broker.Config
		deps broker.Deps
		want string
	}{
		{"bad name", broker.Config{Name: "a.b", Tenants: []string{"x.org"}}, broker.Deps{NATS: nc, KeyStore: ks}, "name"},
		{"no tenants", broker.Config{Name: "a"}, broker.Deps{NATS: nc, KeyStore: ks}, "tenant"},
		{"bad tenant", broker.Config{Name: "a", Tenants: []string{"Not A Domain"}}, broker.Deps{NATS: nc, KeyStore: ks}, "Not A Domain"},
		{"unknown service", broker.Config{Name: "a", Tenants: []string{"x.org"}, Services: []string{"mailer"}}, broker.Deps{NATS: nc, KeyStore: ks}, "mailer"},
		{"unknown peer", broker.Config{Name: "a", Tenants: []string{"x.org"}, Peers: map[string]string{"dns": "x:1"}}, broker.Deps{NATS: nc, KeyStore: ks}, "dns"},
		{"no nats", broker.Config{Name: "a", Tenants: []string{"x.org"}}, broker.Deps{KeyStore: ks}, "NATS"},
		{"no keystore", broker.Config{Name: "a", Tenants: []string{"x.org"}}, broker.Deps{NATS: nc}, "KeyStore"},
	}
	for _, c := range cases {
		_, err := broker.New(c.cfg, c.deps)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error mentioning %q", c.name, err, c.want)
		}
	}
}

func TestReadyzAndHealth(t *testing.T) {
	s := natstest.RunJetStream(t)
	ks := keystore.NewMemory()
	b, err := broker.New(broker.Config{Name: "alpd", Tenants: []string{"example.org"}},
		broker.Deps{NATS: natstest.Connect(t, s), KeyStore: ks})
	if err != nil {
		t.Fatal(err)
	}
	// Before Run: not ready.
	if b.Ready() == nil {
		t.Fatal("ready before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	<-b.Started()
	testkit.Eventually(t, 10*time.Second, b.Ready)
	statuses := b.ServiceStatuses(ctx)
	if len(statuses) != 6 {
		t.Fatalf("%d services", len(statuses))
	}
	for _, st := range statuses {
		if !st.Ready || st.GRPC != "ok" {
			t.Errorf("%+v", st)
		}
	}
	// Every service answers Ping over gRPC with its own trace entry.
	for _, role := range envelope.Roles() {
		conn, err := b.Client(role)
		if err != nil {
			t.Fatal(err)
		}
		res, err := broker.Ping(ctx, conn, role, &alpv1.Envelope{Id: "probe"})
		if err != nil || !res.Ready || res.Service != envelope.ServiceName(role) {
			t.Fatalf("ping %v: %+v %v", role, res, err)
		}
		if tr := envelope.NMP(res.Envelope).GetTrace(); len(tr) != 1 || tr[0].GetService() != res.Service {
			t.Fatalf("ping trace %v", tr)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := b.Run(context.Background()); err == nil {
		t.Fatal("second Run accepted")
	}
}
