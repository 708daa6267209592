package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	nlipv1 "github.com/alpd-project/alpd/gen/alp/nlip/v1"
	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/seal"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/policy/decision"
	"github.com/alpd-project/alpd/services/policy/relationships"
	"github.com/alpd-project/alpd/services/policy/rules"
)

// Why an InboundVerified is skipped: no Deliverable, because none could
// name a recipient person of this broker (or the event contradicts what
// federation guarantees). Each is logged and counted
// (alpd_policy_inbound_skipped_total{reason}); the sender's broker hears
// nothing, and federation's outbox of receipts gives up on it by age.
const (
	// The address names nobody here (any more): erased since federation
	// verified it, or never a person of the tenant.
	skipUnknownRecipient = "unknown_recipient"
	// The recipient's data key is destroyed: the body can no longer be
	// opened (the person was erased).
	skipRecipientErased = "recipient_erased"
	// The envelope's to, the event's tenant and recipient person disagree.
	skipRecipientMismatch = "recipient_mismatch"
	// The sender is not a remote address: its domain is hosted here, or it
	// is no address at all. Federation verifies only other brokers'
	// senders, so this is not an envelope from another broker.
	skipSenderNotRemote = "sender_not_remote"
)

// inboundMetrics counts the InboundVerified events decided, by outcome,
// and skipped, by reason.
type inboundMetrics struct {
	decided *prometheus.CounterVec
	skipped *prometheus.CounterVec
}

func newInboundMetrics() inboundMetrics {
	return inboundMetrics{
		decided: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "alpd_policy_inbound_decided_total",
			Help: "Envelopes from other brokers whose recipient side policy decided, by outcome (deliver, deliver_partial, hold, refuse).",
		}, []string{"outcome"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "alpd_policy_inbound_skipped_total",
			Help: "Envelopes from other brokers policy could not decide for a person here, by reason (unknown_recipient, recipient_erased, recipient_mismatch, sender_not_remote): no deliverable, no receipt.",
		}, []string{"reason"}),
	}
}

func (m inboundMetrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.decided, m.skipped} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("policy: register metrics: %w", err)
		}
	}
	return nil
}

// remoteAgentClass maps what the sender's broker says of the sending
// agent (InboundVerified.agent_class, under its signature) onto the entity
// model's classes. The sender's home broker is the one authority on its
// own agents' credentials, as ingress is here; anything but "company" is
// taken as the lower class, consumer, so an unknown word never earns a
// permit written for company agents.
func remoteAgentClass(c string) string {
	if c == rules.TrustCompany {
		return rules.TrustCompany
	}
	return rules.TrustConsumer
}

// inboundTrustOK reports whether trust set by federation lets the envelope
// be decided: a verified sender (a connected one) may send any type; an
// untrusted one (a stranger's connection request) only a connection
// request; anything lower nothing.
func inboundTrustOK(t nmpv1.TrustLevel, typeName string) bool {
	switch {
	case t >= nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED:
		return true
	case t == nmpv1.TrustLevel_TRUST_LEVEL_UNTRUSTED:
		// A stranger's answer to the recipient's own request is theirs to
		// send too: decideRecipientSide checks that it answers one.
		return typeName == msgtypes.ConnectionRequest || typeName == msgtypes.ConnectionAccept
	}
	return false
}

