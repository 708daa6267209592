package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/seal"
	"github.com/alpd-project/alpd/internal/service"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ledger"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

const tenant = "example.org"

// rig is an embedded NATS (restartable on the same store and port), a
// memory KeyStore with the tenant's keys, and the streams the ledger reads.
type rig struct {
	t testing.TB
	// tenant is the one domain the rig's broker hosts (default the const).
	tenant string
	dir    string
	port   int
	srv    *server.Server
	ks     keystore.KeyStore
	// ingress side
	nc     *nats.Conn
	b      *bus.Bus
	sealer *seal.Sealer
	dup    time.Duration
	// published counts the events the ledger's queue will receive.
	published atomic.Uint64
}

func newRig(t testing.TB, dup time.Duration) *rig {
	t.Helper()
	return newRigOf(t, dup, tenant)
}

// newRigOf is a rig whose broker hosts domain instead: one of two brokers.
func newRigOf(t testing.TB, dup time.Duration, domain string) *rig {
	t.Helper()
	e := &rig{t: t, tenant: domain, dir: t.TempDir(), ks: keystore.NewMemory(), dup: dup}
	e.srv = natstest.RunServer(t, natstest.Options(e.dir))
	e.port = e.srv.Addr().(*net.TCPAddr).Port
	ctx := context.Background()
	for _, p := range []alpv1.KeyPurpose{alpv1.KeyPurpose_KEY_PURPOSE_DATA, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER} {
		if _, err := e.ks.Generate(ctx, e.tenant, p); err != nil {
			t.Fatal(err)
		}
	}
	e.nc = e.connect()
	e.b = e.newBus(e.nc)
	// The streams of the other services the ledger sources from.
	for _, role := range []alpv1.Role{alpv1.Role_ROLE_INGRESS, alpv1.Role_ROLE_IDENTITY, alpv1.Role_ROLE_POLICY, alpv1.Role_ROLE_FEDERATION, alpv1.Role_ROLE_APPROVALS} {
		for _, spec := range streams.Owned(role, []string{e.tenant}, streams.Limits{}) {
			if _, err := e.b.EnsureStream(ctx, spec); err != nil {
				t.Fatal(err)
			}
		}
	}
	kv, err := e.b.JetStream().CreateOrUpdateKeyValue(ctx, seal.BucketConfig(e.b.StreamName(natsauth.DataKeysBucket)))
	if err != nil {
		t.Fatal(err)
	}
	e.sealer = seal.New(kv, e.ks, seal.WithCacheTTL(0))
	return e
}

func (e *rig) connect() *nats.Conn {
	e.t.Helper()
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", e.port), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

func (e *rig) newBus(nc *nats.Conn) *bus.Bus {
	e.t.Helper()
	b, err := bus.New(nc, bus.Options{Namespace: "alpd", Duplicates: e.dup, CheckProducer: streams.CheckProducer,
		AckWait: 2 * time.Second, MaxDeliver: 50})
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// restartNATS stops the server and starts a new one on the same store and
// port; clients reconnect.
func (e *rig) restartNATS() {
	e.t.Helper()
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	o := natstest.Options(e.dir)
	o.Port = e.port
	e.srv = natstest.RunServer(e.t, o)
}

// instance is one running ledger Service with its own connection.
type instance struct {
	nc     *nats.Conn
	svc    *ledger.Service
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
}

func (e *rig) startLedger(o ledger.Options) *instance {
	e.t.Helper()
	nc := e.connect()
	b := e.newBus(nc)
	kv, err := b.JetStream().CreateOrUpdateKeyValue(context.Background(), seal.BucketConfig(b.StreamName(natsauth.DataKeysBucket)))
	if err != nil {
		e.t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = 20 * time.Millisecond
	}
	if o.Partitions == 0 {
		o.Partitions = 4
	}
	svc := ledger.New(service.Deps{Bus: b, Keys: e.ks, Sealer: seal.New(kv, e.ks, seal.WithCacheTTL(0)), Tenants: []string{e.tenant}}, o)
	ctx, cancel := context.WithCancel(context.Background())
	if err := svc.Start(ctx); err != nil {
		cancel()
		e.t.Fatal(err)
	}
	in := &instance{nc: nc, svc: svc, reg: reg, cancel: cancel, done: make(chan struct{})}
	go func() { <-svc.Stopped(); close(in.done) }()
	e.t.Cleanup(in.stop)
	return in
}

func (in *instance) stop() {
	in.cancel()
	select {
	case <-in.done:
	case <-time.After(10 * time.Second):
	}
}

// counter sums a counter (all label values) of the instance's registry.
func (in *instance) counter(name string) float64 {
	mfs, _ := in.reg.Gather()
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += metricValue(m)
		}
	}
	return sum
}

