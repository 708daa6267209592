package consumers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/ledger/storage/jsstore"
)

// trustClassNames are the ledger's names of identity's trust classes.
var trustClassNames = map[alpv1.TrustClass]string{
	alpv1.TrustClass_TRUST_CLASS_COMPANY:  ledgerlog.TrustClassCompany,
	alpv1.TrustClass_TRUST_CLASS_CONSUMER: ledgerlog.TrustClassConsumer,
}

// inboxAcked appends the recipient's inbox.delivered entry: one of their
// agents acknowledged an item, so the envelope was delivered to it in its
// trust class's view — the agent's opaque id, the class, the pointers its
// view left out and the held items it was told about, never a value.
// Ingress writes one InboxAcked per agent and item (its subject once), and
// a redelivered one is looked for in the log first, so each delivery is
// one entry. It is not ordered after the envelope's deliverable: it
// carries its own time, and the deliverable may lag behind in a backlog.
func (w *Writer) inboxAcked(ctx context.Context, d bus.Delivery, ack *alpv1.InboxAcked) error {
	ev := d.Event
	tenant, person, envelopeID, agent := ev.GetHeader().GetTenant(), ack.GetRecipientPersonId(), ack.GetEnvelopeId(), ack.GetAgentId()
	class, known := trustClassNames[ack.GetAgentClass()]
	switch {
	case !w.Tenants.Hosts(tenant):
		return bus.Permanent(fmt.Errorf("ledger: inbox acknowledgement for unhosted tenant %q", tenant))
	case envelopeID == "" || agent == "":
		return bus.Permanent(errors.New("ledger: inbox acknowledgement without envelope or agent"))
	case !known:
		return bus.Permanent(fmt.Errorf("ledger: inbox acknowledgement by an agent of class %s", ack.GetAgentClass()))
	case alp.ValidatePersonID(person) != nil:
		return bus.Permanent(fmt.Errorf("ledger: inbox acknowledgement with person id %q", person))
	}
	// alp.inbox.<tenant>.<person>.ack.<agent token>.<envelope>.<p>: the
	// entry lands in the log of the person, for the agent and envelope,
	// its subject is for.
	parts := strings.Split(d.Subject, ".")
	if len(parts) < 7 || parts[2] != bus.TenantToken(tenant) || parts[3] != person || parts[4] != streams.InboxAck ||
		parts[5] != streams.AgentToken(agent) || parts[6] != envelopeID {
		return bus.Permanent(fmt.Errorf("ledger: inbox acknowledgement on %s names another person, agent or envelope", d.Subject))
	}
	occurred := eventTime(ev)
	entry := ledgerlog.Entry{V: ledgerlog.EntryVersion, Log: ledgerlog.Origin(tenant, person), Kind: ledgerlog.KindInboxDelivered,
		SourceEvent: ev.GetHeader().GetEventId(), EnvelopeID: envelopeID, Agent: agent, TrustClass: class,
		Withheld: ack.GetWithheld(), HeldIDs: ack.GetHeld(), Time: ledgerlog.FormatTime(occurred)}
	r := jsstore.Request{
		Tenant: tenant, Person: person, SourceID: ev.GetHeader().GetEventId(), Correlation: envelopeID,
		Build: func(index uint64) ([]byte, []byte, error) {
			e := entry
			e.Index = index
			leaf, err := e.Canonical()
			if err != nil {
				return nil, nil, bus.Permanent(err)
			}
			return leaf, nil, nil
		},
	}
	if d.Repeat {
		r.Since = occurred
	}
	_, err := w.Store.Append(ctx, r)
	return err
}
