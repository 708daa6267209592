package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// Headers on a dead letter, besides the original message's headers.
const (
	HeaderDeadLetterReason     = "Alp-Dead-Letter-Reason"
	HeaderDeadLetterConsumer   = "Alp-Dead-Letter-Consumer"
	HeaderDeadLetterSubject    = "Alp-Dead-Letter-Subject"
	HeaderDeadLetterStreamSeq  = "Alp-Dead-Letter-Stream-Seq"
	HeaderDeadLetterDeliveries = "Alp-Dead-Letter-Deliveries"
)

// Delivery is one event handed to a Handler.
type Delivery struct {
	Event    *alpv1.Event
	Subject  string
	Metadata *jetstream.MsgMetadata
	// Repeat: the event may have been handled before at a time JetStream's
	// dedupe window no longer covers, so the handler must look for its own
	// effect before it makes it again (see Handler). It is set when the
	// message was delivered before, and when the event is older than half
	// the dedupe window (Options.Duplicates): a copy stored again later (a
	// producer that republished, a queue that sourced it twice) or a
	// delivery whose acknowledgement the server lost in a crash arrives
	// as a first delivery, but the event's own time still tells. The half
	// leaves room for the producer's and the handler's clocks to differ.
	Repeat bool
}

// Handler handles one event. Returning nil acknowledges it; an error makes
// JetStream redeliver it (with backoff) until MaxDeliver, then it goes to the
// dead-letter stream; an error wrapped with Permanent goes there at once.
//
// A handler may run more than once for one event (a lost acknowledgement,
// a failure after its effect, a crash), and must then make no second
// effect. Its publishes (Bus.Publish, Append) carry Nats-Msg-Id =
// hash(source event, kind), which the target stream drops as a duplicate
// inside the dedupe window; when d.Repeat is set that may no longer hold,
// and the handler looks its effect up first, or makes it with an
// expectation the server checks forever: an Append that expects the
// effect's subject to be empty (a subject per cause) or to end where the
// handler read it (the ledger's logs, which it also searches for the
// source's leaf on a repeat).
type Handler func(ctx context.Context, d Delivery) error

type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// Permanent marks err as one that no retry can fix (a malformed event).
func Permanent(err error) error { return permanentError{err} }

// laterError asks for the event again after a delay chosen by the handler.
type laterError struct {
	after time.Duration
	err   error
}

func (l laterError) Error() string { return l.err.Error() }
func (l laterError) Unwrap() error { return l.err }

// Later asks for the event again after d, whatever MaxDeliver says and
// without a dead letter: the handler keeps its own deadline (the
// federation outbox retries a remote broker until the item is too old,
// with its own backoff and circuit breaker).
func Later(d time.Duration, err error) error { return laterError{after: d, err: err} }

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// ConsumerSpec declares a durable pull consumer.
type ConsumerSpec struct {
	// Durable name without namespace; the consumer is NS_<Durable>.
	Durable string
	// Stream to consume (name without namespace).
	Stream         string
	FilterSubjects []string
	// Zero values take the bus defaults.
	MaxDeliver    int
	AckWait       time.Duration
	MaxAckPending int
	// Workers is the number of concurrent handler loops in this process.
	Workers int
	// EnsureStream, when set, is called before the consumer is (re)created,
	// so a consumer can bring back a stream its service owns. Without it
	// the stream is another service's, and a consumer started before it
	// exists waits for it (not Ready meanwhile).
	EnsureStream func(ctx context.Context) error
	// RetryDelay is the first redelivery delay after a failure; it doubles
	// with each delivery (default 250ms, at most AckWait).
	RetryDelay time.Duration
	// OneAtATime: each worker fetches one message when it is free instead
	// of keeping a buffer of pulled messages. For handlers that may block
	// for long (the federation outbox waits on remote brokers): a worker
	// stuck on one message then holds no other behind it, which a buffer
	// would keep waiting until the stuck one is done or AckWait passes.
	OneAtATime bool
}

