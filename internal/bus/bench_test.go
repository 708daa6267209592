package bus

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/alpd-project/alpd/internal/natstest"
)

// BenchmarkBusVsRawJetStream measures, in one run on one server, raw
// jetstream publish+ack (the floor), Bus.Publish (+ack) and consumption
// through a supervised consumer, and reports each as
// nanoseconds per event and as a ratio to the floor.
func BenchmarkBusVsRawJetStream(b *testing.B) {
	s := natstest.RunJetStream(b)
	nc := natstest.Connect(b, s)
	bus := newBus(b, nc, nil)
	ctx := context.Background()
	ensure(b, bus, logSpec())
	ensure(b, bus, StreamSpec{Name: "raw", Subjects: []string{"raw.>"}})
	payload, _ := proto.Marshal(sendEvent("payload", ""))

	n := b.N
	b.ResetTimer()

	start := time.Now()
	for i := range n {
		if _, err := bus.js.Publish(ctx, "raw.x", payload, jetstream.WithMsgID("raw-"+strconv.Itoa(i))); err != nil {
			b.Fatal(err)
		}
	}
	raw := time.Since(start)

	start = time.Now()
	for i := range n {
		if _, err := bus.Publish(ctx, "alp.send.example_org.p", sendEvent("bench-"+strconv.Itoa(i), "")); err != nil {
			b.Fatal(err)
		}
	}
	pub := time.Since(start)

	var handled atomic.Int64
	done := make(chan struct{})
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start = time.Now()
	if _, err := bus.Consume(cctx, ConsumerSpec{Durable: "bench", Stream: "send"}, func(ctx context.Context, d Delivery) error {
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	<-done
	consume := time.Since(start)
	b.StopTimer()

	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(n) }
	b.ReportMetric(per(raw), "raw-ns/event")
	b.ReportMetric(per(pub), "publish-ns/event")
	b.ReportMetric(per(consume), "consume-ns/event")
	b.ReportMetric(float64(pub)/float64(raw), "publish/raw")
	b.ReportMetric(float64(consume)/float64(raw), "consume/raw")
}
