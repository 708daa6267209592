package bus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/testkit"
)

const tenant = "example.org"

func newBus(t testing.TB, nc *nats.Conn, mod func(*Options)) *Bus {
	t.Helper()
	o := Options{Namespace: "t", Registerer: prometheus.NewRegistry(), MaxDeliver: 3, AckWait: 2 * time.Second}
	if mod != nil {
		mod(&o)
	}
	b, err := New(nc, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureShared(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

func sendEvent(id, causation string) *alpv1.Event {
	return &alpv1.Event{
		Header: &alpv1.EventHeader{
			Type: "send_requested", SchemaVersion: 1, EventId: id, CausationId: causation,
			Tenant: tenant, ProducerRole: alpv1.Role_ROLE_INGRESS,
		},
		Body: &alpv1.Event_SendRequested{SendRequested: &alpv1.SendRequested{
			Envelope: &alpv1.Envelope{Id: "env-" + id, Tenant: tenant},
		}},
	}
}

func logSpec() StreamSpec {
	return StreamSpec{Name: "send", Subjects: []string{"alp.send.example_org.>"}, Retention: jetstream.LimitsPolicy}
}

func ensure(t testing.TB, b *Bus, spec StreamSpec) jetstream.Stream {
	t.Helper()
	s, err := b.EnsureStream(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSubject(t *testing.T) {
	s, err := Subject("send", "Mail.Example.org", "p123")
	if err != nil || s != "alp.send.mail_example_org.p123" {
		t.Fatalf("got %q, %v", s, err)
	}
	for _, bad := range []string{"", "a.b", "a*", ">", "a b"} {
		if _, err := Subject("send", tenant, bad); err == nil {
			t.Errorf("Subject accepted person token %q", bad)
		}
	}
}

func TestPublishRejectsInvalidEvents(t *testing.T) {
	s := natstest.RunJetStream(t)
	b := newBus(t, natstest.Connect(t, s), nil)
	ensure(t, b, logSpec())
	cases := map[string]*alpv1.Event{
		"no header": {Body: sendEvent("1", "").Body},
		"no id":     {Header: &alpv1.EventHeader{Type: "send_requested", Tenant: tenant}, Body: sendEvent("1", "").Body},
		"no tenant": {Header: &alpv1.EventHeader{Type: "send_requested", EventId: "1"}, Body: sendEvent("1", "").Body},
		"no body":   {Header: &alpv1.EventHeader{Type: "send_requested", EventId: "1", Tenant: tenant}},
		"type lies": {Header: &alpv1.EventHeader{Type: "decided", EventId: "1", Tenant: tenant}, Body: sendEvent("1", "").Body},
	}
	for name, ev := range cases {
		if _, err := b.Publish(context.Background(), "alp.send.example_org.p", ev); !errors.Is(err, ErrInvalidEvent) {
			t.Errorf("%s: got %v, want ErrInvalidEvent", name, err)
		}
	}
}

func TestPublishDedupe(t *testing.T) {
	s := natstest.RunJetStream(t)
	b := newBus(t, natstest.Connect(t, s), nil)
	st := ensure(t, b, logSpec())
	ctx := context.Background()
	// Two events derived from the same source with the same kind are one
	// event: a re-run of the handler after a redelivery.
	a1, err := b.Publish(ctx, "alp.send.example_org.p", sendEvent("e1", "src"))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := b.Publish(ctx, "alp.send.example_org.p", sendEvent("e2", "src"))
	if err != nil {
		t.Fatal(err)
	}
	if !a2.Duplicate || a2.Sequence != a1.Sequence {
		t.Fatalf("second publish: duplicate=%v seq=%d, want duplicate of %d", a2.Duplicate, a2.Sequence, a1.Sequence)
	}
	info, _ := st.Info(ctx)
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages, want 1", info.State.Msgs)
	}
	m, _ := st.GetMsg(ctx, a1.Sequence)
	if m.Header.Get(HeaderEventType) != "send_requested" || m.Header.Get(HeaderProducerRole) != "ROLE_INGRESS" {
		t.Fatalf("headers: %v", m.Header)
	}
}

func TestAppendExpectedSequence(t *testing.T) {
	s := natstest.RunJetStream(t)
	b := newBus(t, natstest.Connect(t, s), nil)
	ensure(t, b, logSpec())
	ctx := context.Background()
	subj := "alp.send.example_org.agg"

	seq1, err := b.Append(ctx, subj, 0, sendEvent("a1", ""))
	if err != nil {
		t.Fatal(err)
	}
	// Retry of the stored append (ack lost): success with the same sequence.
	again, err := b.Append(ctx, subj, 0, sendEvent("a1", ""))
	if err != nil || again != seq1 {
		t.Fatalf("retry after success: seq %d err %v, want %d nil", again, err, seq1)
	}
	// Another writer still expecting an empty subject conflicts.
	if _, err := b.Append(ctx, subj, 0, sendEvent("b1", "")); !errors.Is(err, ErrConflict) {
		t.Fatalf("competing append: %v, want ErrConflict", err)
	}
	last, err := b.LastSequence(ctx, subj)
	if err != nil || last != seq1 {
		t.Fatalf("LastSequence %d %v", last, err)
	}
	seq2, err := b.Append(ctx, subj, last, sendEvent("b1", ""))
	if err != nil || seq2 <= seq1 {
		t.Fatalf("append at version: %d %v", seq2, err)
	}
	if got := testutil.ToFloat64(b.metrics.appendConflicts); got != 1 {
		t.Fatalf("conflicts metric %v, want 1", got)
	}
	if n, _ := b.LastSequence(ctx, "alp.send.example_org.empty"); n != 0 {
		t.Fatalf("empty subject has last sequence %d", n)
	}
}

func TestIsWrongLastSequenceCodes(t *testing.T) {
	for _, code := range []jetstream.ErrorCode{10071, 10164} {
		err := fmt.Errorf("wrapped: %w", &jetstream.APIError{ErrorCode: code})
		if !IsWrongLastSequence(err) {
			t.Errorf("code %d not recognised", code)
		}
	}
	if IsWrongLastSequence(&jetstream.APIError{ErrorCode: 10058}) || IsWrongLastSequence(errors.New("x")) {
		t.Error("other errors recognised as conflicts")
	}
}

func TestEnsureStreamUpdatesConfig(t *testing.T) {
	s := natstest.RunJetStream(t)
	b := newBus(t, natstest.Connect(t, s), nil)
	ctx := context.Background()
	spec := logSpec()
	spec.MaxAge = time.Hour
	ensure(t, b, spec)
	// A newer release declares more subjects and a longer retention.
	spec.Subjects = append(spec.Subjects, "alp.send.other_org.>")
	spec.MaxAge = 2 * time.Hour
	spec.Description = "v2"
	st := ensure(t, b, spec)
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Config.Subjects) != 2 || info.Config.MaxAge != 2*time.Hour || info.Config.Description != "v2" {
		t.Fatalf("stream not updated: %+v", info.Config)
	}
	// Unchanged spec: no update call needed, same result.
	ensure(t, b, spec)
}

func TestWorkQueueSourcedFromEventLog(t *testing.T) {
	s := natstest.RunJetStream(t)
	b := newBus(t, natstest.Connect(t, s), nil)
	ctx := context.Background()
	ensure(t, b, logSpec())
	wq := ensure(t, b, StreamSpec{Name: "work", Retention: jetstream.WorkQueuePolicy, MaxAge: time.Hour,
		Sources: map[string]string{"send": "alp.send.>"}})
	var got atomic.Int32
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := b.Consume(cctx, ConsumerSpec{Durable: "worker", Stream: "work"}, func(ctx context.Context, d Delivery) error {
		got.Add(1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := b.Publish(ctx, "alp.send.example_org.p", sendEvent(strconv.Itoa(i), "")); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		info, err := wq.Info(ctx)
		if err != nil {
			return err
		}
		if got.Load() != 5 || info.State.Msgs != 0 {
			return fmt.Errorf("handled %d, work queue holds %d", got.Load(), info.State.Msgs)
		}
		return nil
	})
}

// effectOf is the event a test handler makes for cause: a decided event
// on its own subject, caused by it (so its message id is derived from it).
func effectOf(cause *alpv1.Event) *alpv1.Event {
	return &alpv1.Event{
		Header: &alpv1.EventHeader{
			Type: "decided", SchemaVersion: 1, EventId: "effect-of-" + cause.GetHeader().GetEventId(),
			CausationId: cause.GetHeader().GetEventId(), Tenant: tenant, ProducerRole: alpv1.Role_ROLE_POLICY,
			Occurred: timestamppb.Now(),
		},
		Body: &alpv1.Event_Decided{Decided: &alpv1.Decided{Envelope: cause.GetSendRequested().GetEnvelope()}},
	}
}

func effectSpec() StreamSpec {
	return StreamSpec{Name: "decided", Subjects: []string{"alp.decided.example_org.>"}, Retention: jetstream.LimitsPolicy}
}

func effectSubject(cause *alpv1.Event) string {
	return "alp.decided.example_org.p." + cause.GetHeader().GetEventId()
}

// TestFailureAfterTheEffectMakesItOnce: a handler that publishes its
// effect and then fails is run again on the redelivery, marked Repeat, and
// its second publish is a duplicate the effect stream drops: one effect.
func TestFailureAfterTheEffectMakesItOnce(t *testing.T) {
	s := natstest.RunJetStream(t)
	b := newBus(t, natstest.Connect(t, s), nil)
	ctx := context.Background()
	ensure(t, b, logSpec())
	effects := ensure(t, b, effectSpec())
	var mu sync.Mutex
	var repeats []bool
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := b.Consume(cctx, ConsumerSpec{Durable: "once", Stream: "send", RetryDelay: 10 * time.Millisecond},
		func(ctx context.Context, d Delivery) error {
			if _, err := b.Publish(ctx, effectSubject(d.Event), effectOf(d.Event)); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			repeats = append(repeats, d.Repeat)
			if len(repeats) == 1 {
				return errors.New("failed after its effect")
			}
			return nil
		}); err != nil {
		t.Fatal(err)
	}
	ev := sendEvent("e1", "")
	ev.Header.Occurred = timestamppb.Now()
	if _, err := b.Publish(ctx, "alp.send.example_org.p", ev); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(repeats) != 2 {
			return fmt.Errorf("handled %d times", len(repeats))
		}
		return nil
	})
	mu.Lock()
	if repeats[0] || !repeats[1] {
		t.Errorf("Repeat on the first delivery %v, on the redelivery %v; want false, true", repeats[0], repeats[1])
	}
	mu.Unlock()
	if info, _ := effects.Info(ctx); info.State.Msgs != 1 {
		t.Fatalf("effect stream holds %d messages, want 1", info.State.Msgs)
	}
}

// TestRepeatBeyondTheDedupeWindow: the same event stored again after the
// dedupe window is a new message, delivered for the first time, which the
// window cannot catch; it reaches the handler marked Repeat (it is older
// than half the window), and a handler that then looks for its effect
// makes none again.
func TestRepeatBeyondTheDedupeWindow(t *testing.T) {
	s := natstest.RunJetStream(t)
	b := newBus(t, natstest.Connect(t, s), func(o *Options) { o.Duplicates = 200 * time.Millisecond })
	ctx := context.Background()
	st := ensure(t, b, logSpec())
	effects := ensure(t, b, effectSpec())
	var handled, repeats atomic.Int32
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := b.Consume(cctx, ConsumerSpec{Durable: "once", Stream: "send"}, func(ctx context.Context, d Delivery) error {
		defer handled.Add(1) // counted once it has made its effect
		effect := effectOf(d.Event)
		if d.Repeat {
			repeats.Add(1)
			last, err := b.LastMessage(ctx, effectSubject(d.Event))
			if err != nil {
				return err
			}
			if last != nil && last.Header.Get(jetstream.MsgIDHeader) == MsgID(effect) {
				return nil // made already
			}
		}
		_, err := b.Publish(ctx, effectSubject(d.Event), effect)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := sendEvent("e1", "")
	ev.Header.Occurred = timestamppb.Now()
	if _, err := b.Publish(ctx, "alp.send.example_org.p", ev); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if handled.Load() != 1 {
			return fmt.Errorf("handled %d", handled.Load())
		}
		return nil
	})
	time.Sleep(400 * time.Millisecond) // past the dedupe window
	ack, err := b.Publish(ctx, "alp.send.example_org.p", ev)
	if err != nil || ack.Duplicate {
		t.Fatalf("republish after window: %+v %v (want stored again)", ack, err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if handled.Load() != 2 {
			return fmt.Errorf("handled %d", handled.Load())
		}
		return nil
	})
	if info, _ := effects.Info(ctx); info.State.Msgs != 1 {
		t.Errorf("effect stream holds %d messages, want 1 (made once)", info.State.Msgs)
	}
	if info, _ := st.Info(ctx); info.State.Msgs != 2 {
		t.Fatalf("send stream has %d messages, want 2 (stored twice)", info.State.Msgs)
	}
	if repeats.Load() != 1 || testutil.ToFloat64(b.metrics.repeats.WithLabelValues(c.Name())) != 1 {
		t.Errorf("deliveries marked Repeat: %d (metric %v), want 1: the copy stored after the window",
			repeats.Load(), testutil.ToFloat64(b.metrics.repeats.WithLabelValues(c.Name())))
	}
}

// TestMayRepeat pins the rule of Delivery.Repeat: delivered before, or an
// event at least half the dedupe window old, or one without a time.
func TestMayRepeat(t *testing.T) {
	b := newBus(t, natstest.Connect(t, natstest.RunJetStream(t)), func(o *Options) { o.Duplicates = 2 * time.Minute })
	now := time.Now()
	at := func(d time.Duration) *alpv1.Event {
		ev := sendEvent("e", "")
		ev.Header.Occurred = timestamppb.New(now.Add(-d))
		return ev
	}
	for _, c := range []struct {
		name      string
		ev        *alpv1.Event
		delivered uint64
		want      bool
	}{
		{"first delivery of a fresh event", at(time.Second), 1, false},
		{"just under half the window", at(time.Minute - time.Millisecond), 1, false},
		{"half the window", at(time.Minute), 1, true},
		{"older than the window", at(time.Hour), 1, true},
		{"redelivered fresh event", at(time.Second), 2, true},
		{"event from the future (producer clock ahead)", at(-time.Second), 1, false},
		{"no time", sendEvent("e", ""), 1, true},
	} {
		if got := b.mayRepeat(c.ev, &jetstream.MsgMetadata{NumDelivered: c.delivered}, now); got != c.want {
			t.Errorf("%s: Repeat %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPoisonMessageDeadLettered(t *testing.T) {
	s := natstest.RunJetStream(t)
	nc := natstest.Connect(t, s)
	b := newBus(t, nc, nil)
	ctx := context.Background()
	ensure(t, b, logSpec())
	var attempts atomic.Int32
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := b.Consume(cctx, ConsumerSpec{Durable: "poison", Stream: "send", RetryDelay: 10 * time.Millisecond},
		func(ctx context.Context, d Delivery) error {
			if d.Event.GetHeader().GetEventId() == "bad" {
				attempts.Add(1)
				return errors.New("cannot handle this one")
			}
			if d.Event.GetHeader().GetEventId() == "fatal" {
				return Permanent(errors.New("malformed"))
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"bad", "good", "fatal"} {
		if _, err := b.Publish(ctx, "alp.send.example_org.p", sendEvent(id, "")); err != nil {
			t.Fatal(err)
		}
	}
	// Bytes that are not an event at all.
	if _, err := b.js.Publish(ctx, "alp.send.example_org.p", []byte("\xff\xffnot protobuf")); err != nil {
		t.Fatal(err)
	}
	dls, err := b.js.Stream(ctx, b.StreamName(DeadLetterStream))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		info, err := dls.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 3 {
			return fmt.Errorf("dead letters: %d", info.State.Msgs)
		}
		return nil
	})
	if attempts.Load() != 3 {
		t.Fatalf("poison handled %d times, want MaxDeliver=3", attempts.Load())
	}
	if got := testutil.ToFloat64(b.metrics.deadLetters.WithLabelValues(c.Name())); got != 3 {
		t.Fatalf("dead-letter metric %v", got)
	}
	var m *jetstream.RawStreamMsg
	for seq := uint64(1); seq <= 3; seq++ {
		if mm, err := dls.GetMsg(ctx, seq); err == nil && mm.Header.Get(HeaderEventID) == "bad" {
			m = mm
		}
	}
	if m == nil {
		t.Fatal("poison event not among the dead letters")
	}
	if m.Header.Get(HeaderDeadLetterReason) != "cannot handle this one" || m.Header.Get(HeaderDeadLetterDeliveries) != "3" ||
		m.Header.Get(HeaderDeadLetterConsumer) != c.Name() || m.Subject != b.DeadLetterSubject("poison") {
		t.Fatalf("dead letter headers: %v subject %s", m.Header, m.Subject)
	}
	// The good one was processed, the consumer is still healthy.
	if got := testutil.ToFloat64(b.metrics.processed.WithLabelValues(c.Name())); got != 1 {
		t.Fatalf("processed %v, want 1", got)
	}
}

// TestDeadLetterFromASourcedQueue: a permanent failure on a work queue
// sourced from an event log, of an event appended with an expectation, is
// dead-lettered once and terminated. The server's own headers on the
// message (Nats-Stream-Source, the append's Nats-Expected-…) are refused
// on a publish, so a copy of them kept the dead letter from being stored
// and the event came back every AckWait.
func TestDeadLetterFromASourcedQueue(t *testing.T) {
	s := natstest.RunJetStream(t)
	b := newBus(t, natstest.Connect(t, s), nil)
	ctx := context.Background()
	ensure(t, b, logSpec())
	wq := ensure(t, b, StreamSpec{Name: "work", Retention: jetstream.WorkQueuePolicy, MaxAge: time.Hour,
		Sources: map[string]string{"send": "alp.send.>"}})
	var attempts atomic.Int32
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := b.Consume(cctx, ConsumerSpec{Durable: "sourced", Stream: "work", AckWait: time.Second}, func(ctx context.Context, d Delivery) error {
		attempts.Add(1)
		return Permanent(errors.New("cannot ever handle this"))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(ctx, "alp.send.example_org.p.e1", 0, sendEvent("appended", "")); err != nil {
		t.Fatal(err)
	}
	dls, err := b.js.Stream(ctx, b.StreamName(DeadLetterStream))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		info, err := dls.Info(ctx)
		if err != nil {
			return err
		}
		winfo, err := wq.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 1 || winfo.State.Msgs != 0 {
			return fmt.Errorf("dead letters %d, work queue %d", info.State.Msgs, winfo.State.Msgs)
		}
		return nil
	})
	m, err := dls.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(HeaderEventID) != "appended" || m.Header.Get(HeaderDeadLetterReason) != "cannot ever handle this" {
		t.Fatalf("dead letter headers: %v", m.Header)
	}
	time.Sleep(1500 * time.Millisecond) // past AckWait: a terminated event stays gone
	if n := attempts.Load(); n != 1 {
		t.Fatalf("handled %d times, want once", n)
	}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestConsumerResumesAfterNATSRestart stops the server under a running
// consumer and starts it again on the same store: processing resumes without
// touching the consumer.
func TestConsumerResumesAfterNATSRestart(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	start := func() *server.Server {
		o := natstest.Options(dir)
		o.Port = port
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("server not ready")
		}
		return s
	}
	s := start()
	nc, err := Connect([]string{s.ClientURL()}, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b := newBus(t, nc, nil)
	ctx := context.Background()
	ensure(t, b, logSpec())
	var mu sync.Mutex
	seen := map[string]bool{}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := b.Consume(cctx, ConsumerSpec{Durable: "resume", Stream: "send",
		EnsureStream: func(ctx context.Context) error { _, err := b.EnsureStream(ctx, logSpec()); return err }},
		func(ctx context.Context, d Delivery) error {
			mu.Lock()
			seen[d.Event.GetHeader().GetEventId()] = true
			mu.Unlock()
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(id string) {
		t.Helper()
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		defer pcancel()
		for {
			_, err := b.Publish(pctx, "alp.send.example_org.p", sendEvent(id, ""))
			if err == nil {
				return
			}
			if pctx.Err() != nil {
				t.Fatalf("publish %s: %v", id, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	count := func(want int) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != want {
				return fmt.Errorf("handled %d of %d", len(seen), want)
			}
			return nil
		}
	}
	publish("before")
	testkit.Eventually(t, 5*time.Second, count(1))

	s.Shutdown()
	s.WaitForShutdown()
	time.Sleep(300 * time.Millisecond)
	s = start()
	defer s.Shutdown()

	publish("after")
	testkit.Eventually(t, 20*time.Second, count(2))
	testkit.Eventually(t, 10*time.Second, func() error {
		if !c.Ready() {
			return errors.New("consumer not ready")
		}
		return nil
	})
}

func TestGracefulDrainOnCancel(t *testing.T) {
	s := natstest.RunJetStream(t)
	b := newBus(t, natstest.Connect(t, s), nil)
	ctx := context.Background()
	ensure(t, b, logSpec())
	release := make(chan struct{})
	var handled atomic.Int32
	cctx, cancel := context.WithCancel(ctx)
	c, err := b.Consume(cctx, ConsumerSpec{Durable: "drain", Stream: "send"}, func(ctx context.Context, d Delivery) error {
		<-release
		handled.Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, "alp.send.example_org.p", sendEvent("x", "")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the handler holds the message
	cancel()
	close(release)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("consumer did not stop")
	}
	if handled.Load() != 1 {
		t.Fatalf("in-flight message not finished on shutdown: %d", handled.Load())
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		cons, err := b.js.Consumer(ctx, b.StreamName("send"), c.Name())
		if err != nil {
			return err
		}
		if ci := cons.CachedInfo(); ci.NumAckPending != 0 || ci.AckFloor.Stream != 1 {
			return fmt.Errorf("message not acked after stop: ack pending %d floor %d", ci.NumAckPending, ci.AckFloor.Stream)
		}
		return nil
	})
}

func TestTwoNamespacesDoNotMix(t *testing.T) {
	s := natstest.RunJetStream(t)
	nc := natstest.Connect(t, s)
	a := newBus(t, nc, func(o *Options) { o.Namespace = "a" })
	bb := newBus(t, nc, func(o *Options) { o.Namespace = "b" })
	ctx := context.Background()
	ensure(t, a, StreamSpec{Name: "send", Subjects: []string{"alp.send.a_org.>"}})
	ensure(t, bb, StreamSpec{Name: "send", Subjects: []string{"alp.send.b_org.>"}})
	// Overlapping subjects between namespaces are refused by the server.
	if _, err := bb.EnsureStream(ctx, StreamSpec{Name: "other", Subjects: []string{"alp.send.a_org.>"}}); err == nil {
		t.Fatal("overlapping stream accepted")
	}
}

func TestForbiddenProducerDeadLettered(t *testing.T) {
	s := natstest.RunJetStream(t)
	b := newBus(t, natstest.Connect(t, s), func(o *Options) {
		o.CheckProducer = func(subject string, ev *alpv1.Event) error {
			if ev.GetHeader().GetProducerRole() != alpv1.Role_ROLE_INGRESS {
				return errors.New("only ingress produces send_requested")
			}
			return nil
		}
	})
	ctx := context.Background()
	ensure(t, b, logSpec())
	var handled atomic.Int32
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := b.Consume(cctx, ConsumerSpec{Durable: "checked", Stream: "send"}, func(ctx context.Context, d Delivery) error {
		handled.Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	forged := sendEvent("forged", "")
	forged.Header.ProducerRole = alpv1.Role_ROLE_POLICY
	for _, ev := range []*alpv1.Event{forged, sendEvent("genuine", "")} {
		if _, err := b.Publish(ctx, "alp.send.example_org.p", ev); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if n := testutil.ToFloat64(b.metrics.forbiddenProducer.WithLabelValues(c.Name())); n != 1 {
			return fmt.Errorf("forbidden producer count %v", n)
		}
		if handled.Load() != 1 {
			return fmt.Errorf("handled %d", handled.Load())
		}
		return nil
	})
	dls, _ := b.js.Stream(ctx, b.StreamName(DeadLetterStream))
	m, err := dls.GetMsg(ctx, 1)
	if err != nil || m.Header.Get(HeaderEventID) != "forged" {
		t.Fatalf("dead letter: %v %v", m, err)
	}
}

func TestLastMessageIn(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunJetStream(t))
	b := newBus(t, nc, nil)
	ctx := context.Background()
	if _, err := b.LastMessageIn(ctx, "send", "alp.send.example_org.p1"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("no stream: %v", err)
	}
	st := ensure(t, b, logSpec())
	if m, err := b.LastMessageIn(ctx, "send", "alp.send.example_org.p1"); m != nil || err != nil {
		t.Fatalf("empty subject: %v %v", m, err)
	}
	seq, err := b.Append(ctx, "alp.send.example_org.p1", 0, sendEvent("e1", ""))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := b.LastMessageIn(ctx, "send", "alp.send.example_org.p1"); err != nil || m.Sequence != seq {
		t.Fatalf("last message: %v %v, want sequence %d", m, err, seq)
	}
	// A deleted and recreated stream is found again (the cached handle is
	// dropped on "stream not found").
	if err := b.JetStream().DeleteStream(ctx, st.CachedInfo().Config.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := b.LastMessageIn(ctx, "send", "alp.send.example_org.p1"); err == nil {
		t.Fatal("deleted stream still answers")
	}
	ensure(t, b, logSpec())
	if m, err := b.LastMessageIn(ctx, "send", "alp.send.example_org.p1"); m != nil || err != nil {
		t.Fatalf("recreated stream: %v %v", m, err)
	}
}

// A work queue that already handed out messages must still get every
// message of a source added (or set up) later: nats-server would start such
// a source at the queue's last message time unless told where to start.
func TestLateSourceStartsAtTheBeginning(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunJetStream(t))
	b := newBus(t, nc, nil)
	ctx := context.Background()
	ensure(t, b, logSpec())
	ensure(t, b, StreamSpec{Name: "other", Subjects: []string{"alp.other.example_org.>"}, Retention: jetstream.LimitsPolicy})
	// The send log already holds a message when the queue learns about it.
	if _, err := b.Publish(ctx, "alp.send.example_org.p1", sendEvent("early", "")); err != nil {
		t.Fatal(err)
	}
	queue := StreamSpec{Name: "work", Retention: jetstream.WorkQueuePolicy, Sources: map[string]string{"other": "alp.other.>"}}
	q := ensure(t, b, queue)
	if _, err := b.js.Publish(ctx, "alp.other.example_org.x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		info, err := q.Info(ctx)
		if err != nil || info.State.Msgs != 1 {
			return fmt.Errorf("queue state %+v, %v", info.State, err)
		}
		return nil
	})
	if err := q.DeleteMsg(ctx, 1); err != nil { // as a consumer's ack would
		t.Fatal(err)
	}
	queue.Sources["send"] = "alp.send.>"
	q = ensure(t, b, queue)
	testkit.Eventually(t, 5*time.Second, func() error {
		info, err := q.Info(ctx)
		if err != nil || info.State.Msgs != 1 {
			return fmt.Errorf("the early send message did not reach the queue: %+v, %v", info.State, err)
		}
		return nil
	})
}

// TestConsumerWaitsForAnotherServicesStream: a consumer on a stream its
// service does not own (no EnsureStream) may start before the owner made
// the stream; it is not ready until then, and handles what comes after.
func TestConsumerWaitsForAnotherServicesStream(t *testing.T) {
	b := newBus(t, natstest.Connect(t, natstest.RunJetStream(t)), nil)
	ctx := context.Background()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var handled atomic.Int32
	c, err := b.Consume(cctx, ConsumerSpec{Durable: "early", Stream: "send"}, func(ctx context.Context, d Delivery) error {
		handled.Add(1)
		return nil
	})
	if err != nil {
		t.Fatalf("consumer on a stream not there yet: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	if c.Ready() {
		t.Fatal("ready without its stream")
	}
	ensure(t, b, logSpec())
	if _, err := b.Publish(ctx, "alp.send.example_org.p", sendEvent("e1", "")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if !c.Ready() || handled.Load() != 1 {
			return fmt.Errorf("ready %v, handled %d", c.Ready(), handled.Load())
		}
		return nil
	})
	// A service's own stream it cannot make is still a failure at start.
	_, err = b.Consume(cctx, ConsumerSpec{Durable: "own", Stream: "missing",
		EnsureStream: func(context.Context) error { return errors.New("cannot create it") }}, func(context.Context, Delivery) error { return nil })
	if err == nil {
		t.Fatal("a consumer whose own stream cannot be made started")
	}
}

// TestEmbeddedSync: the embedded server fsyncs every write unless told
// an interval.
func TestEmbeddedSync(t *testing.T) {
	for _, c := range []struct {
		every  time.Duration
		always bool
	}{{0, true}, {time.Second, false}} {
		e, err := StartEmbedded(EmbeddedOptions{StoreDir: t.TempDir(), SyncInterval: c.every})
		if err != nil {
			t.Fatal(err)
		}
		cfg := e.Server.JetStreamConfig()
		e.Shutdown()
		if cfg == nil || cfg.SyncAlways != c.always || (!c.always && cfg.SyncInterval != c.every) {
			t.Errorf("sync interval %s: server runs with %+v", c.every, cfg)
		}
	}
}

// A handler that asks for an event Later gets it again after its own
// delay (not the consumer's doubling one, which would take 7.75s for five
// retries) and it never becomes a dead letter; the outbox runs such a
// consumer with MaxDeliver -1, so JetStream never gives up either.
func TestLaterIsNotADeadLetter(t *testing.T) {
	s := natstest.RunJetStream(t)
	nc := natstest.Connect(t, s)
	b := newBus(t, nc, nil) // MaxDeliver 3
	ctx := context.Background()
	ensure(t, b, logSpec())
	var attempts atomic.Int32
	var first, last atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := b.Consume(cctx, ConsumerSpec{Durable: "later", Stream: "send", MaxDeliver: -1},
		func(ctx context.Context, d Delivery) error {
			n := attempts.Add(1)
			if n == 1 {
				first.Store(time.Now().UnixNano())
			}
			if n < 6 {
				return Later(100*time.Millisecond, errors.New("the remote is down"))
			}
			last.Store(time.Now().UnixNano())
			return nil
		}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, "alp.send.example_org.p", sendEvent("e-later", "")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if last.Load() == 0 {
			return fmt.Errorf("handled %d times", attempts.Load())
		}
		return nil
	})
	if d := time.Duration(last.Load() - first.Load()); d < 500*time.Millisecond || d > 5*time.Second {
		t.Errorf("5 postponements of 100ms took %s", d)
	}
	dls, err := b.js.Stream(ctx, b.StreamName(DeadLetterStream))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := dls.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Errorf("dead letters after postponements: %+v, %v", info.State, err)
	}
}
