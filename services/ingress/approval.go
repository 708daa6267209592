package ingress

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/ingress/inbox"
)

// Overall states of an envelope whose recipient (hosted here) was asked
// to decide part of it, the same in every binding.
const (
	// ApprovalHeld: at least one held item waits for the person.
	ApprovalHeld = "held"
	// ApprovalDelivered: the person approved every held item; what they
	// held reached their agents.
	ApprovalDelivered = "delivered"
	// ApprovalPartial: the message reached the recipient's agents, but
	// the person released not all of what was held (confidential fields
	// denied, expired, …).
	ApprovalPartial = "partial"
	// ApprovalRefused: the whole message waited for the person (a
	// commitment, a connection request), who did not approve it: it
	// reached none of their agents.
	ApprovalRefused = "refused"
)

// Approval is where an envelope held for its recipient's decision stands,
// for a recipient hosted on this broker (Status only). Its JSON form is
// the one every door answers.
type Approval struct {
	// State: held, delivered, partial or refused.
	State string `json:"state" jsonschema:"held (waiting for the recipient), delivered (approved), partial (part of what was held was not approved) or refused (not approved: nothing reached the recipient's agents)"`
	// Items are what the recipient was asked to decide.
	Items []ApprovalItem `json:"items" jsonschema:"each item the recipient was asked to decide"`
}

// ApprovalItem is one held item and the recipient's decision on it.
type ApprovalItem struct {
	ID string `json:"id"`
	// Kind: confidential_fields, commitment or connection_request.
	Kind string `json:"kind" jsonschema:"confidential_fields, commitment or connection_request"`
	// State: pending, approved_once, approved_always, denied, expired,
	// superseded or cancelled.
	State    string   `json:"state" jsonschema:"pending, approved_once, approved_always, denied, expired, superseded or cancelled"`
	Pointers []string `json:"pointers,omitempty" jsonschema:"the fields held"`
	Commits  string   `json:"commits,omitempty" jsonschema:"for a commitment: what it commits"`
	// BindingCode is the code the recipient's approvals page shows for
	// the item while it is pending: the sending agent shows it too, so the
	// recipient approves the request they were told about.
	BindingCode string `json:"binding_code,omitempty" jsonschema:"while pending: the code the recipient's approvals page shows for this item"`
}

// approval is the recipient's decisions on what policy held of envelope
// id for them: nil when nothing was held (or the item is gone from the
// inbox, aged out or erased). The inbox item (ingress's own stream) names
// the held items; each one's last event on the approvals stream is its
// request (pending) or its decision. Approvals that has not taken an item
// up yet leaves it pending.
func (s *Service) approval(ctx context.Context, d *alpv1.Decided, id string) (*Approval, error) {
	tenant, person := d.GetRecipientTenant(), d.GetRecipientPersonId()
	subject, err := streams.InboxItemSubject(tenant, person, id)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	m, err := s.Bus.LastMessageIn(ctx, streams.Inbox, subject)
	if err != nil {
		return nil, fmt.Errorf("ingress: the recipient's item of %s: %w", id, err)
	}
	if m == nil {
		return nil, nil
	}
	ev, err := bus.Decode(m.Data)
	if err != nil || streams.CheckProducer(subject, ev) != nil {
		return nil, nil // not an item this broker filed: nothing to say
	}
	dv := ev.GetDeliverable()
	if dv.GetEnvelope().GetId() != id || len(dv.GetHeld()) == 0 {
		return nil, nil
	}
	out := &Approval{State: ApprovalDelivered}
	pending, approvedAll := false, true
	for _, h := range dv.GetHeld() {
		st, code, err := s.approvalState(ctx, tenant, person, id, h)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, ApprovalItem{ID: h.GetId(), Kind: inbox.HeldKindName(h.GetKind()), State: inbox.ApprovalStateName(st),
			Pointers: h.GetPointers(), Commits: h.GetCommits(), BindingCode: code})
		switch {
		case st == alpv1.ApprovalState_APPROVAL_STATE_PENDING:
			pending = true
		case !inbox.Approved(st):
			approvedAll = false
		}
	}
	switch {
	case pending:
		out.State = ApprovalHeld
	case approvedAll:
		out.State = ApprovalDelivered
	case dv.GetOutcome() == alpv1.Outcome_OUTCOME_HOLD:
		out.State = ApprovalRefused
	default:
		out.State = ApprovalPartial
	}
	return out, nil
}

// approvalState is the state of one held item: its decision, pending
// while there is none (only the request, or nothing yet), with the
// request's binding code while pending. A message on the subject that is
// not approvals' about this item says no more than pending.
func (s *Service) approvalState(ctx context.Context, tenant, person, envelopeID string, h *alpv1.HeldItem) (alpv1.ApprovalState, string, error) {
	pending := alpv1.ApprovalState_APPROVAL_STATE_PENDING
	subject, err := streams.ApprovalItemSubject(tenant, person, h.GetId())
	if err != nil {
		return pending, "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	m, err := s.Bus.LastMessageIn(ctx, streams.Approvals, subject)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return pending, "", nil // approvals has not created its stream yet
	}
	if err != nil {
		return pending, "", fmt.Errorf("ingress: the decision on %s: %w", h.GetId(), err)
	}
	if m == nil {
		return pending, "", nil
	}
	ev, err := bus.Decode(m.Data)
	if err != nil || streams.CheckProducer(subject, ev) != nil {
		return pending, "", nil
	}
	if r := ev.GetApprovalRequested(); r != nil && r.GetItemId() == h.GetId() && r.GetEnvelopeId() == envelopeID {
		return pending, r.GetBindingCode(), nil
	}
	d := ev.GetApprovalDecided()
	if d == nil || d.GetItemId() != h.GetId() || d.GetEnvelopeId() != envelopeID ||
		d.GetState() == alpv1.ApprovalState_APPROVAL_STATE_UNSPECIFIED {
		return pending, "", nil
	}
	return d.GetState(), "", nil
}
