package ingress

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/streams"
)

// ErrUnknownEnvelope: no envelope with that id was submitted for that person
// (or its events have aged out of the streams).
var ErrUnknownEnvelope = errors.New("ingress: unknown envelope")

// Waiter waits for policy's decision on one envelope. Create it before
// submitting, so a fast decision is not missed.
type Waiter struct {
	s                          *Service
	tenant, person, envelopeID string
	sub                        *nats.Subscription
	msgs                       chan *nats.Msg
}

// waiterSlots is how many messages a waiter holds: its subscription takes
// one. (A synchronous subscription would allocate the client's default of
// 64 Ki slots, half a megabyte, for every send.)
const waiterSlots = 1

// Retried submissions look for their decision in the stream at these
// intervals, doubling, while they also listen.
const (
	retryPollFirst = 5 * time.Millisecond
	retryPollMax   = 250 * time.Millisecond
)

// Await starts listening for the decision on an envelope: policy publishes
// it on the envelope's own decided subject, which doubles as the reply
// subject (a core subscription sees the publish; if it misses it, Decision
// still finds it in the stream).
func (s *Service) Await(tenant, personID, envelopeID string) (*Waiter, error) {
	envelopeID, subject, err := envelopeSubject(streams.DecidedSubject, tenant, personID, envelopeID)
	if err != nil {
		return nil, err
	}
	msgs := make(chan *nats.Msg, waiterSlots)
	sub, err := s.Bus.Conn().ChanSubscribe(subject, msgs)
	if err != nil {
		return nil, fmt.Errorf("ingress: await decision on %s: %w", envelopeID, err)
	}
	// Only policy publishes there, once per envelope: the subscription
	// ends with its first message, on the client and the server, so
	// nothing more is sent to NATS when the send is answered (Close).
	if err := sub.AutoUnsubscribe(1); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("ingress: await decision on %s: %w", envelopeID, err)
	}
	return &Waiter{s: s, tenant: tenant, person: personID, envelopeID: envelopeID, sub: sub, msgs: msgs}, nil
}

// Wait returns the decision, or nil when ctx ends first (the caller answers
// "pending"). A retried submission (retry) may have been decided long
// ago, so for it the stream is read first; and since the first request
// may have been answered from policy's publish a moment before the stream
// stored it, which this subscription came too late to see, it keeps
// reading the stream while it listens.
func (w *Waiter) Wait(ctx context.Context, retry bool) (*alpv1.Decided, error) {
	var poll <-chan time.Time
	var timer *time.Timer
	delay := retryPollFirst
	if retry {
		if d, err := w.s.Decision(ctx, w.tenant, w.person, w.envelopeID); d != nil || err != nil {
			return d, err
		}
		timer = time.NewTimer(delay)
		defer timer.Stop()
		poll = timer.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil, nil
		case msg := <-w.msgs:
			if d := decided(msg.Subject, msg.Data, w.envelopeID); d != nil {
				return d, nil
			}
		case <-poll:
			d, err := w.s.Decision(ctx, w.tenant, w.person, w.envelopeID)
			if ctx.Err() != nil {
				return nil, nil
			}
			if d != nil || err != nil {
				return d, err
			}
			delay = min(2*delay, retryPollMax)
			timer.Reset(delay)
		}
	}
}

// Close stops listening (a no-op once the decision has arrived).
func (w *Waiter) Close() { _ = w.sub.Unsubscribe() }

// Decision is policy's decision on one of personID's envelopes, nil while
// there is none yet. An id that is not a UUID is ErrInvalidEnvelopeID.
func (s *Service) Decision(ctx context.Context, tenant, personID, envelopeID string) (*alpv1.Decided, error) {
	envelopeID, subject, err := envelopeSubject(streams.DecidedSubject, tenant, personID, envelopeID)
	if err != nil {
		return nil, err
	}
	m, err := s.Bus.LastMessageIn(ctx, streams.Decided, subject)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil // policy has not created its stream yet: nothing decided
	}
	if err != nil || m == nil {
		return nil, err
	}
	return decided(subject, m.Data, envelopeID), nil
}

// Submitted reports whether personID submitted the envelope (its
// SendRequested is still on the send stream). An id that is not a UUID
// is ErrInvalidEnvelopeID.
func (s *Service) Submitted(ctx context.Context, tenant, personID, envelopeID string) (bool, error) {
	_, subject, err := envelopeSubject(streams.SendSubject, tenant, personID, envelopeID)
	if err != nil {
		return false, err
	}
	m, err := s.Bus.LastMessageIn(ctx, streams.Send, subject)
	return m != nil, err
}

// decided decodes policy's Decided event about envelopeID; anything else
// is nil (a wrong, foreign or undecodable message on the subject is
// ignored, not trusted).
func decided(subject string, data []byte, envelopeID string) *alpv1.Decided {
	ev, err := bus.Decode(data)
	if err != nil || streams.CheckProducer(subject, ev) != nil {
		return nil
	}
	d := ev.GetDecided()
	if d.GetEnvelope().GetId() != envelopeID {
		return nil
	}
	return d
}

// envelopeSubject parses an envelope id from outside (ErrInvalidEnvelopeID
// unless it is a UUID) and builds the envelope's subject on one stream.
func envelopeSubject(build func(tenant, personID, envelopeID string) (string, error), tenant, personID, envelopeID string) (id, subject string, err error) {
	if id, err = ParseEnvelopeID(envelopeID); err != nil {
		return "", "", err
	}
	if subject, err = build(tenant, personID, id); err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return id, subject, nil
}
