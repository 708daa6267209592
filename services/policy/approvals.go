package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/policy/decision"
	"github.com/alpd-project/alpd/services/policy/relationships"
)

// Policy carries out the person's decisions on connection requests
// (streams.PolicyApprovals, on the approvals stream's items): approved
// accepts the pending connection, denied or expired declines it. When
// the asker is at another broker, the acceptance is also told to them as
// a message (connection.accept/v1, tellAsker), so that the asker's own
// broker lets their next message out.

// codeConnectionAccepted is the broker's reason on the notice it sends
// for the person who accepted.
const codeConnectionAccepted = "connection_accepted"

// noticeAgent is the from_agent of envelopes the broker itself sends for a
// person: no agent of theirs wrote them.
const noticeAgent = "alpd.policy"

// noticeNamespace derives the id of the notice answering a request, so
// that telling the asker again (a redelivery, a second click) is the same
// envelope.
var noticeNamespace = uuid.MustParse("6f0b1a63-3c1e-4c59-9d8e-1f6b1a2c0e41")

// noticeID is the id of the notice answering request (an envelope id) of
// connection conn of tenant.
func noticeID(tenant, conn, request string) string {
	return uuid.NewSHA1(noticeNamespace, []byte(tenant+"\x00"+conn+"\x00"+request)).String()
}

// onApproval handles one event of an approval item: only the decision on a
// connection request does anything here (ingress releases what other
// kinds held).
func (s *Service) onApproval(ctx context.Context, ev *alpv1.Event) error {
	dec := ev.GetApprovalDecided()
	if dec == nil || dec.GetKind() != alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST {
		return nil
	}
	tenant, person := ev.GetHeader().GetTenant(), dec.GetPersonId()
	if !s.Tenants.Hosts(tenant) || alp.ValidatePersonID(person) != nil || dec.GetEnvelopeId() == "" {
		return bus.Permanent(errors.New("policy: a connection decision without hosted tenant, person or envelope"))
	}
	log := s.Logger.With("tenant", tenant, "item", dec.GetItemId(), "envelope", dec.GetEnvelopeId(), "state", dec.GetState().String())
	var accept bool
	switch dec.GetState() {
	case alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ONCE, alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ALWAYS:
		accept = true
	case alpv1.ApprovalState_APPROVAL_STATE_DENIED, alpv1.ApprovalState_APPROVAL_STATE_EXPIRED:
		// Not answered in time is no: the asker is not left waiting for
		// ever, and may not put the request before the person again.
	default:
		// Superseded (a later request is the one to decide) or cancelled
		// (nothing left to decide): the connection stays as it is.
		return nil
	}
	conn, err := s.requestedConnection(tenant, person, dec)
	if errors.Is(err, relationships.ErrNotFound) {
		log.Warn("policy: a decided connection request names no connection of the person; nothing to answer")
		return nil
	}
	if err != nil {
		return err
	}
	if !accept {
		_, err := s.state.rels.Decline(ctx, tenant, person, conn.ID)
		return s.answerError(log, "decline", err)
	}
	return s.acceptConnection(ctx, tenant, person, conn.ID)
}

// requestedConnection is the connection asked of person by the decided
// request: the one whose request came with that envelope, else the one
// between the asker (the decision's from) and the person, which a request
// later than the first one finds.
func (s *Service) requestedConnection(tenant, person string, dec *alpv1.ApprovalDecided) (relationships.Connection, error) {
	rels := s.state.rels
	c, err := rels.RequestOf(tenant, person, dec.GetEnvelopeId())
	if !errors.Is(err, relationships.ErrNotFound) {
		return c, err
	}
	from, perr := alp.ParseAddress(dec.GetFrom())
	if perr != nil {
		return relationships.Connection{}, err
	}
	party := relationships.Party{Address: from.String()}
	if from.Domain() == tenant && dec.GetSenderPersonId() != "" {
		party = relationships.Party{Person: dec.GetSenderPersonId()}
	}
	c, cerr := rels.Connection(tenant, relationships.ConnectionID(tenant, party, person))
	if cerr != nil || c.To != person {
		return relationships.Connection{}, err
	}
	return c, nil
}

// answerError sorts a relationships command's error: a connection that is
// already the other way (accepting a declined one) or gone is the
// person's earlier answer standing, logged and done; invalid input can
// never succeed; anything else is transient.
func (s *Service) answerError(log *slog.Logger, what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, relationships.ErrState), errors.Is(err, relationships.ErrNotFound):
		log.Warn("policy: the connection was answered otherwise already; the decision changes nothing", "answer", what, "err", err)
		return nil
	case errors.Is(err, relationships.ErrInvalid), errors.Is(err, relationships.ErrNotHosted):
		return bus.Permanent(fmt.Errorf("policy: %s connection: %w", what, err))
	}
	return fmt.Errorf("policy: %s connection: %w", what, err)
}