// Consumer is a supervised durable consumer.
type Consumer struct {
	b       *Bus
	spec    ConsumerSpec
	name    string
	handler Handler
	m       consumerMetrics

	running atomic.Int32
	lag     atomic.Uint64
	wg      sync.WaitGroup
	done    chan struct{}
}

// Consume creates the durable consumer and starts handling events until ctx
// is done. It fails fast when the consumer cannot be created at start,
// except on a stream of another service that is not there yet (no
// EnsureStream: services start in any order); once running, every failure
// (NATS restarted, consumer deleted, the stream still missing) is retried
// with backoff without giving up.
func (b *Bus) Consume(ctx context.Context, spec ConsumerSpec, h Handler) (*Consumer, error) {
	if spec.Durable == "" || spec.Stream == "" {
		return nil, errors.New("bus: consumer needs a durable name and a stream")
	}
	if err := CheckToken(spec.Durable); err != nil {
		return nil, fmt.Errorf("bus: durable %q: %w", spec.Durable, err)
	}
	if h == nil {
		return nil, fmt.Errorf("bus: consumer %s has no handler", spec.Durable)
	}
	if spec.MaxDeliver == 0 {
		spec.MaxDeliver = b.opts.MaxDeliver
	}
	if spec.AckWait == 0 {
		spec.AckWait = b.opts.AckWait
	}
	if spec.Workers <= 0 {
		spec.Workers = 1
	}
	if spec.MaxAckPending == 0 {
		spec.MaxAckPending = 256 * spec.Workers
	}
	if spec.RetryDelay == 0 {
		spec.RetryDelay = 250 * time.Millisecond
	}
	c := &Consumer{b: b, spec: spec, name: b.StreamName(spec.Durable), handler: h, done: make(chan struct{})}
	c.m = b.metrics.of(c.name)
	cons, err := c.ensure(ctx)
	switch {
	case err != nil && spec.EnsureStream == nil && errors.Is(err, jetstream.ErrStreamNotFound):
		b.log.Info("consumer waits for its stream, which another service creates", "consumer", c.name, "stream", b.StreamName(spec.Stream))
		cons = nil
	case err != nil:
		return nil, err
	}
	for range spec.Workers {
		c.wg.Add(1)
		go c.supervise(ctx, cons)
	}
	go func() {
		c.wg.Wait()
		close(c.done)
	}()
	return c, nil
}

// Name is the durable consumer's name on the server.
func (c *Consumer) Name() string { return c.name }

// Ready reports whether every handler loop is pulling.
func (c *Consumer) Ready() bool { return int(c.running.Load()) == c.spec.Workers }

// Lag is the number of messages pending as last observed.
func (c *Consumer) Lag() uint64 { return c.lag.Load() }

// Done is closed when every handler loop has stopped after ctx ended and the
// messages already pulled were handled (graceful drain).
func (c *Consumer) Done() <-chan struct{} { return c.done }

func (c *Consumer) ensure(ctx context.Context) (jetstream.Consumer, error) {
	if c.spec.EnsureStream != nil {
		if err := c.spec.EnsureStream(ctx); err != nil {
			return nil, err
		}
	}
	cfg := jetstream.ConsumerConfig{
		Durable:        c.name,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        c.spec.AckWait,
		MaxDeliver:     c.spec.MaxDeliver,
		MaxAckPending:  c.spec.MaxAckPending,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		FilterSubjects: c.spec.FilterSubjects,
		Replicas:       c.b.opts.Replicas,
	}
	cons, err := c.b.js.CreateOrUpdateConsumer(ctx, c.b.StreamName(c.spec.Stream), cfg)
	if err != nil {
		return nil, fmt.Errorf("bus: consumer %s on %s: %w", c.name, c.b.StreamName(c.spec.Stream), err)
	}
	return cons, nil
}

