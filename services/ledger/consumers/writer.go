package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/prometheus/client_golang/prometheus"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/seal"
	"github.com/alpd-project/alpd/services/ledger/receipts"
	"github.com/alpd-project/alpd/services/ledger/secrets"
	"github.com/alpd-project/alpd/services/ledger/storage/jsstore"
)

// Writer turns work-queue events into ledger entries.
type Writer struct {
	Store   *jsstore.Store
	Secrets *secrets.Store
	// Receipts signs the receipt of a same-broker delivery.
	Receipts *receipts.Issuer
	// Sealer opens the envelope bodies (the data-key bucket).
	Sealer  *seal.Sealer
	Tenants alp.Tenants
	Logger  *slog.Logger

	uncommitted *prometheus.CounterVec
	erasures    prometheus.Counter
	unreceipted *prometheus.CounterVec

	// watchers wait, by source event id, for this process to append that
	// event's leaf: a decision handled beside its envelope's SendRequested
	// (another worker of the partition) waits for it in memory.
	mu       sync.Mutex
	watchers map[string][]chan struct{}
	// sent remembers the commitments of the envelope entries this process
	// appended lately, for the same-broker delivery that follows them
	// (exchange.go), so it need not read them back from the log.
	sent recentCommitments
}

// Register adds the writer's metrics to reg.
func (w *Writer) Register(reg prometheus.Registerer) error {
	w.uncommitted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "alpd_ledger_entries_without_commitment_total",
		Help: "Entries appended without a commitment, by reason (body_erased: the body's data key was destroyed first; ledger_secret_erased; unreadable: the body did not open or has no digest).",
	}, []string{"reason"})
	w.erasures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "alpd_ledger_secrets_erased_total", Help: "Persons' ledger secrets erased after their data key was destroyed.",
	})
	w.unreceipted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "alpd_ledger_deliveries_without_receipt_total",
		Help: "Deliveries recorded without a commitment to give a receipt for, by reason (same broker — sender_uncommitted: the sender's envelope entry has no commitment, e.g. erased first; sender_unrecorded: the sender's log has no entry for the envelope; from another broker — sender_gave_none: the envelope carries no sender commitment; sender_commitment_invalid: a malformed one).",
	}, []string{"reason"})
	for _, c := range []prometheus.Collector{w.uncommitted, w.erasures, w.unreceipted} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("ledger: register metrics: %w", err)
		}
	}
	return nil
}

// Handle is the bus handler of every ledger partition consumer.
func (w *Writer) Handle(ctx context.Context, d bus.Delivery) error {
	switch body := d.Event.GetBody().(type) {
	case *alpv1.Event_SendRequested:
		return w.sendRequested(ctx, d, body.SendRequested)
	case *alpv1.Event_Decided:
		return w.decided(ctx, d, body.Decided)
	case *alpv1.Event_Deliverable:
		return w.deliverable(ctx, d, body.Deliverable)
	case *alpv1.Event_DataKeyDestroyed:
		return w.erase(ctx, d.Event, body.DataKeyDestroyed)
	case *alpv1.Event_InboxAcked:
		return w.inboxAcked(ctx, d, body.InboxAcked)
	case *alpv1.Event_OutboundStatus:
		return w.outboundStatus(ctx, d, body.OutboundStatus)
	case *alpv1.Event_ApprovalRequested, *alpv1.Event_ApprovalDecided, *alpv1.Event_StandingRuleCreated, *alpv1.Event_StandingRuleRevoked:
		return w.approvalEvent(ctx, d)
	default:
		return bus.Permanent(fmt.Errorf("ledger: cannot handle %s", bus.Kind(d.Event)))
	}
}

