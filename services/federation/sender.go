package federation

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alpwire"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/seal"
)

// Paths of the broker-to-broker API, under alpwire.FederationPath.
const (
	SendPath     = alpwire.FederationPath + "/send"
	ReceiptsPath = alpwire.FederationPath + "/receipts"
)

// maxRequestBytes bounds a request to the broker-to-broker API: one
// envelope, or one receipt notice.
const maxRequestBytes = alpwire.MaxEnvelopeBytes

// remoteError is a remote broker's refusal or a failure to reach it.
type remoteError struct {
	status     int // 0: no answer
	code       string
	message    string
	retryAfter time.Duration
	header     http.Header // the answer's headers, when there was one
}

func (e *remoteError) Error() string {
	if e.status == 0 {
		return "federation: remote broker unreachable: " + e.message
	}
	return fmt.Sprintf("federation: remote broker answered %d %s: %s", e.status, e.code, e.message)
}

// permanent: the remote broker refused the request itself (a 4xx other
// than 408 and 429): sending it again would be refused again.
func (e *remoteError) permanent() bool {
	return e.status >= 400 && e.status < 500 && e.status != http.StatusRequestTimeout && e.status != http.StatusTooManyRequests
}

// onOutboxItem sends one outbox item to its remote broker. Success and a
// permanent refusal end it (acknowledged); anything else comes back after
// a backoff, until the item is older than OutboxMaxAge.
func (s *Service) onOutboxItem(ctx context.Context, d bus.Delivery) error {
	item := d.Event.GetOutboxItem()
	if item == nil || item.GetRemoteDomain() == "" {
		return bus.Permanent(fmt.Errorf("federation: %s on the outbox", bus.Kind(d.Event)))
	}
	tenant := d.Event.GetHeader().GetTenant()
	attempt := d.Metadata.NumDelivered
	if s.opts.Disabled {
		return s.failed(ctx, d, item, CodeDisabled, "this broker does not federate")
	}
	if time.Since(item.GetQueued().AsTime()) > s.opts.OutboxMaxAge {
		s.m.expired.Inc()
		return s.failed(ctx, d, item, "outbox_expired",
			fmt.Sprintf("not delivered to %s within %s (%d attempts)", item.GetRemoteDomain(), s.opts.OutboxMaxAge, attempt))
	}
	r := s.remotes.get(item.GetRemoteDomain())
	release, ok := r.acquire()
	if !ok {
		return bus.Later(backoff(1, 200*time.Millisecond, time.Second), errors.New("federation: the remote's senders are all busy"))
	}
	defer release()
	done, err := r.breaker.Allow()
	if err != nil {
		s.m.breakerOpen.Inc()
		return bus.Later(backoff(attempt, s.opts.RetryMin, r.openFor), fmt.Errorf("federation: %s: %w", item.GetRemoteDomain(), err))
	}

	sctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	switch item.GetKind() {
	case alpv1.OutboxKind_OUTBOX_KIND_ENVELOPE:
		err = s.sendEnvelope(sctx, d, tenant, item, attempt)
	case alpv1.OutboxKind_OUTBOX_KIND_RECEIPT:
		err = s.sendReceipt(sctx, item)
	case alpv1.OutboxKind_OUTBOX_KIND_COSIGN:
		err = s.sendCosign(sctx, tenant, item)
	default:
		done(nil)
		return bus.Permanent(fmt.Errorf("federation: outbox item of kind %s", item.GetKind()))
	}
	var re *remoteError
	switch {
	case err == nil:
		done(nil)
		s.m.sent.WithLabelValues(item.GetKind().String()).Inc()
		return nil
	case errors.As(err, &re) && re.permanent():
		done(nil) // it answered: the remote is up
		s.m.refusedByRemote.WithLabelValues(re.code).Inc()
		if item.GetKind() == alpv1.OutboxKind_OUTBOX_KIND_RECEIPT {
			s.Logger.Warn("federation: a receipt notice was refused by the sender's broker", "remote", item.GetRemoteDomain(),
				"code", re.code, "err", err)
			return nil
		}
		return s.failed(ctx, d, item, re.code, re.message)
	case errors.As(err, &re) && re.status == http.StatusTooManyRequests:
		done(nil)
		return bus.Later(max(re.retryAfter, backoff(attempt, s.opts.RetryMin, s.opts.RetryMax)), err)
	case bus.IsPermanent(err):
		done(nil)
		if item.GetKind() == alpv1.OutboxKind_OUTBOX_KIND_RECEIPT {
			return err
		}
		return s.failed(ctx, d, item, "unsendable", err.Error())
	default:
		done(err)
		s.m.retries.Inc()
		s.Logger.Info("federation: delivery failed; will retry", "remote", item.GetRemoteDomain(), "attempt", attempt, "err", err)
		return bus.Later(backoff(attempt, s.opts.RetryMin, s.opts.RetryMax), err)
	}
}