// supervise runs one handler loop and restarts it after any failure until
// ctx is done.
func (c *Consumer) supervise(ctx context.Context, cons jetstream.Consumer) {
	defer c.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		if cons != nil {
			if c.pull(ctx, cons) {
				backoff = 100 * time.Millisecond
			}
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
		var err error
		cons, err = c.ensure(ctx)
		if err != nil {
			c.b.log.Warn("consumer not restored yet", "consumer", c.name, "err", err)
			cons = nil
		}
	}
}

// pull reads from one iterator until it fails or ctx ends. It reports whether
// it delivered anything, which resets the restart backoff.
func (c *Consumer) pull(ctx context.Context, cons jetstream.Consumer) bool {
	if c.spec.OneAtATime {
		return c.pullOne(ctx, cons)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(64), jetstream.PullHeartbeat(2*time.Second), jetstream.PullExpiry(10*time.Second))
	if err != nil {
		c.b.log.Warn("consumer pull failed", "consumer", c.name, "err", err)
		return false
	}
	c.running.Add(1)
	defer c.running.Add(-1)

	// Stop pulling when ctx ends, but let Next hand out what is buffered: the
	// graceful drain. A watchdog also stops the iterator when the consumer
	// disappears on the server, which Next alone may not notice.
	stopped := make(chan struct{})
	defer close(stopped)
	go c.watch(ctx, cons, it, stopped)

	delivered := false
	for {
		msg, err := it.Next()
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				c.b.log.Warn("consumer interrupted; restarting", "consumer", c.name, "err", err)
				it.Stop()
			}
			return delivered
		}
		delivered = true
		// The handler context outlives ctx so a drained message is finished.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.spec.AckWait)
		c.process(hctx, msg)
		cancel()
	}
}

// pullOne is pull without a buffer: one fetch of one message at a time.
// A failed fetch (the consumer gone, NATS away) returns to supervise,
// which recreates the consumer.
func (c *Consumer) pullOne(ctx context.Context, cons jetstream.Consumer) bool {
	c.running.Add(1)
	defer c.running.Add(-1)
	delivered := false
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msg, err := cons.Next(jetstream.FetchContext(fctx))
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return delivered
		case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
			continue // nothing to do for a while
		default:
			c.b.log.Warn("consumer fetch failed; restarting", "consumer", c.name, "err", err)
			return delivered
		}
		delivered = true
		hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), c.spec.AckWait)
		c.process(hctx, msg)
		hcancel()
	}
	return delivered
}

func (c *Consumer) watch(ctx context.Context, cons jetstream.Consumer, it jetstream.MessagesContext, stopped <-chan struct{}) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-stopped:
			return
		case <-ctx.Done():
			it.Drain()
			return
		case <-t.C:
			ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
			info, err := cons.Info(ictx)
			cancel()
			switch {
			case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
				c.b.log.Warn("consumer vanished on the server; recreating", "consumer", c.name)
				it.Stop()
				return
			case err == nil:
				c.setLag(info.NumPending + uint64(info.NumAckPending))
			}
		}
	}
}

func (c *Consumer) setLag(n uint64) {
	c.lag.Store(n)
	c.m.lag.Set(float64(n))
}