// sendRequested appends the sender's envelope.send_requested entry.
func (w *Writer) sendRequested(ctx context.Context, d bus.Delivery, req *alpv1.SendRequested) error {
	ev := d.Event
	tenant, person, env := ev.GetHeader().GetTenant(), req.GetSenderPersonId(), req.GetEnvelope()
	switch {
	case !w.Tenants.Hosts(tenant):
		return bus.Permanent(fmt.Errorf("ledger: send request for unhosted tenant %q", tenant))
	case env.GetId() == "":
		return bus.Permanent(errors.New("ledger: send request without envelope id"))
	case alp.ValidatePersonID(person) != nil:
		return bus.Permanent(fmt.Errorf("ledger: send request with sender person id %q", person))
	}
	occurred := time.Now()
	if o := ev.GetHeader().GetOccurred(); o != nil {
		occurred = o.AsTime()
	}
	digest, reason, err := w.digest(ctx, env, occurred)
	if err != nil {
		return err
	}
	var sec *secrets.Secret
	if digest != nil {
		sec, err = w.Secrets.Get(ctx, tenant, person, true)
		switch {
		case errors.Is(err, secrets.ErrErased):
			digest, reason = nil, "ledger_secret_erased"
		case err != nil:
			return err
		}
	}
	if digest == nil {
		w.uncommitted.WithLabelValues(reason).Inc()
		w.Logger.Info("ledger entry without commitment", "tenant", tenant, "envelope_id", env.GetId(), "reason", reason)
	}
	var commitment string
	entry := ledgerlog.Entry{
		V: ledgerlog.EntryVersion, Log: ledgerlog.Origin(tenant, person), Kind: ledgerlog.KindSendRequested,
		SourceEvent: ev.GetHeader().GetEventId(), EnvelopeID: env.GetId(), Counterparty: Counterparty(env.GetTo()),
		Time: ledgerlog.FormatTime(occurred),
	}
	r := jsstore.Request{
		Tenant: tenant, Person: person, SourceID: ev.GetHeader().GetEventId(), Correlation: env.GetId(),
		Build: func(index uint64) ([]byte, []byte, error) {
			e := entry
			e.Index = index
			var opening []byte
			if digest != nil {
				e.Commitment = ledgerlog.Commit(sec.Salt(env.GetId(), index), *digest)
				opening = sec.SealOpening(env.GetId(), index, digest[:])
			}
			commitment = e.Commitment
			leaf, err := e.Canonical()
			if err != nil {
				return nil, nil, bus.Permanent(err)
			}
			return leaf, opening, nil
		},
	}
	// A possible repeat beyond the dedupe window: look for the source's
	// leaf in the log before appending one.
	if d.Repeat {
		r.Since = occurred
	}
	res, err := w.Store.Append(ctx, r)
	if err != nil {
		return err
	}
	if !res.Duplicate && commitment != "" {
		// Built for the index it was stored at (Append returned after the
		// last Build, which its result's channel orders).
		w.sent.put(tenant, person, env.GetId(), commitment)
	}
	w.appended(ev.GetHeader().GetEventId())
	return nil
}

// watch registers a wait for source's leaf; unwatch drops it.
func (w *Writer) watch(source string) chan struct{} {
	ch := make(chan struct{})
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watchers == nil {
		w.watchers = map[string][]chan struct{}{}
	}
	w.watchers[source] = append(w.watchers[source], ch)
	return ch
}

func (w *Writer) unwatch(source string, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	list := slices.DeleteFunc(w.watchers[source], func(c chan struct{}) bool { return c == ch })
	if len(list) == 0 {
		delete(w.watchers, source)
	} else {
		w.watchers[source] = list
	}
}

// appended wakes whoever waits for source's leaf.
func (w *Writer) appended(source string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.watchers[source] {
		close(ch)
	}
	delete(w.watchers, source)
}

// orderWait is how long a decision waits in memory for its envelope's
// entry before it is handed back to the bus for a later retry.
const orderWait = time.Second

// awaitEnvelope returns nil once the envelope's entry (the leaf of the
// SendRequested cause) is in the person's log: at once when it is among
// the log's last leaves, or when this process appends it within
// orderWait; ErrEnvelopeNotRecorded otherwise.
func (w *Writer) awaitEnvelope(ctx context.Context, tenant, person, cause string, since time.Time) error {
	// Watch before looking, so an append in between is not missed.
	ch := w.watch(cause)
	defer w.unwatch(cause, ch)
	if ok, err := w.Store.HasLeafOf(ctx, tenant, person, cause, since); ok || err != nil {
		return err
	}
	t := time.NewTimer(orderWait)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	// Another replica may have appended it meanwhile.
	if ok, err := w.Store.HasLeafOf(ctx, tenant, person, cause, since); ok || err != nil {
		return err
	}
	return ErrEnvelopeNotRecorded
}

// orderDeliveries: a decision whose envelope entry is not in the sender's
// log yet is retried (the bus redelivers it after a delay) until its
// delivery number reaches this, then recorded anyway — the envelope's
// SendRequested may never come (dead-lettered, aged out of the queue),
// and the decision must not be lost for it. Below the bus's MaxDeliver
// (5), so the last attempts still append.
const orderDeliveries = 3

// orderFresh: only a decision made this recently waits for its envelope's
// entry. An older one is a backlog (a ledger catching up, a queue that
// gained the decided stream as a source): its envelope's entry was
// appended long ago (beyond the leaves HasLeafOf reads) or never will be,
// and waiting for it would only slow the catch-up down.
const orderFresh = time.Minute