func metricValue(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	if g := m.GetGauge(); g != nil {
		return g.GetValue()
	}
	return 0
}

// sent is one SendRequested the test published.
type sent struct {
	ev     *alpv1.Event
	body   []byte
	person string
}

func personID(i int) string { return fmt.Sprintf("p%031x", i) }

// send publishes a SendRequested for person as ingress does: body sealed
// with the person's data key, one subject per envelope.
func (e *rig) send(person, body string) sent {
	e.t.Helper()
	s := e.newSend(person, body)
	e.publishSend(s)
	return s
}

// newSend builds the SendRequested send publishes, without publishing it.
func (e *rig) newSend(person, body string) sent {
	e.t.Helper()
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7()).String()
	var sb *alpv1.SealedBody
	testkit.Eventually(e.t, 20*time.Second, func() (err error) {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		sb, err = e.sealer.Seal(sctx, e.tenant, person, []byte(body), []byte(id))
		return err
	})
	env := &alpv1.Envelope{Id: id, Tenant: e.tenant, From: "ana@example.org", To: "Bob@Other.Example", Type: "note/v1",
		SealedBody: sb, Created: timestamppb.Now()}
	ev := &alpv1.Event{Header: &alpv1.EventHeader{Type: "send_requested", SchemaVersion: 1,
		EventId: uuid.Must(uuid.NewV7()).String(), CorrelationId: id, Tenant: e.tenant,
		ProducerRole: alpv1.Role_ROLE_INGRESS, Occurred: timestamppb.Now()},
		Body: &alpv1.Event_SendRequested{SendRequested: &alpv1.SendRequested{Envelope: env, SenderPersonId: person}}}
	return sent{ev: ev, body: []byte(body), person: person}
}

// publishSend publishes s on its envelope's send subject.
func (e *rig) publishSend(s sent) {
	e.t.Helper()
	subject, _ := streams.SendSubject(e.tenant, s.person, s.ev.GetSendRequested().GetEnvelope().GetId())
	e.publish(subject, s.ev)
}

