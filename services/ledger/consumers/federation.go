package consumers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/ledger/receipts"
	"github.com/alpd-project/alpd/services/ledger/storage/jsstore"
)

// Exchanges with other brokers. On the recipient's side, policy's
// Deliverable of an envelope another broker signed (origin_broker set)
// makes the recipient's envelope.received entry, carrying the commitment
// the sender's broker put in the signed envelope (the sender's own, as on
// one broker); federation then asks for the receipt (Service.IssueReceipt).
// On the sender's side, federation's OutboundStatus events say what became
// of an envelope sent out: the remote side's receipt is recorded as
// receipt.received, the remote broker's acceptance as federation.accepted,
// a failure as federation.failed.
//
// Each entry is recorded once, however often its event is delivered or
// published again: its source id derives from what it is about (the
// envelope and kind; the receipt's log and leaf), so a second publication
// within the dedupe window is a duplicate, and a redelivered event (the
// bus's Repeat) is first looked for in the log from the event's time on.

// receivedRemote appends the recipient's envelope.received entry for an
// envelope from another broker, before policy's deliverable entry.
func (w *Writer) receivedRemote(ctx context.Context, d bus.Delivery, tenant, person string, dl *alpv1.Deliverable) error {
	ev, env := d.Event, dl.GetEnvelope()
	occurred := eventTime(ev)
	entry := ledgerlog.Entry{V: ledgerlog.EntryVersion, Log: ledgerlog.Origin(tenant, person), Kind: ledgerlog.KindReceived,
		SourceEvent: ev.GetHeader().GetEventId(), EnvelopeID: env.GetId(), Commitment: dl.GetSenderCommitment(),
		Counterparty: Counterparty(env.GetFrom()), Time: ledgerlog.FormatTime(occurred),
		OriginSignature: dl.GetOriginSignature(), WireDigest: dl.GetWireSha256()}
	if _, _, err := ledgerlog.ParseOrigin(dl.GetSenderLog()); err == nil {
		entry.Counterparty = dl.GetSenderLog()
	}
	if entry.Commitment != "" && entry.Validate() != nil {
		// The sender's broker signed a commitment that is not one: the
		// envelope is still recorded, without it (and so without a receipt).
		w.unreceipted.WithLabelValues("sender_commitment_invalid").Inc()
		w.Logger.Warn("ledger: an envelope from another broker carries a malformed sender commitment; recorded without it",
			"tenant", tenant, "envelope_id", env.GetId(), "origin_broker", dl.GetOriginBroker())
		entry.Commitment = ""
	}
	if entry.Commitment == "" {
		w.unreceipted.WithLabelValues("sender_gave_none").Inc()
	}
	_, err := w.Store.Append(ctx, jsstore.Request{
		Tenant: tenant, Person: person, Correlation: env.GetId(), Since: repeatSince(d),
		SourceID: receipts.CommandID(ledgerlog.KindReceived, tenant, person, env.GetId()),
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
	return err
}

// outboundStatus records, in the sender's log, what federation learned of
// an envelope sent to another broker: SENT (the remote broker's signed
// Accepted) as federation.accepted, the remote side's receipt (federation
// verified it with the remote's published ledger keys) as
// receipt.received, FAILED as federation.failed. QUEUED records nothing
// (the envelope's own entries say it was asked for and cleared).
func (w *Writer) outboundStatus(ctx context.Context, d bus.Delivery, st *alpv1.OutboundStatus) error {
	ev := d.Event
	tenant, person, id := ev.GetHeader().GetTenant(), st.GetSenderPersonId(), st.GetEnvelopeId()
	switch {
	case !w.Tenants.Hosts(tenant):
		return bus.Permanent(fmt.Errorf("ledger: outbound status for unhosted tenant %q", tenant))
	case id == "":
		return bus.Permanent(errors.New("ledger: outbound status without envelope id"))
	case alp.ValidatePersonID(person) != nil:
		return bus.Permanent(fmt.Errorf("ledger: outbound status with sender person id %q", person))
	}
	// alp.inbound.<tenant>.<person>.status.<envelope>.<p>: the entry lands
	// in the log its subject (and so its partition) is for.
	parts := strings.Split(d.Subject, ".")
	if len(parts) < 6 || parts[2] != bus.TenantToken(tenant) || parts[3] != person || parts[4] != streams.InboundStatus || parts[5] != id {
		return bus.Permanent(fmt.Errorf("ledger: outbound status on %s names another person or envelope (%s, %s)", d.Subject, person, id))
	}
	occurred := eventTime(ev)
	entry := ledgerlog.Entry{V: ledgerlog.EntryVersion, Log: ledgerlog.Origin(tenant, person), EnvelopeID: id,
		Counterparty: Counterparty(st.GetTo()), Time: ledgerlog.FormatTime(occurred)}
	switch st.GetState() {
	case alpv1.DeliveryState_DELIVERY_STATE_SENT:
		if st.GetRemoteBroker() == "" {
			return bus.Permanent(fmt.Errorf("ledger: outbound status SENT of %s names no remote broker", id))
		}
		entry.Kind, entry.Broker = ledgerlog.KindFederationAccepted, st.GetRemoteBroker()
	case alpv1.DeliveryState_DELIVERY_STATE_FAILED:
		entry.Kind, entry.Broker, entry.Code = ledgerlog.KindFederationFailed, st.GetRemoteBroker(), st.GetCode()
		if entry.Code == "" {
			entry.Code = "unknown"
		}
	case alpv1.DeliveryState_DELIVERY_STATE_DELIVERED, alpv1.DeliveryState_DELIVERY_STATE_PARTIAL,
		alpv1.DeliveryState_DELIVERY_STATE_HELD, alpv1.DeliveryState_DELIVERY_STATE_REFUSED:
		if len(st.GetReceipt()) == 0 {
			return nil
		}
		return w.remoteReceipt(ctx, tenant, person, id, st.GetReceipt(), repeatSince(d))
	default:
		return nil
	}
	entry.SourceEvent = receipts.CommandID(entry.Kind, tenant, person, id)
	_, err := w.Receipts.Append(ctx, tenant, person, entry.SourceEvent, id, repeatSince(d), entry)
	if err != nil {
		return fmt.Errorf("ledger: %s of envelope %s: %w", entry.Kind, id, err)
	}
	return nil
}

// remoteReceipt records the remote side's receipt for the envelope: the
// same source id as a same-broker receipt's (its log and leaf), so one
// receipt is one entry however it came.
func (w *Writer) remoteReceipt(ctx context.Context, tenant, person, id string, raw []byte, since time.Time) error {
	r, err := ledgerlog.ParseReceipt(raw)
	if err != nil {
		return bus.Permanent(fmt.Errorf("ledger: the receipt of envelope %s: %w", id, err))
	}
	own := ledgerlog.Origin(tenant, person)
	switch {
	case r.EnvelopeID != id:
		return bus.Permanent(fmt.Errorf("ledger: the receipt of envelope %s is for envelope %s", id, r.EnvelopeID))
	case r.Counterparty != "" && r.Counterparty != own:
		return bus.Permanent(fmt.Errorf("ledger: the receipt of envelope %s was issued to %s, not %s", id, r.Counterparty, own))
	case r.Log == own:
		return bus.Permanent(fmt.Errorf("ledger: the receipt of envelope %s is of the sender's own log", id))
	}
	source := receipts.CommandID(ledgerlog.KindReceiptReceived, tenant, person, r.Log, r.LeafHash)
	if _, err := w.Receipts.Record(ctx, tenant, person, r, source, since); err != nil {
		return fmt.Errorf("ledger: recording the receipt of envelope %s: %w", id, err)
	}
	return nil
}

// repeatSince is where a redelivered event's leaf is looked for (its
// time), zero for a first delivery.
func repeatSince(d bus.Delivery) time.Time {
	if d.Repeat {
		return eventTime(d.Event)
	}
	return time.Time{}
}
