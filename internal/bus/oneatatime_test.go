package bus

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/alpd-project/alpd/internal/natstest"
)

// TestOneAtATimeHoldsNothingBehindAStuckHandler: with OneAtATime, a
// worker stuck in its handler holds no other message: every message
// published after the stuck one is handled by the other worker while it
// stays stuck (with a buffer, some would wait behind it in its worker's
// pull).
func TestOneAtATimeHoldsNothingBehindAStuckHandler(t *testing.T) {
	s := natstest.RunJetStream(t)
	b := newBus(t, natstest.Connect(t, s), func(o *Options) { o.AckWait = 30 * time.Second })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ensure(t, b, logSpec())
	release := make(chan struct{})
	defer close(release)
	var stuck atomic.Bool
	var others atomic.Int32
	if _, err := b.Consume(ctx, ConsumerSpec{Durable: "one", Stream: "send", Workers: 2, OneAtATime: true},
		func(ctx context.Context, d Delivery) error {
			if d.Event.GetHeader().GetEventId() == "stuck" {
				stuck.Store(true)
				<-release
				return nil
			}
			others.Add(1)
			return nil
		}); err != nil {
		t.Fatal(err)
	}
	publish := func(id string) {
		ev := sendEvent(id, "")
		ev.Header.Occurred = timestamppb.Now()
		if _, err := b.Publish(ctx, "alp.send.example_org.p", ev); err != nil {
			t.Fatal(err)
		}
	}
	publish("stuck")
	for deadline := time.Now().Add(5 * time.Second); !stuck.Load(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stuck message was not handled")
		}
	}
	const n = 50
	for i := range n {
		publish(fmt.Sprintf("e%d", i))
	}
	deadline := time.Now().Add(5 * time.Second)
	for others.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d messages after the stuck one handled while it is stuck", others.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