// orderRace: only a decision made this soon after its envelope was
// created can overtake the envelope's SendRequested on the way into the
// ledger's queue (both are copied there within milliseconds). A decision
// made later — policy catching up on a backlog after an outage — follows
// an envelope whose entry was appended long ago, maybe further back than
// HasLeafOf reads, and waiting for it would stall the person's partition.
const orderRace = 10 * time.Second

// orderSkew is how far the ledger stream's clock may trail the envelope's
// creation time (ingress's clock) when looking for its entry.
const orderSkew = 5 * time.Second

// ErrEnvelopeNotRecorded: a decision arrived before its envelope's entry
// was appended (and it did not come within orderWait); it is retried, so
// the decision follows the envelope in the log.
var ErrEnvelopeNotRecorded = errors.New("ledger: the envelope's entry is not in the log yet")

// decided appends the sender's policy.decided entry: the outcome, every
// field's verdict with each party's reasons as the sender may see them,
// and the rule versions — after the envelope's envelope.send_requested.
// For a recipient who is another person of this broker it then records
// the delivery's receipt in both logs (exchange.go).
func (w *Writer) decided(ctx context.Context, d bus.Delivery, dec *alpv1.Decided) error {
	ev := d.Event
	tenant, person, env := ev.GetHeader().GetTenant(), dec.GetSenderPersonId(), dec.GetEnvelope()
	if err := w.checkDecision(d, tenant, person, env.GetId()); err != nil {
		return err
	}
	occurred := eventTime(ev)
	since := occurred
	if c := env.GetCreated(); c != nil {
		since = c.AsTime()
	}
	if env.GetType() == msgtypes.ConnectionAccept && ev.GetHeader().GetCausationId() == "" {
		// The broker's own notice on the person's behalf (policy decided it
		// without a SendRequested): its decision is also its sending, so
		// the log gets the envelope entry an agent's send would have made
		// (committing to the body), once.
		send := &alpv1.Event{Header: &alpv1.EventHeader{Type: "send_requested", EventId: bus.HashID("notice_send", ev.GetHeader().GetEventId()),
			Tenant: tenant, Occurred: ev.GetHeader().GetOccurred(), ProducerRole: ev.GetHeader().GetProducerRole()}}
		if err := w.sendRequested(ctx, bus.Delivery{Event: send, Subject: d.Subject, Metadata: d.Metadata, Repeat: d.Repeat},
			&alpv1.SendRequested{Envelope: env, SenderPersonId: person}); err != nil {
			return err
		}
	}
	if cause := ev.GetHeader().GetCausationId(); cause != "" && time.Since(occurred) < orderFresh &&
		occurred.Sub(since) < orderRace && (d.Metadata == nil || d.Metadata.NumDelivered < orderDeliveries) {
		if err := w.awaitEnvelope(ctx, tenant, person, cause, since.Add(-orderSkew)); err != nil {
			return fmt.Errorf("decision %s on envelope %s: %w", ev.GetHeader().GetEventId(), env.GetId(), err)
		}
	}
	entry := ledgerlog.Entry{
		Kind: ledgerlog.KindDecided, Counterparty: Counterparty(env.GetTo()),
		Outcome: outcomeNames[dec.GetOutcome()], Reasons: reasonsOf(dec.GetReasons(), true),
		Fields: verdictsOf(dec.GetFields()), RuleVersions: dec.GetRuleVersions(),
	}
	if err := w.appendDecision(ctx, d, tenant, person, env.GetId(), occurred, entry); err != nil {
		return err
	}
	return w.exchange(ctx, d, tenant, person, dec)
}

// deliverable appends the recipient's policy.deliverable entry: the
// recipient side's verdicts, which fields each trust class of the
// recipient's agents is given, and what is held for the person — never
// the sealed views or held bodies.
func (w *Writer) deliverable(ctx context.Context, d bus.Delivery, dl *alpv1.Deliverable) error {
	ev := d.Event
	tenant, person, env := ev.GetHeader().GetTenant(), dl.GetRecipientPersonId(), dl.GetEnvelope()
	if err := w.checkDecision(d, tenant, person, env.GetId()); err != nil {
		return err
	}
	if dl.GetOriginBroker() != "" {
		if err := w.receivedRemote(ctx, d, tenant, person, dl); err != nil {
			return err
		}
	}
	entry := ledgerlog.Entry{
		Kind: ledgerlog.KindDeliverable, Counterparty: Counterparty(env.GetFrom()),
		Outcome: outcomeNames[dl.GetOutcome()], Reasons: reasonsOf(dl.GetReasons(), true),
		Fields: verdictsOf(dl.GetFields()), RuleVersions: dl.GetRuleVersions(),
	}
	for _, h := range dl.GetHeld() {
		entry.Held = append(entry.Held, ledgerlog.HeldItem{ID: h.GetId(), Kind: heldKindNames[h.GetKind()],
			Pointers: h.GetPointers(), Commits: h.GetCommits()})
	}
	for _, v := range dl.GetViews() {
		entry.Views = append(entry.Views, ledgerlog.View{TrustClass: v.GetTrustClass(), Pointers: v.GetPointers()})
	}
	return w.appendDecision(ctx, d, tenant, person, env.GetId(), eventTime(ev), entry)
}

