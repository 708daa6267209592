package federation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"golang.org/x/mod/sumdb/note"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/alpwire"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/streams"
)

// CodeUnknownEnvelope: a receipt notice for an envelope this broker did
// not send to the notice's signer.
const CodeUnknownEnvelope = "unknown_envelope"

// onDeliverable answers a deliverable of a remote sender (policy decided
// the recipient side of an envelope another broker sent): the recipient's
// ledger issues its receipt for the envelope's entry, and the signed
// notice goes to the sending broker through the outbox.
func (s *Service) onDeliverable(ctx context.Context, d bus.Delivery) error {
	dv := d.Event.GetDeliverable()
	if dv == nil {
		return bus.Permanent(fmt.Errorf("federation: %s on the deliveries' stream", bus.Kind(d.Event)))
	}
	if dv.GetOriginBroker() == "" || s.opts.Disabled {
		return nil
	}
	env := dv.GetEnvelope()
	tenant := d.Event.GetHeader().GetTenant()
	from, err := alp.ParseAddress(env.GetFrom())
	if err != nil {
		return bus.Permanent(fmt.Errorf("federation: a deliverable from %q: %w", env.GetFrom(), err))
	}
	receipt, at, err := s.issueReceipt(ctx, tenant, dv)
	if err != nil {
		return err
	}
	n := &alpwire.ReceiptNotice{ID: env.GetId(), Outcome: noticeOutcome(dv.GetOutcome()), Receipt: receipt, Receiver: s.opts.BrokerName}
	for _, f := range dv.GetFields() {
		switch f.GetAction() {
		case alpv1.FieldAction_FIELD_ACTION_DENY:
			n.Withheld = append(n.Withheld, f.GetPointer())
		case alpv1.FieldAction_FIELD_ACTION_HOLD:
			n.Held = append(n.Held, f.GetPointer())
		}
	}
	key, err := s.brokerKey(ctx)
	if err != nil {
		return err
	}
	raw, err := alpwire.SignReceiptNotice(n, key.keyID, key.signer)
	if err != nil {
		return bus.Permanent(fmt.Errorf("federation: signing the receipt notice: %w", err))
	}
	subject, err := streams.OutboxSubject(tenant, from.Domain(), streams.OutboxReceipt, env.GetId())
	if err != nil {
		return bus.Permanent(err)
	}
	ev := s.NewEvent("outbox_item", tenant, d.Event, env.GetId(), nil)
	ev.Body = &alpv1.Event_OutboxItem{OutboxItem: &alpv1.OutboxItem{
		Kind: alpv1.OutboxKind_OUTBOX_KIND_RECEIPT, Envelope: &alpv1.Envelope{Id: env.GetId(), From: env.GetFrom(), To: env.GetTo()},
		RemoteDomain: from.Domain(), RemoteBroker: dv.GetOriginBroker(), Notice: raw, Queued: timestamppb.Now(),
	}}
	if _, err := s.Bus.Publish(ctx, subject, ev); err != nil {
		return err
	}
	// The recipient's log, receipt included, witnessed by the sender's side.
	s.queueCosign(ctx, d.Event, tenant, dv.GetRecipientPersonId(), from.Domain(), env.GetId(), at+1)
	return nil
}

// issueReceipt asks the recipient's ledger for its receipt of the
// envelope's entry, given to the sender's log, and the index of its
// receipt.issued entry; the entry may not be recorded yet, which comes back
// later.
func (s *Service) issueReceipt(ctx context.Context, tenant string, dv *alpv1.Deliverable) ([]byte, uint64, error) {
	conn, err := s.peer(alpv1.Role_ROLE_LEDGER)
	if err != nil {
		return nil, 0, bus.Later(time.Second, err)
	}
	res, err := ledgerv1.NewLedgerServiceClient(conn).IssueReceipt(ctx, &ledgerv1.IssueReceiptRequest{
		Tenant: tenant, PersonId: dv.GetRecipientPersonId(), EnvelopeId: dv.GetEnvelope().GetId(), Counterparty: dv.GetSenderLog()})
	switch status.Code(err) {
	case codes.OK:
		return res.GetReceipt(), res.GetIndex(), nil
	case codes.NotFound, codes.Unavailable, codes.FailedPrecondition:
		return nil, 0, bus.Later(500*time.Millisecond, err)
	case codes.InvalidArgument:
		return nil, 0, bus.Permanent(err)
	}
	return nil, 0, err
}

func noticeOutcome(o alpv1.Outcome) string {
	switch o {
	case alpv1.Outcome_OUTCOME_DELIVER:
		return alpwire.OutcomeDelivered
	case alpv1.Outcome_OUTCOME_DELIVER_PARTIAL:
		return alpwire.OutcomePartial
	case alpv1.Outcome_OUTCOME_HOLD:
		return alpwire.OutcomeHeld
	}
	return alpwire.OutcomeRefused
}

var noticeStates = map[string]alpv1.DeliveryState{
	alpwire.OutcomeDelivered: alpv1.DeliveryState_DELIVERY_STATE_DELIVERED,
	alpwire.OutcomePartial:   alpv1.DeliveryState_DELIVERY_STATE_PARTIAL,
	alpwire.OutcomeHeld:      alpv1.DeliveryState_DELIVERY_STATE_HELD,
	alpwire.OutcomeRefused:   alpv1.DeliveryState_DELIVERY_STATE_REFUSED,
}