// publish publishes ev, retrying while NATS restarts (the message id
// makes a retry of a stored publish a no-op).
func (e *rig) publish(subject string, ev *alpv1.Event) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ack, err := e.b.Publish(ctx, subject, ev)
		cancel()
		if err == nil {
			if !ack.Duplicate {
				e.published.Add(1)
			}
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("publish %s: %v", subject, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// erase does what identity's Erase does.
func (e *rig) erase(person string) {
	e.t.Helper()
	ctx := context.Background()
	if err := e.sealer.Destroy(ctx, e.tenant, person); err != nil {
		e.t.Fatal(err)
	}
	subject, _ := bus.Subject(streams.Identity, e.tenant, "erasure", person)
	ev := &alpv1.Event{Header: &alpv1.EventHeader{Type: "data_key_destroyed", SchemaVersion: 1,
		EventId: uuid.Must(uuid.NewV7()).String(), Tenant: e.tenant, ProducerRole: alpv1.Role_ROLE_IDENTITY, Occurred: timestamppb.Now()},
		Body: &alpv1.Event_DataKeyDestroyed{DataKeyDestroyed: &alpv1.DataKeyDestroyed{Tenant: e.tenant, PersonId: person}}}
	e.publish(subject, ev)
}

// waitDrained waits until the ledger's work queue is empty: every event
// was handled and acknowledged (a work queue drops acknowledged messages).
func (e *rig) waitDrained() {
	e.t.Helper()
	testkit.Eventually(e.t, 30*time.Second, func() error {
		st, err := e.b.JetStream().Stream(context.Background(), e.b.StreamName(streams.LedgerWork))
		if err != nil {
			return err
		}
		info := st.CachedInfo()
		if n := info.State.Msgs; n != 0 {
			return fmt.Errorf("%d events in the ledger's work queue", n)
		}
		if got, want := info.State.LastSeq, e.published.Load(); got < want {
			return fmt.Errorf("%d of %d events reached the ledger's work queue", got, want)
		}
		return nil
	})
}

// streamLeaves reads a person's log straight from the stream, bypassing
// the store: what an auditor would export.
func (e *rig) streamLeaves(person string) ([][]byte, []*alpv1.Event) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js := e.b.JetStream()
	subject, _ := bus.Subject(streams.Ledger, e.tenant, person)
	c, err := js.OrderedConsumer(ctx, e.b.StreamName(streams.Ledger), jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := js.Stream(ctx, e.b.StreamName(streams.Ledger))
	if err != nil {
		e.t.Fatal(err)
	}
	var leaves [][]byte
	var evs []*alpv1.Event
	last, err := st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	for {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			e.t.Fatal(err)
		}
		ev, err := bus.Decode(m.Data())
		if err != nil {
			e.t.Fatal(err)
		}
		leaves = append(leaves, ev.GetLedgerEntryAppended().GetLeaf())
		evs = append(evs, ev)
		md, _ := m.Metadata()
		if md.Sequence.Stream >= last.Sequence {
			return leaves, evs
		}
	}
}

// checkLog verifies a person's log as a reader would, from the stream:
// leaves parse, indexes are 0..n-1 with no gap or repeat, every source
// event appears once per kind; and the store's head and signed checkpoint agree
// with the tree recomputed from those leaves. It returns the entries.
func (e *rig) checkLog(r storage.Reader, person string, want int) []ledgerlog.Entry {
	e.t.Helper()
	ctx := context.Background()
	var head storage.Head
	testkit.Eventually(e.t, 20*time.Second, func() error {
		var err error
		head, err = r.Head(ctx, e.tenant, person)
		if err != nil {
			return err
		}
		if head.Size != uint64(want) || head.CheckpointSize != head.Size {
			return fmt.Errorf("head %d, checkpoint %d, want %d", head.Size, head.CheckpointSize, want)
		}
		return nil
	})
	leaves, evs := e.streamLeaves(person)
	if len(leaves) != want {
		e.t.Fatalf("%d leaves on the stream, want %d", len(leaves), want)
	}
	tree := ledgerlog.NewMemoryTree(len(leaves))
	var entries []ledgerlog.Entry
	sources := map[[2]string]int{}
	for i, leaf := range leaves {
		en, err := ledgerlog.ParseEntry(leaf)
		if err != nil {
			e.t.Fatalf("leaf %d: %v", i, err)
		}
		if en.Index != uint64(i) || evs[i].GetLedgerEntryAppended().GetIndex() != uint64(i) {
			e.t.Fatalf("leaf %d says index %d (event %d): the log forked or has a gap", i, en.Index, evs[i].GetLedgerEntryAppended().GetIndex())
		}
		if en.Log != ledgerlog.Origin(e.tenant, person) {
			e.t.Fatalf("leaf %d is of log %s", i, en.Log)
		}
		source := [2]string{en.SourceEvent, en.Kind}
		if j, dup := sources[source]; dup {
			e.t.Fatalf("source event %s appended twice as %s, at %d and %d", en.SourceEvent, en.Kind, j, i)
		}
		sources[source] = i
		if _, err := tree.Append(leaf); err != nil {
			e.t.Fatal(err)
		}
		entries = append(entries, en)
	}
	root, _ := tree.Root(uint64(len(leaves)))
	if head.Root != root {
		e.t.Fatalf("store root %x, recomputed %x", head.Root, root)
	}
	keys, err := r.PublicKeys(ctx, e.tenant)
	if err != nil {
		e.t.Fatal(err)
	}
	var vkeys []string
	for _, k := range keys {
		vkeys = append(vkeys, k.VerifierKey)
	}
	vs, err := ledgerlog.Verifiers(vkeys...)
	if err != nil {
		e.t.Fatal(err)
	}
	cp, err := ledgerlog.OpenCheckpoint(head.SignedCheckpoint, head.Origin, vs)
	if err != nil {
		e.t.Fatal(err)
	}
	if cp.Size != head.Size || cp.Root != root {
		e.t.Fatalf("checkpoint %v, recomputed root %x of %d", cp, root, len(leaves))
	}
	return entries
}