// checkDecision refuses a decision the ledger cannot place: an unhosted
// tenant, no envelope id, a malformed person id, or a subject that names
// another log than the event (alp.<kind>.<tenant>.<person>.<envelope>.<p>)
// — an entry must land in the log of the person its subject is for.
func (w *Writer) checkDecision(d bus.Delivery, tenant, person, envelopeID string) error {
	kind := bus.Kind(d.Event)
	switch {
	case !w.Tenants.Hosts(tenant):
		return bus.Permanent(fmt.Errorf("ledger: %s for unhosted tenant %q", kind, tenant))
	case envelopeID == "":
		return bus.Permanent(fmt.Errorf("ledger: %s without envelope id", kind))
	case alp.ValidatePersonID(person) != nil:
		return bus.Permanent(fmt.Errorf("ledger: %s with person id %q", kind, person))
	}
	parts := strings.Split(d.Subject, ".")
	if len(parts) < 5 || parts[2] != bus.TenantToken(tenant) || parts[3] != person || parts[4] != envelopeID {
		return bus.Permanent(fmt.Errorf("ledger: %s on %s names another person or envelope (%s, %s)", kind, d.Subject, person, envelopeID))
	}
	return nil
}

// appendDecision completes a decision entry and appends it, once per
// source event: its Nats-Msg-Id derives from the event id, and a
// redelivered event is first looked for in the log.
func (w *Writer) appendDecision(ctx context.Context, d bus.Delivery, tenant, person, envelopeID string, occurred time.Time, entry ledgerlog.Entry) error {
	ev := d.Event
	entry.V, entry.Log, entry.EnvelopeID = ledgerlog.EntryVersion, ledgerlog.Origin(tenant, person), envelopeID
	entry.SourceEvent, entry.Time = ev.GetHeader().GetEventId(), ledgerlog.FormatTime(occurred)
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
	// A possible repeat beyond the dedupe window (a redelivery, or policy
	// publishing the event again long after): look for its leaf first.
	if d.Repeat {
		r.Since = occurred
	}
	_, err := w.Store.Append(ctx, r)
	return err
}

func eventTime(ev *alpv1.Event) time.Time {
	if o := ev.GetHeader().GetOccurred(); o != nil {
		return o.AsTime()
	}
	return time.Now()
}

// The ledger's names (internal/ledgerlog) of policy's enums. An
// unspecified value maps to "", which the entry refuses.
var (
	outcomeNames = map[alpv1.Outcome]string{
		alpv1.Outcome_OUTCOME_DELIVER:         ledgerlog.OutcomeDeliver,
		alpv1.Outcome_OUTCOME_DELIVER_PARTIAL: ledgerlog.OutcomeDeliverPartial,
		alpv1.Outcome_OUTCOME_HOLD:            ledgerlog.OutcomeHold,
		alpv1.Outcome_OUTCOME_REFUSE:          ledgerlog.OutcomeRefuse,
	}
	actionNames = map[alpv1.FieldAction]string{
		alpv1.FieldAction_FIELD_ACTION_ALLOW: ledgerlog.ActionAllow,
		alpv1.FieldAction_FIELD_ACTION_DENY:  ledgerlog.ActionDeny,
		alpv1.FieldAction_FIELD_ACTION_HOLD:  ledgerlog.ActionHold,
	}
	heldKindNames = map[alpv1.HeldKind]string{
		alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST:  ledgerlog.HeldConnectionRequest,
		alpv1.HeldKind_HELD_KIND_COMMITMENT:          ledgerlog.HeldCommitment,
		alpv1.HeldKind_HELD_KIND_CONFIDENTIAL_FIELDS: ledgerlog.HeldConfidentialFields,
	}
)

