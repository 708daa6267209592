package consumers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger/receipts"
	"github.com/alpd-project/alpd/services/ledger/storage"
	"github.com/alpd-project/alpd/services/ledger/storage/jsstore"
)

// A same-broker delivery: the recipient is another person hosted here.
// Once the sender's decision is recorded, the recipient's log records the
// envelope as received, carrying the sender's own commitment (the
// recipient has no claim to a digest over fields the sender side may have
// withheld, and equal commitments tie the two leaves together); the
// recipient's side issues a receipt for that entry, and the sender's log
// records it. So each log points into the other, and `alpctl ledger
// match` relates the two people's exports (ledgerlog.Match). A person
// writing to themselves (their own agents) gets none of this: one log,
// nothing to relate.
//
// It is the sender's partition that writes all three, after the decision:
// the sender's envelope entry, whose commitment the received entry
// carries, is then in the sender's log (a decision waits for it), so
// nothing waits on another partition's progress. The recipient's log is
// another partition's: the writer appends to it through the same
// expected-sequence append as that partition's writer, which at worst
// costs a counted conflict; its received entry and policy's deliverable
// (written by the recipient's partition) may therefore come in either
// order.
//
// Exactly once, whatever is redelivered: each of the three entries has
// its own source id, derived from the Decided's event (the received
// entry) or from what it is about (the receipt issued for that leaf to the
// sender, the receipt of that leaf recorded in the sender's log), and a
// redelivered Decided looks each up before appending it; a receipt
// issued again finds the one recorded first and hands that one on, so
// both logs hold the same receipt.
type exchange struct {
	// The recipient's log and the sender's.
	tenant, person       string
	senderTenant, sender string
	envelopeID           string
	// commitment is the sender's envelope entry's.
	commitment string
	// received and leaf are the recipient's envelope.received entry, once
	// appended.
	received uint64
	leaf     []byte
}

// exchange records the same-broker delivery of a decision that the sender's
// log has just recorded, if it makes one: not for a remote recipient or
// the sender themself, an envelope refused, or a sender's entry with no
// commitment (the sender erased first) or none at all (a SendRequested
// that never came).
func (w *Writer) exchange(ctx context.Context, d bus.Delivery, tenant, person string, dec *alpv1.Decided) error {
	env := dec.GetEnvelope()
	rTenant, recipient := dec.GetRecipientTenant(), dec.GetRecipientPersonId()
	switch {
	case recipient == "" || dec.GetOutcome() == alpv1.Outcome_OUTCOME_REFUSE:
		return nil
	case !w.Tenants.Hosts(rTenant) || alp.ValidatePersonID(recipient) != nil:
		w.Logger.Warn("ledger: a decision names a recipient this broker does not host; recorded without a receipt",
			"tenant", tenant, "envelope_id", env.GetId(), "recipient_tenant", rTenant)
		return nil
	case rTenant == tenant && recipient == person:
		return nil
	}
	commitment, ok := w.sent.take(tenant, person, env.GetId())
	if !ok {
		var err error
		if commitment, err = w.sentCommitment(ctx, d, tenant, person, env); err != nil {
			return err
		}
	}
	if commitment == "" {
		return nil
	}
	x := &exchange{tenant: rTenant, person: recipient, senderTenant: tenant, sender: person,
		envelopeID: env.GetId(), commitment: commitment}
	if err := w.appendReceived(ctx, d, x); err != nil {
		return err
	}
	return w.receipt(ctx, d, x)
}

// sentCommitment reads the commitment of the sender's envelope entry back
// from the sender's log (it was appended by another process, or long
// ago): "" when there is none to carry, counted.
func (w *Writer) sentCommitment(ctx context.Context, d bus.Delivery, tenant, person string, env *alpv1.Envelope) (string, error) {
	since := eventTime(d.Event)
	if c := env.GetCreated(); c != nil {
		since = c.AsTime()
	}
	_, leaf, err := w.Store.FindEnvelope(ctx, tenant, person, env.GetId(), since.Add(-orderSkew), func(e ledgerlog.Entry) bool {
		return e.Kind == ledgerlog.KindSendRequested
	})
	var sent ledgerlog.Entry
	if err == nil {
		sent, err = ledgerlog.ParseEntry(leaf)
	}
	switch {
	case errors.Is(err, storage.ErrInvalid), errors.Is(err, storage.ErrNoLog):
		w.unreceipted.WithLabelValues("sender_unrecorded").Inc()
		w.Logger.Warn("ledger: the sender's log has no entry for a delivered envelope; no receipt",
			"tenant", tenant, "envelope_id", env.GetId())
		return "", nil
	case err != nil:
		return "", fmt.Errorf("ledger: the sender's entry of envelope %s: %w", env.GetId(), err)
	case sent.Commitment == "":
		w.unreceipted.WithLabelValues("sender_uncommitted").Inc()
	}
	return sent.Commitment, nil
}