// decideInbound decides an envelope another broker sent, which federation
// verified: the recipient side only (the sender's broker decided its own),
// with every hard rule of that side, and stores the recipient's
// Deliverable — also when the recipient side refuses, so the sender's
// broker gets a receipt saying so — once per envelope. An error is
// transient: the event is redelivered.
func (s *Service) decideInbound(ctx context.Context, cause *alpv1.Event, in *alpv1.InboundVerified) error {
	tenant := cause.GetHeader().GetTenant()
	env := proto.CloneOf(in.GetEnvelope())
	if !s.Tenants.Hosts(tenant) || env == nil || env.GetId() == "" || alp.ValidatePersonID(in.GetRecipientPersonId()) != nil || in.GetOriginBroker() == "" {
		return bus.Permanent(errors.New("policy: inbound envelope without hosted tenant, envelope, recipient or origin broker"))
	}
	log := s.Logger.With("tenant", tenant, "envelope", env.GetId(), "origin_broker", in.GetOriginBroker())
	skip := func(reason, msg string) error {
		s.inbound.skipped.WithLabelValues(reason).Inc()
		log.Warn("inbound envelope not decided: "+msg, "reason", reason)
		return nil
	}
	st := s.state
	from, err := alp.ParseAddress(env.GetFrom())
	if err != nil || st.tenants.Hosts(from.Domain()) {
		return skip(skipSenderNotRemote, "the sender is not an address at another broker")
	}
	sender := side{tenant: from.Domain(), address: from.String()}
	recipient, err := st.resolve(ctx, env.GetTo())
	switch {
	case errors.Is(err, identitystore.ErrNotFound):
		return skip(skipUnknownRecipient, "no person on this broker has that address")
	case err != nil:
		return err
	case !recipient.local() || recipient.tenant != tenant || recipient.personID != in.GetRecipientPersonId():
		return skip(skipRecipientMismatch, "the envelope's recipient is not the event's")
	}

	hop := envelope.Begin(alpv1.Role_ROLE_POLICY, "decide")
	dv, err := s.decideRecipientSide(ctx, env, in, sender, recipient)
	if errors.Is(err, seal.ErrKeyDestroyed) {
		return skip(skipRecipientErased, "the body can no longer be opened (the recipient was erased)")
	}
	if errors.Is(err, identitystore.ErrNotFound) {
		return skip(skipUnknownRecipient, "the recipient is gone (erased)")
	}
	if err != nil {
		return err
	}
	hop.End(env)

	// Only the ALP header is kept: the body is in the views and held items.
	header := proto.CloneOf(env)
	header.Body, header.SealedBody = nil, nil
	proto.ClearExtension(header, nlipv1.E_Nlip)
	dv.Envelope = header
	dv.RecipientPersonId = recipient.personID
	dv.OriginBroker, dv.SenderLog, dv.SenderCommitment = in.GetOriginBroker(), in.GetSenderLog(), in.GetSenderCommitment()
	dv.SenderAgentClass = remoteAgentClass(in.GetAgentClass())
	dv.OriginSignature, dv.WireSha256 = in.GetOriginSignature(), in.GetWireSha256()
	subject, err := streams.DeliverSubject(recipient.tenant, recipient.personID, env.GetId())
	if err != nil {
		return bus.Permanent(err)
	}
	ev := s.NewEvent("deliverable", recipient.tenant, cause, env.GetId(), nil)
	ev.Body = &alpv1.Event_Deliverable{Deliverable: dv}
	if err := appendOnce(ctx, s.Bus, subject, ev); err != nil {
		return err
	}
	s.inbound.decided.WithLabelValues(outcomeLabel(dv.GetOutcome())).Inc()
	return nil
}

// decideRecipientSide is the recipient side's Deliverable for a remote
// sender (its envelope header is the caller's to set). A refusal is a
// Deliverable too (outcome refuse, the reason, no views). Errors:
// seal.ErrKeyDestroyed and identitystore.ErrNotFound for a recipient
// erased meanwhile; anything else is transient.
func (s *Service) decideRecipientSide(ctx context.Context, env *alpv1.Envelope, in *alpv1.InboundVerified, sender, recipient side) (*alpv1.Deliverable, error) {
	st := s.state
	refused := func(code, msg string) (*alpv1.Deliverable, error) {
		return &alpv1.Deliverable{Outcome: alpv1.Outcome_OUTCOME_REFUSE,
			Reasons: []*alpv1.Reason{{Party: decision.PartyBroker, Code: code, Message: msg}}}, nil
	}
	if !inboundTrustOK(envelope.Trust(env), env.GetType()) {
		return refused(codeUntrustedSender, "the sending broker's trust in the sender does not allow this message")
	}
	body, err := s.Sealer.Open(ctx, env.GetSealedBody(), []byte(env.GetId()))
	if err != nil {
		if errors.Is(err, seal.ErrKeyDestroyed) {
			return nil, err
		}
		return nil, fmt.Errorf("policy: opening an inbound body: %w", err)
	}
	sets, versions, err := st.sets("", "", recipient)
	if err != nil {
		var invalid *rulesInvalidError
		if errors.As(err, &invalid) {
			return refused(codeRulesInvalid, invalid.Error())
		}
		return nil, err
	}
	if env.GetType() == msgtypes.ConnectionAccept {
		// The sender accepted the recipient's request to connect: once it
		// is checked to answer one, the two are connected here too, and the
		// notice reaches the recipient's agents as a connected party's
		// message.
		request, ok, err := s.answeredRequest(ctx, env, body, sender, recipient)
		if err != nil {
			return nil, err
		}
		if !ok {
			return refused(decision.CodeStranger, "the sender is not connected to the recipient, and this answers no request of theirs")
		}
		_, err = st.rels.AcceptedByRemote(ctx, recipient.tenant, recipient.personID, sender.address, request)
		switch {
		case errors.Is(err, relationships.ErrDeclined):
			return refused(codeConnectionDeclined, "the recipient declined to connect")
		case errors.Is(err, relationships.ErrBlocked):
			return refused(decision.CodeBlocked, "the recipient blocked the sender")
		case err != nil:
			return nil, fmt.Errorf("policy: recording the accepted connection: %w", err)
		}
	}
	rel, err := st.rels.Relationship(recipient.tenant, sender.party(recipient.tenant), recipient.personID, recipient.roles)
	if err != nil {
		return nil, fmt.Errorf("policy: relationship as the recipient sees it: %w", err)
	}
	classes, err := st.agentClasses(recipient)
	if err != nil {
		return nil, err
	}
	typ, _ := st.types.Registry().Lookup(env.GetType())
	msg := decision.Message{Type: typ, Body: body, Sender: sender.rulesSide(), Recipient: recipient.rulesSide(), Withheld: in.GetWithheld(),
		// A remote agent has no person id here: the rules know the sender
		// by context.sender's address.
		Agent: rules.Agent{ID: env.GetFromAgent(), TrustClass: remoteAgentClass(in.GetAgentClass()), Tenant: sender.tenant}}
	if err := st.preapprovals(&msg, sender, recipient); err != nil {
		return nil, err
	}
	r, err := decision.RecipientSide(ctx, msg, rel, sets.RecipientOrg, sets.Recipient, classes)
	if err != nil {
		return nil, fmt.Errorf("policy: deciding an inbound envelope: %w", err)
	}
	if slices.ContainsFunc(r.Held, func(h decision.Held) bool { return h.Kind == decision.HeldConnectionRequest }) {
		// Recorded with the remote party, as a same-broker request is, so
		// the person's connections page lists it and their answer is what
		// the two are to each other from then on.
		_, err := st.rels.Request(ctx, recipient.tenant, sender.party(recipient.tenant), recipient.personID, env.GetId())
		switch {
		case errors.Is(err, relationships.ErrDeclined):
			return refused(codeConnectionDeclined, "the recipient declined to connect")
		case errors.Is(err, relationships.ErrBlocked):
			return refused(decision.CodeBlocked, "the recipient blocked the sender")
		case err != nil:
			return nil, fmt.Errorf("policy: recording the connection request: %w", err)
		}
	}
	return s.deliverable(ctx, env, sender, recipient, decision.Decision{Recipient: &r, Forwarded: body}, versions)
}

