package ingress

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/streams"
)

// Delivery states of an envelope sent to a recipient at another broker,
// the same in every binding.
const (
	// DeliveryQueued: in federation's outbox, not yet taken by the remote
	// broker (also before federation wrote any status).
	DeliveryQueued = "queued"
	// DeliverySent: the remote broker accepted it; its side decides.
	DeliverySent = "sent"
	// The remote side's receipt: everything delivered, part of it, held
	// for the recipient, or refused by the recipient's rules.
	DeliveryDelivered = "delivered"
	DeliveryPartial   = "partial"
	DeliveryHeld      = "held"
	DeliveryRefused   = "refused"
	// DeliveryFailed: the remote broker refused it (Code says why), or it
	// could not be sent before federation.outbox_max_age (outbox_expired).
	DeliveryFailed = "failed"
)

var deliveryStates = map[alpv1.DeliveryState]string{
	alpv1.DeliveryState_DELIVERY_STATE_QUEUED:    DeliveryQueued,
	alpv1.DeliveryState_DELIVERY_STATE_SENT:      DeliverySent,
	alpv1.DeliveryState_DELIVERY_STATE_DELIVERED: DeliveryDelivered,
	alpv1.DeliveryState_DELIVERY_STATE_PARTIAL:   DeliveryPartial,
	alpv1.DeliveryState_DELIVERY_STATE_HELD:      DeliveryHeld,
	alpv1.DeliveryState_DELIVERY_STATE_REFUSED:   DeliveryRefused,
	alpv1.DeliveryState_DELIVERY_STATE_FAILED:    DeliveryFailed,
}

// Delivery is where an envelope sent to a recipient at another broker
// stands, from federation's latest OutboundStatus. Its JSON form is the
// one every door answers.
type Delivery struct {
	// State: queued, sent, delivered, partial, held, refused or failed.
	State string `json:"state" jsonschema:"queued, sent, delivered, partial, held, refused or failed"`
	// RemoteBroker is the recipient's home broker, once known.
	RemoteBroker string `json:"remote_broker,omitempty" jsonschema:"the broker name of the recipient's home broker"`
	// Code and Message say why it failed (the remote's code, or
	// outbox_expired).
	Code    string `json:"code,omitempty" jsonschema:"why it failed: the remote broker's code, or outbox_expired"`
	Message string `json:"message,omitempty"`
	// Withheld and Held are the pointers the recipient side withheld and
	// held for the recipient, from its receipt.
	Withheld []string `json:"withheld,omitempty" jsonschema:"pointers the recipient side withheld"`
	Held     []string `json:"held,omitempty" jsonschema:"pointers held for the recipient's decision"`
	// Attempts are the sends tried so far.
	Attempts uint32 `json:"attempts,omitempty"`
}

// remoteRecipient reports whether a decision names a recipient at another
// broker, which federation carries on: the sender side let something
// through, and the address is of no tenant hosted here.
func (s *Service) remoteRecipient(d *alpv1.Decided) bool {
	if d.GetOutcome() == alpv1.Outcome_OUTCOME_REFUSE || d.GetRecipientPersonId() != "" {
		return false
	}
	a, err := alp.ParseAddress(d.GetEnvelope().GetTo())
	return err == nil && !s.Tenants.Hosts(a.Domain())
}

// Delivery is the delivery status of one of personID's envelopes sent to
// another broker: federation's latest OutboundStatus, queued while there
// is none (federation has not taken it up yet, or does not run yet).
func (s *Service) Delivery(ctx context.Context, tenant, personID, envelopeID string) (*Delivery, error) {
	envelopeID, subject, err := envelopeSubject(streams.OutboundStatusSubject, tenant, personID, envelopeID)
	if err != nil {
		return nil, err
	}
	queued := &Delivery{State: DeliveryQueued}
	m, err := s.Bus.LastMessageIn(ctx, streams.Inbound, subject)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return queued, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ingress: delivery status of %s: %w", envelopeID, err)
	}
	if m == nil {
		return queued, nil
	}
	st := outboundStatus(subject, m.Data, envelopeID, personID)
	if st == nil {
		return queued, nil
	}
	state, ok := deliveryStates[st.GetState()]
	if !ok {
		// A state this broker does not know yet says no more than queued.
		state = DeliveryQueued
	}
	return &Delivery{State: state, RemoteBroker: st.GetRemoteBroker(), Code: st.GetCode(), Message: st.GetMessage(),
		Withheld: st.GetWithheld(), Held: st.GetHeld(), Attempts: st.GetAttempts()}, nil
}

// outboundStatus decodes federation's OutboundStatus about envelopeID of
// personID; anything else is nil (a wrong, foreign or undecodable message
// on the subject is ignored, not trusted).
func outboundStatus(subject string, data []byte, envelopeID, personID string) *alpv1.OutboundStatus {
	ev, err := bus.Decode(data)
	if err != nil || streams.CheckProducer(subject, ev) != nil {
		return nil
	}
	st := ev.GetOutboundStatus()
	if st.GetEnvelopeId() != envelopeID || st.GetSenderPersonId() != personID {
		return nil
	}
	return st
}