// failed ends an item that cannot be delivered: the sender's status says
// so, with the reason.
func (s *Service) failed(ctx context.Context, d bus.Delivery, item *alpv1.OutboxItem, code, message string) error {
	if item.GetKind() != alpv1.OutboxKind_OUTBOX_KIND_ENVELOPE {
		s.Logger.Warn("federation: an outbox item could not be delivered", "kind", item.GetKind().String(), "remote", item.GetRemoteDomain(),
			"code", code, "message", message)
		return nil
	}
	env := item.GetEnvelope()
	s.m.failed.WithLabelValues(code).Inc()
	return s.appendStatus(ctx, d.Event, d.Event.GetHeader().GetTenant(), &alpv1.OutboundStatus{
		EnvelopeId: env.GetId(), SenderPersonId: item.GetSenderPersonId(), State: alpv1.DeliveryState_DELIVERY_STATE_FAILED,
		Code: code, Message: message, To: env.GetTo(), Attempts: uint32(d.Metadata.NumDelivered),
	})
}

// sendEnvelope delivers one envelope: discovery names the recipient
// domain's home broker, the envelope is signed with the broker's key and
// POSTed with a signed Authorization header, and the remote's signed
// Accepted becomes the status SENT.
func (s *Service) sendEnvelope(ctx context.Context, d bus.Delivery, tenant string, item *alpv1.OutboxItem, attempt uint64) error {
	env := item.GetEnvelope()
	home, keys, err := s.remoteBroker(ctx, item.GetRemoteDomain())
	if err != nil {
		return err
	}
	body, err := s.Sealer.Open(ctx, env.GetSealedBody(), []byte(env.GetId()))
	if errors.Is(err, seal.ErrKeyDestroyed) {
		return bus.Permanent(errors.New("the sender was erased before the envelope left"))
	} else if err != nil {
		return fmt.Errorf("federation: opening what crosses: %w", err)
	}
	w := &alpwire.Envelope{
		ID: env.GetId(), Origin: s.opts.BrokerName, Destination: item.GetRemoteDomain(),
		From: env.GetFrom(), FromAgent: env.GetFromAgent(), AgentClass: agentClass(env), To: env.GetTo(), Type: env.GetType(),
		Body: body, CreatedTS: env.GetCreated().AsTime().UnixMilli(), InReplyTo: env.GetInReplyTo(),
		SenderLog: ledgerlog.Origin(tenant, item.GetSenderPersonId()),
	}
	w.Withheld = item.GetWithheld()
	w.ExpiresTS = item.GetQueued().AsTime().Add(s.opts.OutboxMaxAge).UnixMilli()
	if e := env.GetExpires(); e != nil {
		w.ExpiresTS = e.AsTime().UnixMilli()
	}
	if env.GetCreated() == nil {
		w.CreatedTS = item.GetQueued().AsTime().UnixMilli()
	}
	if w.SenderCommitment, err = s.senderCommitment(ctx, tenant, item, attempt); err != nil {
		return err
	}
	key, err := s.brokerKey(ctx)
	if err != nil {
		return err
	}
	raw, err := alpwire.SignEnvelope(w, s.opts.BrokerName, key.keyID, key.signer)
	if err != nil {
		return bus.Permanent(fmt.Errorf("signing the envelope: %w", err))
	}
	answer, err := s.post(ctx, keys.FederationURL+"/send", home.Broker, raw, key)
	if err != nil {
		return err
	}
	acc, err := alpwire.ParseAccepted(answer)
	if err == nil {
		err = alpwire.VerifySigned(answer, alpwire.CtxAccepted, home.Broker, resolverOf(keys), time.Now())
	}
	if err == nil && (acc.ID != env.GetId() || acc.EnvelopeSHA256 != alpwire.Digest(raw) || acc.Receiver != home.Broker) {
		err = errors.New("the answer is for another envelope or from another broker")
	}
	if err != nil {
		// An answer we cannot check proves nothing: try again.
		return &remoteError{status: 0, message: "unverifiable answer: " + err.Error()}
	}
	return s.appendStatus(ctx, d.Event, tenant, &alpv1.OutboundStatus{
		EnvelopeId: env.GetId(), SenderPersonId: item.GetSenderPersonId(), State: alpv1.DeliveryState_DELIVERY_STATE_SENT,
		RemoteBroker: home.Broker, Accepted: answer, To: env.GetTo(), Attempts: uint32(attempt),
	})
}