// handleReceipt is POST /federation/v1/receipts: the recipient's broker's
// signed notice for an envelope this broker sent it. The request and the
// notice are signed by the broker the envelope went to, and its ledger's
// receipt verifies with that broker's published ledger keys; the sender's
// status then says what the recipient side did.
func (s *Service) handleReceipt(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusBadRequest, "unreadable_body", "the request body could not be read"))
		return
	}
	if err := s.receiveReceipt(r.Context(), r, raw, time.Now()); err != nil {
		s.m.refused.WithLabelValues(err.Code).Inc()
		s.Logger.Warn("federation: receipt notice refused", "code", err.Code, "message", err.Message, "cause", err.Cause)
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]string{"status": "recorded"})
}

func (s *Service) receiveReceipt(ctx context.Context, r *http.Request, raw []byte, now time.Time) *httpjson.Error {
	auth, err := alpwire.ParseAuthorization(r.Header.Get("Authorization"))
	if err != nil {
		return fromWire(err, true).Error
	}
	n, err := alpwire.ParseReceiptNotice(raw)
	if err != nil {
		return fromWire(err, false).Error
	}
	lr, err := n.LedgerReceipt()
	if err != nil || lr == nil {
		return httpjson.Errorf(http.StatusBadRequest, alpwire.CodeMissingField, "the notice carries no ledger receipt")
	}
	tenant, person, err := ledgerlog.ParseOrigin(lr.Counterparty)
	if err != nil || !s.Tenants.Hosts(tenant) {
		return httpjson.Errorf(http.StatusNotFound, CodeUnknownEnvelope, "the receipt is not for a log of this broker")
	}
	subject, err := streams.OutboundStatusSubject(tenant, person, n.ID)
	if err != nil {
		return httpjson.Errorf(http.StatusNotFound, CodeUnknownEnvelope, "the receipt is not for a log of this broker")
	}
	last, _, err := s.lastStatus(ctx, subject)
	if err != nil {
		return &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: 1, Message: "the status cannot be read right now", Cause: err}
	}
	// The receipt may come before this broker recorded the receiver's
	// Accepted (still QUEUED, no remote named yet): the receiver is then
	// checked below as the recipient domain's home broker.
	if last == nil || last.GetRemoteBroker() != "" && last.GetRemoteBroker() != auth.Origin || n.Receiver != auth.Origin {
		return httpjson.Errorf(http.StatusNotFound, CodeUnknownEnvelope, "this broker sent no envelope %s to %s", n.ID, auth.Origin)
	}
	if noticeStates[n.Outcome] == last.GetState() {
		return nil // told before
	}
	to, err := alp.ParseAddress(last.GetTo())
	if err != nil {
		return httpjson.Errorf(http.StatusNotFound, CodeUnknownEnvelope, "this broker sent no envelope %s to %s", n.ID, auth.Origin)
	}
	home, err := s.resolver.HomeBroker(ctx, to.Domain())
	if err != nil || home.Broker != auth.Origin {
		return httpjson.Errorf(http.StatusForbidden, CodeSignerNotHomeBroker, "%s is not the home broker of %s", auth.Origin, to.Domain())
	}
	keys := s.resolver.KeyResolver(ctx, home.BrokerURL)
	if _, err := alpwire.VerifyRequest(r, raw, s.opts.BrokerName, keys, now, s.opts.Skew); err != nil {
		return fromWire(err, true).Error
	}
	if err := alpwire.VerifySigned(raw, alpwire.CtxReceipt, auth.Origin, keys, now); err != nil {
		return fromWire(err, true).Error
	}
	bk, err := s.resolver.BrokerKeys(ctx, home.BrokerURL, home.Broker)
	if err != nil {
		return &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: 5, Message: "the receiver's keys cannot be fetched right now", Cause: err}
	}
	verifiers, err := ledgerVerifiers(bk, to.Domain())
	if err == nil {
		_, err = ledgerlog.VerifyReceipt(lr, verifiers)
	}
	if err != nil || lr.EnvelopeID != n.ID {
		return &httpjson.Error{Status: http.StatusUnauthorized, Code: alpwire.CodeBadSignature, Message: "the ledger receipt does not verify with the receiver's published ledger keys", Cause: err}
	}
	st := &alpv1.OutboundStatus{EnvelopeId: n.ID, SenderPersonId: person, State: noticeStates[n.Outcome], RemoteBroker: auth.Origin,
		Accepted: last.GetAccepted(), ReceiptNotice: raw, Withheld: n.Withheld, Held: n.Held, Receipt: n.Receipt, To: last.GetTo(),
		Attempts: last.GetAttempts()}
	if err := s.appendStatus(ctx, nil, tenant, st); err != nil {
		return &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: 1, Message: "the receipt cannot be recorded right now", Cause: err}
	}
	s.m.receipts.Inc()
	// The sender's log witnessed by the recipient's side.
	s.queueCosign(ctx, nil, tenant, person, to.Domain(), n.ID, 0)
	return nil
}

// ledgerVerifiers are a remote domain's ledger keys as its broker
// publishes them.
func ledgerVerifiers(bk *alpwire.BrokerKeys, domain string) (note.Verifiers, error) {
	var vs []note.Verifier
	for _, k := range bk.LedgerKeys[domain] {
		v, err := note.NewVerifier(k)
		if err != nil {
			return nil, fmt.Errorf("federation: a ledger key of %s: %w", domain, err)
		}
		vs = append(vs, v)
	}
	if len(vs) == 0 {
		return nil, fmt.Errorf("federation: %s publishes no ledger keys", domain)
	}
	return note.VerifierList(vs...), nil
}

// peer is the gRPC connection to another service.
func (s *Service) peer(role alpv1.Role) (grpc.ClientConnInterface, error) {
	if s.opts.Peer == nil {
		return nil, errors.New("federation: no peer connections configured")
	}
	return s.opts.Peer(role)
}