func (c *Consumer) process(ctx context.Context, msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		c.b.log.Error("message without metadata", "consumer", c.name, "err", err)
		_ = msg.Term()
		return
	}
	c.setLag(md.NumPending)
	ev, err := Decode(msg.Data())
	if err == nil && Kind(ev) == "" {
		err = errors.New("event has no body this build knows")
	}
	if err == nil && ev.GetHeader().GetEventId() == "" {
		err = errors.New("event has no id")
	}
	if err != nil {
		c.deadLetter(ctx, msg, md, fmt.Sprintf("undecodable: %v", err))
		return
	}
	if check := c.b.opts.CheckProducer; check != nil {
		if err := check(msg.Subject(), ev); err != nil {
			c.m.forbiddenProducer.Inc()
			c.deadLetter(ctx, msg, md, fmt.Sprintf("forbidden producer: %v", err))
			return
		}
	}
	repeat := c.b.mayRepeat(ev, md, time.Now())
	if repeat {
		c.m.repeats.Inc()
	}

	start := time.Now()
	err = c.handler(ctx, Delivery{Event: ev, Subject: msg.Subject(), Metadata: md, Repeat: repeat})
	c.m.handleSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		c.m.failures.Inc()
		if l, ok := errors.AsType[laterError](err); ok {
			c.b.log.Debug("event handling postponed", "consumer", c.name, "event_id", ev.GetHeader().GetEventId(),
				"delivery", md.NumDelivered, "after", l.after, "err", err)
			_ = msg.NakWithDelay(l.after)
			return
		}
		if IsPermanent(err) || md.NumDelivered >= uint64(c.spec.MaxDeliver) {
			c.deadLetter(ctx, msg, md, err.Error())
			return
		}
		c.b.log.Warn("event handling failed; will retry", "consumer", c.name, "event_id", ev.GetHeader().GetEventId(),
			"delivery", md.NumDelivered, "err", err)
		_ = msg.NakWithDelay(c.retryDelay(md.NumDelivered))
		return
	}
	// A plain ack, not waited for: if it is lost the event comes back,
	// marked Repeat, and the handler makes no second effect.
	_ = msg.Ack()
	c.m.processed.Inc()
}

// mayRepeat reports whether a delivery of ev may repeat a handling the
// dedupe window no longer covers (Delivery.Repeat). The window runs from
// the first handling's publish, which came after the event occurred, so an
// event younger than half the window was handled, if at all, less than a
// window ago. An event without a time is taken as a repeat.
func (b *Bus) mayRepeat(ev *alpv1.Event, md *jetstream.MsgMetadata, now time.Time) bool {
	if md.NumDelivered > 1 {
		return true
	}
	occurred := ev.GetHeader().GetOccurred()
	if occurred == nil {
		return true
	}
	return now.Sub(occurred.AsTime()) >= b.opts.Duplicates/2
}

func (c *Consumer) retryDelay(delivered uint64) time.Duration {
	d := c.spec.RetryDelay
	for i := uint64(1); i < delivered && d < c.spec.AckWait; i++ {
		d *= 2
	}
	return min(d, c.spec.AckWait)
}

// deadLetter stores msg on the dead-letter stream and terminates it. If the
// dead-letter stream cannot take it, the message is redelivered later rather
// than lost.
func (c *Consumer) deadLetter(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, reason string) {
	dl := nats.NewMsg(c.b.DeadLetterSubject(c.spec.Durable))
	dl.Data = msg.Data()
	for k, v := range msg.Headers() {
		// The server's own headers (Nats-Stream-Source on a sourced
		// queue, an append's Nats-Expected-…, the original Nats-Msg-Id)
		// would make it refuse or deduplicate the dead letter.
		if strings.HasPrefix(strings.ToLower(k), "nats-") {
			continue
		}
		dl.Header[k] = v
	}
	dl.Header.Set(jetstream.MsgIDHeader, HashID("deadletter", c.name, md.Stream, strconv.FormatUint(md.Sequence.Stream, 10)))
	dl.Header.Set(HeaderDeadLetterReason, reason)
	dl.Header.Set(HeaderDeadLetterConsumer, c.name)
	dl.Header.Set(HeaderDeadLetterSubject, msg.Subject())
	dl.Header.Set(HeaderDeadLetterStreamSeq, strconv.FormatUint(md.Sequence.Stream, 10))
	dl.Header.Set(HeaderDeadLetterDeliveries, strconv.FormatUint(md.NumDelivered, 10))
	if _, err := c.b.js.PublishMsg(ctx, dl); err != nil {
		c.b.log.Error("dead-letter publish failed; message will be redelivered", "consumer", c.name, "err", err)
		_ = msg.NakWithDelay(c.spec.AckWait)
		return
	}
	c.m.deadLetters.Inc()
	c.b.log.Error("event dead-lettered", "consumer", c.name, "subject", msg.Subject(),
		"stream_seq", md.Sequence.Stream, "deliveries", md.NumDelivered, "reason", reason)
	_ = msg.TermWithReason("dead-lettered: " + reason)
}
