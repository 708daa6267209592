package consumers

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/ledger/receipts"
	"github.com/alpd-project/alpd/services/ledger/storage/jsstore"
)

// The person's approvals, from the approvals stream's items
// (alp.approvals.<tenant>.<person>.item.<item>) and standing rules
// (….rule.<rule>): approval.requested when something waits for the
// person, approval.decision when it stops waiting, rule.created and
// rule.revoked for their standing rules — in the person's own log, never
// a held value (the digest the decision is bound to stands for them).
//
// Each entry is recorded once, however often its event is delivered:
// approvals writes each item's request and decision, and each rule's
// creation and revocation, once on its subject, so the source id derives
// from the kind and the item or rule; a redelivered event (the bus's
// Repeat) is first looked for in the log from the event's time on.

// approvalStateNames are the ledger's names of approvals' states; a
// pending or unknown state maps to "", which the entry refuses.
var approvalStateNames = map[alpv1.ApprovalState]string{
	alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ONCE:   ledgerlog.StateApprovedOnce,
	alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ALWAYS: ledgerlog.StateApprovedAlways,
	alpv1.ApprovalState_APPROVAL_STATE_DENIED:          ledgerlog.StateDenied,
	alpv1.ApprovalState_APPROVAL_STATE_EXPIRED:         ledgerlog.StateExpired,
	alpv1.ApprovalState_APPROVAL_STATE_SUPERSEDED:      ledgerlog.StateSuperseded,
	alpv1.ApprovalState_APPROVAL_STATE_CANCELLED:       ledgerlog.StateCancelled,
}

// approvalEvent appends the entry of one approvals event.
func (w *Writer) approvalEvent(ctx context.Context, d bus.Delivery) error {
	ev := d.Event
	tenant := ev.GetHeader().GetTenant()
	var person, what, id string
	entry := ledgerlog.Entry{V: ledgerlog.EntryVersion, SourceEvent: ev.GetHeader().GetEventId(),
		Time: ledgerlog.FormatTime(eventTime(ev))}
	switch body := ev.GetBody().(type) {
	case *alpv1.Event_ApprovalRequested:
		r := body.ApprovalRequested
		person, what, id = r.GetPersonId(), streams.ApprovalItem, r.GetItemId()
		entry.Kind, entry.EnvelopeID, entry.Counterparty = ledgerlog.KindApprovalRequested, r.GetEnvelopeId(), Counterparty(r.GetFrom())
		entry.Item, entry.HeldKind, entry.PayloadDigest = id, heldKindNames[r.GetKind()], r.GetPayloadDigest()
		entry.BindingCode, entry.Expires = r.GetBindingCode(), timeOf(r.GetExpires())
	case *alpv1.Event_ApprovalDecided:
		r := body.ApprovalDecided
		person, what, id = r.GetPersonId(), streams.ApprovalItem, r.GetItemId()
		entry.Kind, entry.EnvelopeID, entry.Counterparty = ledgerlog.KindApprovalDecision, r.GetEnvelopeId(), Counterparty(r.GetFrom())
		entry.Item, entry.HeldKind, entry.State = id, heldKindNames[r.GetKind()], approvalStateNames[r.GetState()]
		entry.PayloadDigest, entry.Rule = r.GetPayloadDigest(), r.GetStandingRuleId()
		if entry.State == "" {
			return bus.Permanent(fmt.Errorf("ledger: decision on item %s in state %s", id, r.GetState()))
		}
	case *alpv1.Event_StandingRuleCreated:
		r := body.StandingRuleCreated
		person, what, id = r.GetPersonId(), streams.ApprovalRule, r.GetRuleId()
		entry.Kind, entry.Counterparty, entry.Rule = ledgerlog.KindRuleCreated, Counterparty(r.GetCounterparty()), id
		entry.Type, entry.Action, entry.Expires = r.GetType(), r.GetAction(), timeOf(r.GetExpires())
	case *alpv1.Event_StandingRuleRevoked:
		r := body.StandingRuleRevoked
		person, what, id = r.GetPersonId(), streams.ApprovalRule, r.GetRuleId()
		entry.Kind, entry.Rule = ledgerlog.KindRuleRevoked, id
	default:
		return bus.Permanent(fmt.Errorf("ledger: cannot handle %s", bus.Kind(ev)))
	}
	switch {
	case !w.Tenants.Hosts(tenant):
		return bus.Permanent(fmt.Errorf("ledger: %s for unhosted tenant %q", entry.Kind, tenant))
	case alp.ValidatePersonID(person) != nil:
		return bus.Permanent(fmt.Errorf("ledger: %s with person id %q", entry.Kind, person))
	case id == "":
		return bus.Permanent(fmt.Errorf("ledger: %s without item or rule id", entry.Kind))
	}
	// alp.approvals.<tenant>.<person>.item|rule.<id>.<p>: the entry lands
	// in the log of the person, and is about the item or rule, its subject
	// is for.
	parts := strings.Split(d.Subject, ".")
	if len(parts) < 6 || parts[2] != bus.TenantToken(tenant) || parts[3] != person || parts[4] != what || parts[5] != id {
		return bus.Permanent(fmt.Errorf("ledger: %s on %s names another person, item or rule", entry.Kind, d.Subject))
	}
	entry.Log = ledgerlog.Origin(tenant, person)
	correlation := entry.EnvelopeID
	if correlation == "" {
		correlation = id
	}
	_, err := w.Store.Append(ctx, jsstore.Request{
		Tenant: tenant, Person: person, Correlation: correlation, Since: repeatSince(d),
		SourceID: receipts.CommandID(entry.Kind, tenant, person, id),
		Build: func(index uint64) ([]byte, []byte, error) {
			e := entry
			e.Index = index
			leaf, err := e.Canonical()
			if err != nil {
				return nil, nil, bus.Permanent(err)
			}
			return leaf, nil, nil
		},
	})
	if err != nil {
		return fmt.Errorf("ledger: %s of %s: %w", entry.Kind, id, err)
	}
	return nil
}

// timeOf is t in the ledger's form, "" when unset.
func timeOf(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return ledgerlog.FormatTime(t.AsTime())
}