// recentCommitmentsSize bounds the commitments a writer remembers: far
// more than the envelopes in flight between a SendRequested and its
// decision.
const recentCommitmentsSize = 4096

// recentCommitments is a bounded map of the latest envelope entries'
// commitments, oldest forgotten first. The zero value is ready.
type recentCommitments struct {
	mu    sync.Mutex
	byKey map[string]string
	order []string // ring of keys, next at pos
	pos   int
}

func commitmentKey(tenant, person, envelopeID string) string {
	return tenant + "\x00" + person + "\x00" + envelopeID
}

func (c *recentCommitments) put(tenant, person, envelopeID, commitment string) {
	k := commitmentKey(tenant, person, envelopeID)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey == nil {
		c.byKey, c.order = map[string]string{}, make([]string, recentCommitmentsSize)
	}
	if _, ok := c.byKey[k]; ok {
		c.byKey[k] = commitment
		return
	}
	if old := c.order[c.pos]; old != "" {
		delete(c.byKey, old)
	}
	c.order[c.pos], c.byKey[k] = k, commitment
	c.pos = (c.pos + 1) % len(c.order)
}

// take returns and forgets the commitment remembered for the envelope.
func (c *recentCommitments) take(tenant, person, envelopeID string) (string, bool) {
	k := commitmentKey(tenant, person, envelopeID)
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.byKey[k]
	delete(c.byKey, k)
	return v, ok
}

// appendReceived appends the recipient's envelope.received entry.
func (w *Writer) appendReceived(ctx context.Context, d bus.Delivery, x *exchange) error {
	ev := d.Event
	occurred := eventTime(ev)
	entry := ledgerlog.Entry{V: ledgerlog.EntryVersion, Log: ledgerlog.Origin(x.tenant, x.person), Kind: ledgerlog.KindReceived,
		SourceEvent: ev.GetHeader().GetEventId(), EnvelopeID: x.envelopeID, Commitment: x.commitment,
		Counterparty: ledgerlog.Origin(x.senderTenant, x.sender), Time: ledgerlog.FormatTime(occurred)}
	// Written by whichever caller leads the group's append, read after
	// Append returned (which its result's channel orders).
	var built []byte
	r := jsstore.Request{
		Tenant: x.tenant, Person: x.person, Correlation: x.envelopeID,
		SourceID: receipts.CommandID(ledgerlog.KindReceived, ev.GetHeader().GetEventId()),
		Build: func(index uint64) ([]byte, []byte, error) {
			e := entry
			e.Index = index
			leaf, err := e.Canonical()
			if err != nil {
				return nil, nil, bus.Permanent(err)
			}
			built = leaf
			return leaf, nil, nil
		},
	}
	if d.Repeat {
		r.Since = occurred
	}
	res, err := w.Store.Append(ctx, r)
	if err != nil {
		return err
	}
	x.received, x.leaf = res.Index, built
	if res.Duplicate {
		if x.leaf, err = w.Store.Leaf(ctx, x.tenant, x.person, res.Index); err != nil {
			return fmt.Errorf("ledger: reading the received entry of envelope %s: %w", x.envelopeID, err)
		}
	}
	return nil
}

// receipt issues the recipient's receipt for the received entry to the
// sender and records it in the sender's log.
func (w *Writer) receipt(ctx context.Context, d bus.Delivery, x *exchange) error {
	var since time.Time
	if d.Repeat {
		since = eventTime(d.Event)
	}
	r, _, err := w.Receipts.Issue(ctx, x.tenant, x.person, x.received, x.leaf, ledgerlog.Origin(x.senderTenant, x.sender), since)
	if err != nil {
		return fmt.Errorf("ledger: receipt for envelope %s: %w", x.envelopeID, err)
	}
	source := receipts.CommandID(ledgerlog.KindReceiptReceived, x.senderTenant, x.sender, r.Log, r.LeafHash)
	if _, err := w.Receipts.Record(ctx, x.senderTenant, x.sender, r, source, since); err != nil {
		return fmt.Errorf("ledger: recording the receipt for envelope %s in the sender's log: %w", x.envelopeID, err)
	}
	return nil
}