// verdictsOf is the fields' verdicts as the ledger records them: pointer,
// class, action and reasons; the free-text flag and DLP detectors stay in
// the event (the reasons name a DLP refusal by its code).
func verdictsOf(fs []*alpv1.FieldVerdict) []ledgerlog.FieldVerdict {
	out := make([]ledgerlog.FieldVerdict, 0, len(fs))
	for _, f := range fs {
		out = append(out, ledgerlog.FieldVerdict{Pointer: f.GetPointer(), Class: f.GetClass(),
			Action: actionNames[f.GetAction()], Reasons: reasonsOf(f.GetReasons(), false)})
	}
	return out
}

// reasonsOf is the party, policy id and public code of each reason —
// never its message, which is prose for people and may quote a rule.
// withPointer keeps the field a message-level reason names.
func reasonsOf(rs []*alpv1.Reason, withPointer bool) []ledgerlog.Reason {
	var out []ledgerlog.Reason
	for _, r := range rs {
		lr := ledgerlog.Reason{Party: r.GetParty(), Policy: r.GetRule(), Code: r.GetCode()}
		if withPointer {
			lr.Pointer = r.GetField()
		}
		out = append(out, lr)
	}
	return out
}

// digest opens the envelope's body and computes the envelope digest. A
// body that can never be read (data key destroyed or missing, ciphertext
// that does not authenticate) or that has no digest gives no commitment
// and a reason; other failures are returned, to be retried.
func (w *Writer) digest(ctx context.Context, env *alpv1.Envelope, occurred time.Time) (*[32]byte, string, error) {
	body, err := w.Sealer.Open(ctx, env.GetSealedBody(), []byte(env.GetId()))
	switch {
	case errors.Is(err, seal.ErrKeyDestroyed), errors.Is(err, seal.ErrNoDataKey):
		return nil, "body_erased", nil
	case errors.Is(err, seal.ErrOpenFailed), errors.Is(err, seal.ErrMalformed),
		errors.Is(err, alp.ErrInvalidPersonID), errors.Is(err, alp.ErrInvalidTenant):
		w.Logger.Error("ledger: envelope body does not open; recording the envelope without a commitment",
			"envelope_id", env.GetId(), "err", err)
		return nil, "unreadable", nil
	case err != nil:
		return nil, "", fmt.Errorf("ledger: open body of %s: %w", env.GetId(), err)
	}
	defer clear(body)
	canon, err := jcs.Transform(body)
	if err != nil {
		return nil, "unreadable", nil
	}
	f := ledgerlog.EnvelopeFields{ID: env.GetId(), From: env.GetFrom(), To: env.GetTo(), Type: env.GetType(),
		Body: canon, InReplyTo: env.GetInReplyTo(), Created: occurred}
	// The envelope's own creation time, when ingress set it, is what the
	// counterparty sees too; the event's time stands in otherwise.
	if c := env.GetCreated(); c != nil {
		f.Created = c.AsTime()
	}
	if e := env.GetExpires(); e != nil {
		f.Expires = e.AsTime()
	}
	d, err := ledgerlog.EnvelopeDigest(f)
	if err != nil {
		w.Logger.Warn("ledger: no envelope digest; recording the envelope without a commitment", "envelope_id", env.GetId(), "err", err)
		return nil, "unreadable", nil
	}
	return &d, "", nil
}

// Counterparty is what a leaf says about the other side of an envelope:
// the domain of the recipient's address, lowercased. Never the address
// itself: a leaf can never be erased, and an address is personal data; the
// domain names the other organisation (and its broker), which is what a
// match of two ledgers needs to know where to look, and the envelope id
// does the rest. The full address is in the digest the commitment hides.
// The counterparty's log origin enters the ledger with their receipt.
func Counterparty(to string) string {
	_, domain, ok := strings.Cut(to, "@")
	if !ok {
		return ""
	}
	d, err := alp.ParseTenant(strings.TrimSpace(domain))
	if err != nil {
		return ""
	}
	return string(d)
}

// erase destroys the person's ledger secret after identity destroyed their
// data key: their openings become unreadable, their log stays verifiable.
func (w *Writer) erase(ctx context.Context, ev *alpv1.Event, d *alpv1.DataKeyDestroyed) error {
	tenant, person := d.GetTenant(), d.GetPersonId()
	if tenant != ev.GetHeader().GetTenant() || !w.Tenants.Hosts(tenant) {
		return bus.Permanent(fmt.Errorf("ledger: erasure for tenant %q in an event of %q", tenant, ev.GetHeader().GetTenant()))
	}
	if err := w.Secrets.Erase(ctx, tenant, person); err != nil {
		if errors.Is(err, alp.ErrInvalidPersonID) || errors.Is(err, alp.ErrInvalidTenant) {
			return bus.Permanent(err)
		}
		return err
	}
	w.erasures.Inc()
	w.Logger.Info("ledger secret erased", "tenant", tenant)
	return nil
}