// answeredRequest checks that a connection.accept/v1 from sender answers
// a connection request recipient sent them: its in_reply_to (the body's,
// and the envelope's when set, the same) names an envelope whose Decided
// is on the recipient's own subject, of type connection.request/v1, to
// the sender's address, let out. It answers the request's envelope id.
// Anything else is false, not an error: the message answers nothing and
// is refused as a stranger's.
func (s *Service) answeredRequest(ctx context.Context, env *alpv1.Envelope, body []byte, sender, recipient side) (string, bool, error) {
	var b struct {
		InReplyTo string `json:"in_reply_to"`
	}
	if json.Unmarshal(body, &b) != nil || b.InReplyTo == "" || (env.GetInReplyTo() != "" && env.GetInReplyTo() != b.InReplyTo) {
		return "", false, nil
	}
	subject, err := streams.DecidedSubject(recipient.tenant, recipient.personID, b.InReplyTo)
	if err != nil {
		return "", false, nil
	}
	m, err := s.Bus.LastMessageIn(ctx, streams.Decided, subject)
	if err != nil {
		return "", false, fmt.Errorf("policy: the request a connection accept answers: %w", err)
	}
	if m == nil {
		return "", false, nil
	}
	ev, err := bus.Decode(m.Data)
	if err != nil {
		return "", false, nil
	}
	d := ev.GetDecided()
	req := d.GetEnvelope()
	switch {
	case d == nil, d.GetSenderPersonId() != recipient.personID, req.GetType() != msgtypes.ConnectionRequest,
		req.GetId() != b.InReplyTo, alp.NormalizeAddress(req.GetTo()) != alp.NormalizeAddress(sender.address):
		return "", false, nil
	}
	switch d.GetOutcome() {
	case alpv1.Outcome_OUTCOME_DELIVER, alpv1.Outcome_OUTCOME_DELIVER_PARTIAL:
		return b.InReplyTo, true, nil
	}
	return "", false, nil
}

func outcomeLabel(o alpv1.Outcome) string {
	switch o {
	case alpv1.Outcome_OUTCOME_DELIVER:
		return string(decision.Deliver)
	case alpv1.Outcome_OUTCOME_DELIVER_PARTIAL:
		return string(decision.DeliverPartial)
	case alpv1.Outcome_OUTCOME_HOLD:
		return string(decision.HoldOutcome)
	}
	return string(decision.Refuse)
}