// acceptConnection is person's yes to connection id, by their web session
// or their decision on the approvals page: the connection is accepted and
// an asker at another broker is told. An accept of an accepted connection
// tells the asker again (the same envelope, stored once), so a retry after
// a failure to tell them finishes the job.
func (s *Service) acceptConnection(ctx context.Context, tenant, person, id string) error {
	log := s.Logger.With("tenant", tenant, "connection", id)
	c, err := s.state.rels.Accept(ctx, tenant, person, id)
	if err != nil {
		return s.answerError(log, "accept", err)
	}
	return s.tellAsker(ctx, tenant, person, c)
}

// acceptedByAPI is what the REST API calls once a person accepted
// connection c through it: the asker at another broker is told.
func (s *Service) acceptedByAPI(ctx context.Context, tenant, person string, c relationships.Connection) error {
	return s.tellAsker(ctx, tenant, person, c)
}

// tellAsker sends the asker of accepted connection c, when they are at
// another broker, a connection.accept/v1 from person answering their
// request: a Decided of the broker's own for an envelope to a remote
// recipient, which federation takes into its outbox like any other. A
// connection asked by a person here, or without the request's envelope,
// needs no notice: the asker's side is this broker's.
func (s *Service) tellAsker(ctx context.Context, tenant, person string, c relationships.Connection) error {
	st := s.state
	if c.State != relationships.ConnAccepted || c.To != person || c.From.Address == "" || c.EnvelopeID == "" {
		return nil
	}
	asker, err := alp.ParseAddress(c.From.Address)
	if err != nil || st.tenants.Hosts(asker.Domain()) {
		return nil
	}
	me, err := st.people.Person(ctx, tenant, person)
	if errors.Is(err, identitystore.ErrNotFound) {
		return nil // erased since: nobody left to speak for
	}
	if err != nil {
		return fmt.Errorf("policy: the accepting person: %w", err)
	}
	id := noticeID(tenant, c.ID, c.EnvelopeID)
	subject, err := streams.DecidedSubject(tenant, person, id)
	if err != nil {
		return bus.Permanent(err)
	}
	body := []byte(fmt.Sprintf(`{"in_reply_to":%q}`, c.EnvelopeID))
	typ, ok := st.types.Registry().Lookup(msgtypes.ConnectionAccept)
	if !ok {
		return bus.Permanent(fmt.Errorf("policy: the built-in type %s is missing", msgtypes.ConnectionAccept))
	}
	_, fields, err := typ.CheckWithheld(body, nil)
	if err != nil {
		// The request's envelope id is no UUID (a request made otherwise
		// than by a message): there is nothing the asker could match.
		log := s.Logger.With("tenant", tenant, "connection", c.ID)
		log.Warn("policy: the accepted request's envelope cannot be answered", "err", err)
		return nil
	}
	sealed, err := s.Sealer.Seal(ctx, tenant, person, body, []byte(id))
	if err != nil {
		return fmt.Errorf("policy: sealing the connection notice: %w", err)
	}
	now := timestamppb.Now()
	env := &alpv1.Envelope{Id: id, Tenant: tenant, From: me.Address, FromAgent: noticeAgent, To: asker.String(),
		Type: msgtypes.ConnectionAccept, InReplyTo: c.EnvelopeID, SealedBody: sealed, Created: now}
	dec := &alpv1.Decided{Envelope: env, SenderPersonId: person, Outcome: alpv1.Outcome_OUTCOME_DELIVER,
		Reasons: []*alpv1.Reason{{Party: decision.PartyBroker, Code: codeConnectionAccepted,
			Message: "the broker tells the asker that the person accepted their request to connect"}}}
	for _, f := range fields {
		dec.Fields = append(dec.Fields, &alpv1.FieldVerdict{Pointer: f.Pointer, Class: string(f.Class), Action: alpv1.FieldAction_FIELD_ACTION_ALLOW})
	}
	// No cause: nothing on the send log precedes this envelope, so the
	// ledger has no send request of it to wait for.
	ev := s.NewEvent("decided", tenant, nil, id, &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_PERSON, Id: person})
	ev.Body = &alpv1.Event_Decided{Decided: dec}
	return appendOnce(ctx, s.Bus, subject, ev)
}
