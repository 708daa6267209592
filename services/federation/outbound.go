package federation

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/streams"
)

// onDecided takes a decision whose recipient is at another broker into
// the outbox: what the sender side let through (the envelope as policy
// sealed it again, withheld fields removed), once per envelope. Decisions
// for recipients hosted here, refusals and holds stay on this broker.
func (s *Service) onDecided(ctx context.Context, d bus.Delivery) error {
	dec := d.Event.GetDecided()
	if dec == nil {
		return bus.Permanent(fmt.Errorf("federation: %s on the decisions' stream", bus.Kind(d.Event)))
	}
	env := dec.GetEnvelope()
	switch dec.GetOutcome() {
	case alpv1.Outcome_OUTCOME_DELIVER, alpv1.Outcome_OUTCOME_DELIVER_PARTIAL:
	default:
		return nil
	}
	if dec.GetRecipientPersonId() != "" || env.GetSealedBody() == nil {
		return nil
	}
	to, err := alp.ParseAddress(env.GetTo())
	if err != nil || s.Tenants.Hosts(to.Domain()) {
		// A hosted recipient nobody has is policy's refusal, not ours.
		return nil
	}
	tenant := d.Event.GetHeader().GetTenant()
	if !s.Tenants.Hosts(tenant) || dec.GetSenderPersonId() == "" {
		return bus.Permanent(errors.New("federation: a decision without a hosted tenant or a sender"))
	}
	subject, err := streams.OutboxSubject(tenant, to.Domain(), streams.OutboxEnvelope, env.GetId())
	if err != nil {
		return bus.Permanent(err)
	}
	if s.opts.Disabled {
		s.m.failed.WithLabelValues(CodeDisabled).Inc()
		return s.appendStatus(ctx, d.Event, tenant, &alpv1.OutboundStatus{EnvelopeId: env.GetId(), SenderPersonId: dec.GetSenderPersonId(),
			State: alpv1.DeliveryState_DELIVERY_STATE_FAILED, Code: CodeDisabled, To: env.GetTo(),
			Message: "this broker does not federate: " + to.Domain() + " is at another broker"})
	}
	queued := d.Event.GetHeader().GetOccurred()
	if queued == nil {
		queued = timestamppb.Now()
	}
	ev := s.NewEvent("outbox_item", tenant, d.Event, env.GetId(), nil)
	ev.Body = &alpv1.Event_OutboxItem{OutboxItem: &alpv1.OutboxItem{
		Kind: alpv1.OutboxKind_OUTBOX_KIND_ENVELOPE, Envelope: env, SenderPersonId: dec.GetSenderPersonId(),
		RemoteDomain: to.Domain(), Queued: queued, Withheld: withheldPointers(dec.GetFields()),
	}}
	// The status first: an item sent at once may report SENT before a
	// QUEUED appended after it would hide it.
	if err := s.appendStatus(ctx, d.Event, tenant, &alpv1.OutboundStatus{EnvelopeId: env.GetId(), SenderPersonId: dec.GetSenderPersonId(),
		State: alpv1.DeliveryState_DELIVERY_STATE_QUEUED, To: env.GetTo()}); err != nil {
		return err
	}
	if _, err := s.Bus.Publish(ctx, subject, ev); err != nil {
		return err
	}
	s.m.queued.Inc()
	return nil
}

// statusRank orders delivery states: a status is recorded only if it
// does not go back (a SENT stored after the receiver's receipt arrived,
// or a QUEUED of a redelivered decision, changes nothing). The receipt's
// states rank alike: the receiver may tell a later decision (a held item
// released).
func statusRank(st alpv1.DeliveryState) int {
	switch st {
	case alpv1.DeliveryState_DELIVERY_STATE_QUEUED:
		return 1
	case alpv1.DeliveryState_DELIVERY_STATE_SENT, alpv1.DeliveryState_DELIVERY_STATE_FAILED:
		return 2
	}
	return 3
}

// appendStatus records an envelope's delivery status unless the status
// recorded already ranks higher (statusRank) or is the same (a retry).
// The append expects the last status it read, so two writers (the outbox
// and a receipt arriving at once) cannot both pass the check. The event's
// id derives from its cause (nil for a remote broker's request), the
// envelope and the state.
func (s *Service) appendStatus(ctx context.Context, cause *alpv1.Event, tenant string, st *alpv1.OutboundStatus) error {
	subject, err := streams.OutboundStatusSubject(tenant, st.GetSenderPersonId(), st.GetEnvelopeId())
	if err != nil {
		return bus.Permanent(err)
	}
	ev := s.NewEvent("outbound_status", tenant, cause, st.GetEnvelopeId(), nil)
	ev.Header.EventId = bus.HashID("outbound_status", cause.GetHeader().GetEventId(), st.GetEnvelopeId(), st.GetState().String())
	ev.Body = &alpv1.Event_OutboundStatus{OutboundStatus: st}
	for attempt := 0; ; attempt++ {
		last, seq, err := s.lastStatus(ctx, subject)
		if err != nil {
			return err
		}
		if last != nil && (statusRank(last.GetState()) > statusRank(st.GetState()) ||
			last.GetState() == st.GetState() && statusRank(st.GetState()) < 3) {
			return nil
		}
		_, err = s.Bus.Append(ctx, subject, seq, ev)
		if !errors.Is(err, bus.ErrConflict) || attempt == 2 {
			return err
		}
	}
}

// lastStatus is the envelope's current delivery status and its sequence
// (nil, 0 when there is none).
func (s *Service) lastStatus(ctx context.Context, subject string) (*alpv1.OutboundStatus, uint64, error) {
	m, err := s.Bus.LastMessageIn(ctx, streams.Inbound, subject)
	if err != nil || m == nil {
		return nil, 0, err
	}
	ev, err := bus.Decode(m.Data)
	if err != nil {
		return nil, 0, bus.Permanent(fmt.Errorf("federation: the status on %s: %w", subject, err))
	}
	return ev.GetOutboundStatus(), m.Sequence, nil
}

// withheldPointers are the fields a decision kept back.
func withheldPointers(fields []*alpv1.FieldVerdict) []string {
	var out []string
	for _, f := range fields {
		if f.GetAction() == alpv1.FieldAction_FIELD_ACTION_DENY {
			out = append(out, f.GetPointer())
		}
	}
	return out
}