// senderCommitment is the commitment of the sender's ledger entry for the
// envelope, which the recipient's log records so that the two exports
// match. The ledger may not have recorded the send yet (the item comes
// back, soon: the ledger and the outbox follow the same decisions, and the
// ledger is usually a moment behind); an entry without one (the sender
// erased) goes without.
func (s *Service) senderCommitment(ctx context.Context, tenant string, item *alpv1.OutboxItem, attempt uint64) (string, error) {
	conn, err := s.peer(alpv1.Role_ROLE_LEDGER)
	if err != nil {
		return "", bus.Later(time.Second, err)
	}
	res, err := ledgerv1.NewLedgerServiceClient(conn).EnvelopeCommitment(ctx, &ledgerv1.EnvelopeCommitmentRequest{
		Tenant: tenant, PersonId: item.GetSenderPersonId(), EnvelopeId: item.GetEnvelope().GetId()})
	switch status.Code(err) {
	case codes.OK:
		return res.GetCommitment(), nil
	case codes.FailedPrecondition:
		return "", nil
	case codes.NotFound, codes.Unavailable:
		return "", bus.Later(backoff(attempt, 50*time.Millisecond, time.Second), err)
	}
	return "", fmt.Errorf("federation: the sender's commitment: %w", err)
}

// sendReceipt delivers a receipt notice to the broker that sent the
// envelope (the one that signed it).
func (s *Service) sendReceipt(ctx context.Context, item *alpv1.OutboxItem) error {
	home, keys, err := s.remoteBroker(ctx, item.GetRemoteDomain())
	if err != nil {
		return err
	}
	if home.Broker != item.GetRemoteBroker() {
		// The sender domain moved to another broker since: the notice is
		// for the broker that sent the envelope, which is no longer home.
		return bus.Permanent(fmt.Errorf("%s's home broker is now %s, not %s", item.GetRemoteDomain(), home.Broker, item.GetRemoteBroker()))
	}
	key, err := s.brokerKey(ctx)
	if err != nil {
		return err
	}
	_, err = s.post(ctx, keys.FederationURL+"/receipts", home.Broker, item.GetNotice(), key)
	return err
}

// remoteBroker is a remote domain's home broker and its keys.
func (s *Service) remoteBroker(ctx context.Context, domain string) (alpwire.DomainDoc, *alpwire.BrokerKeys, error) {
	home, err := s.resolver.HomeBroker(ctx, domain)
	if err != nil {
		return home, nil, &remoteError{message: err.Error()}
	}
	keys, err := s.resolver.BrokerKeys(ctx, home.BrokerURL, home.Broker)
	if err != nil {
		return home, nil, &remoteError{message: err.Error()}
	}
	return home, keys, nil
}

// post sends body to url with the broker's signed Authorization header and
// returns a 2xx answer's body; any other answer is a *remoteError.
func (s *Service) post(ctx context.Context, url, destination string, body []byte, key brokerSigner) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, bus.Permanent(fmt.Errorf("federation: request to %s: %w", url, err))
	}
	req.Header.Set("Content-Type", "application/json")
	if err := alpwire.SignRequest(req, body, s.opts.BrokerName, destination, key.keyID, key.signer, time.Now()); err != nil {
		return nil, bus.Permanent(fmt.Errorf("federation: signing the request: %w", err))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, &remoteError{message: err.Error()}
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, alpwire.MaxAnswerBytes+1))
	if err != nil {
		return nil, &remoteError{message: "reading the answer: " + err.Error()}
	}
	if len(answer) > alpwire.MaxAnswerBytes {
		return nil, &remoteError{message: "the answer is larger than " + strconv.Itoa(alpwire.MaxAnswerBytes) + " bytes"}
	}
	if resp.StatusCode/100 == 2 {
		return answer, nil
	}
	re := &remoteError{status: resp.StatusCode, code: "http_" + strconv.Itoa(resp.StatusCode), message: resp.Status, header: resp.Header}
	var p struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(answer, &p) == nil && p.Code != "" {
		re.code, re.message = p.Code, p.Detail
	}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		re.retryAfter = time.Duration(secs) * time.Second
	}
	return nil, re
}

// agentClass is what the sender's broker says of the sending agent: its
// trust when it sent (ingress gives company agents trusted, consumer
// agents and personal access tokens verified).
func agentClass(env *alpv1.Envelope) string {
	if envelope.Trust(env) == nmpv1.TrustLevel_TRUST_LEVEL_TRUSTED {
		return alpwire.AgentCompany
	}
	return alpwire.AgentConsumer
}

// resolverOf verifies signatures with one broker's published keys.
func resolverOf(keys *alpwire.BrokerKeys) alpwire.KeyResolver {
	return func(broker, keyID string, at time.Time) (ed25519.PublicKey, error) {
		if broker != keys.Broker {
			return nil, fmt.Errorf("no keys of %s here", broker)
		}
		return keys.Key(keyID, at)
	}
}
