package federation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/alpwire"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/federation/discovery"
)

// The receiver's refusal codes beyond alpwire's own (parse errors and
// signature checks), each answered as a problem and recorded.
const (
	CodeUnknownDestination  = "unknown_destination"    // the envelope's destination is not a domain hosted here
	CodeUnknownRecipient    = "unknown_recipient"      // nobody here has the recipient address
	CodeExpired             = "expired"                // the envelope's expires_ts is past, or its created_ts too old
	CodeReplay              = "replay"                 // the request was seen before (same nonce), or the id with other content
	CodeSignerNotHomeBroker = "signer_not_home_broker" // the sender domain's home broker is another broker
	CodeOriginMismatch      = "origin_mismatch"        // the request's origin is not the envelope's
	CodeDiscoveryFailed     = "discovery_failed"       // the sender domain's home broker or its keys could not be found
	CodeUnknownType         = "unknown_type"           // a message type this broker does not know
	CodeInvalidBody         = "invalid_body"           // the body does not match its type
	CodeStrangerType        = "stranger_type"          // a stranger may only ask to connect
	CodeRateLimited         = "rate_limited"           // too many connection requests from this sender or broker
	CodeUnavailable         = "federation_unavailable"
	CodeDisabled            = "federation_disabled" // this broker does not federate
)

// refusal is one failed check: the answer and what is recorded of it.
type refusal struct {
	*httpjson.Error
}

func refuse(status int, code, format string, args ...any) *refusal {
	return &refusal{httpjson.Errorf(status, code, format, args...)}
}

// fromWire maps an alpwire refusal onto the answer: a request the
// receiver cannot authenticate is 401, a malformed envelope 400.
func fromWire(err error, authn bool) *refusal {
	code := alpwire.CodeOf(err)
	if code == "" {
		return &refusal{&httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: 5,
			Message: "the request could not be checked right now", Cause: err}}
	}
	status := http.StatusBadRequest
	if authn {
		status = http.StatusUnauthorized
	}
	var we *alpwire.Error
	pointer := ""
	if errors.As(err, &we) {
		pointer = we.Pointer
	}
	return &refusal{&httpjson.Error{Status: status, Code: code, Message: err.Error(), Pointer: pointer}}
}

// claims is what a refused request said, for the record.
type claims struct {
	origin, id, from, to, typ, remote string
	digest                            []byte
}

// handleSend is POST /federation/v1/send: an envelope from another
// broker. The checks run in the order docs/federation.md gives, the
// first failure answers (and is recorded); an envelope that passes them
// all is stored once as InboundVerified, for policy's recipient side, and
// answered with this broker's signed Accepted.
func (s *Service) handleSend(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusBadRequest, "unreadable_body", "the request body could not be read"))
		return
	}
	now := time.Now()
	c := claims{remote: r.RemoteAddr}
	sum := sha256.Sum256(raw)
	c.digest = sum[:]
	accepted, tenant, rf := s.receive(r.Context(), r, raw, now, &c)
	if rf != nil {
		s.recordRefusal(r.Context(), tenant, c, rf)
		httpjson.WriteError(w, rf.Error)
		return
	}
	status := http.StatusAccepted
	if accepted.duplicate {
		status = http.StatusOK
		s.m.duplicates.Inc()
	}
	w.Header().Set("Content-Type", "application/json")
	httpjson.NoStore(w.Header())
	w.WriteHeader(status)
	_, _ = w.Write(accepted.signed)
}

// acceptance is the receiver's signed Accepted, and whether it had the
// envelope already.
type acceptance struct {
	signed    []byte
	duplicate bool
}

// receive runs the receiver's checks on one send request and stores what
// passes. tenant is the destination, when it is hosted here (where a
// refusal is recorded).
func (s *Service) receive(ctx context.Context, r *http.Request, raw []byte, now time.Time, c *claims) (accepted acceptance, tenant string, _ *refusal) {
	auth, err := alpwire.ParseAuthorization(r.Header.Get("Authorization"))
	if err != nil {
		return accepted, "", fromWire(err, true)
	}
	c.origin = auth.Origin
	if auth.Destination != s.opts.BrokerName {
		return accepted, "", refuse(http.StatusUnauthorized, alpwire.CodeWrongDestination, "the request is for %s, this broker is %s", auth.Destination, s.opts.BrokerName)
	}
	env, err := alpwire.ParseEnvelope(raw)
	if err != nil {
		return accepted, "", fromWire(err, false)
	}
	c.id, c.from, c.to, c.typ = env.ID, env.From, env.To, env.Type

	// 1. The destination is a domain hosted here, and the recipient's.
	to, err := alp.ParseAddress(env.To)
	if err != nil || !s.Tenants.Hosts(env.Destination) || to.Domain() != env.Destination {
		return accepted, "", refuse(http.StatusNotFound, CodeUnknownDestination, "this broker does not host %s", env.Destination)
	}
	tenant = env.Destination
	if auth.Origin != env.Origin {
		return accepted, tenant, refuse(http.StatusUnauthorized, CodeOriginMismatch, "the request comes from %s, the envelope from %s", auth.Origin, env.Origin)
	}
	// 2. Time: the request within the skew window, the envelope not expired.
	if d := alpwire.Time(auth.TS).Sub(now); d > s.opts.Skew || d < -s.opts.Skew {
		return accepted, tenant, refuse(http.StatusUnauthorized, alpwire.CodeClockSkew, "the request was signed %s from now, beyond the skew of %s", d.Round(time.Second), s.opts.Skew)
	}
	if alpwire.Time(env.CreatedTS).After(now.Add(s.opts.Skew)) {
		return accepted, tenant, refuse(http.StatusBadRequest, alpwire.CodeClockSkew, "the envelope was created in the future")
	}
	if !alpwire.Time(env.ExpiresTS).After(now) {
		return accepted, tenant, refuse(http.StatusBadRequest, CodeExpired, "the envelope expired at %s", alpwire.Time(env.ExpiresTS).UTC().Format(time.RFC3339))
	}
	// 3. Replay: a request seen before (its nonce; recorded once its
	// signature verified, so unsigned noise fills no memory), then the
	// envelope id.
	if s.nonces.seen(auth.Origin, auth.Nonce, now) {
		return accepted, tenant, refuse(http.StatusUnauthorized, CodeReplay, "this request was received before")
	}
	people := s.people.Load()
	if people == nil {
		return accepted, tenant, refuse(http.StatusServiceUnavailable, CodeUnavailable, "the broker is starting; retry in a moment")
	}
	recipient, _, err := people.OwnerOf(ctx, tenant, to.String())
	if errors.Is(err, identitystore.ErrNotFound) {
		return accepted, tenant, refuse(http.StatusNotFound, CodeUnknownRecipient, "nobody at %s has that address", tenant)
	} else if err != nil {
		return accepted, tenant, &refusal{&httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: 1,
			Message: "the recipient could not be resolved right now", Cause: err}}
	}
	subject, err := streams.InboundVerifiedSubject(tenant, recipient, env.ID)
	if err != nil {
		return accepted, tenant, refuse(http.StatusBadRequest, alpwire.CodeInvalidValue, "%v", err)
	}
	seen, err := s.seen(ctx, subject)
	if err != nil {
		return accepted, tenant, &refusal{&httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: 1,
			Message: "the broker's log cannot be read right now", Cause: err}}
	}
	// 4. Strict alignment: the sender domain's home broker is the signer.
	from, err := alp.ParseAddress(env.From)
	if err != nil {
		return accepted, tenant, refuse(http.StatusBadRequest, alpwire.CodeInvalidValue, "the sender address is not an address")
	}
	home, err := s.resolver.HomeBroker(ctx, from.Domain())
	if err != nil {
		return accepted, tenant, refuse(http.StatusUnauthorized, CodeDiscoveryFailed, "the home broker of %s could not be found: %s", from.Domain(), discovery.CodeOf(err))
	}
	if home.Broker != auth.Origin {
		return accepted, tenant, refuse(http.StatusForbidden, CodeSignerNotHomeBroker, "%s's home broker is %s, not %s", from.Domain(), home.Broker, auth.Origin)
	}
	// 5 and 6. The key is valid now and not revoked; the signatures verify
	// over the exact bytes.
	keys := s.resolver.KeyResolver(ctx, home.BrokerURL)
	if _, err := alpwire.VerifyRequest(r, raw, s.opts.BrokerName, keys, now, s.opts.Skew); err != nil {
		return accepted, tenant, fromWire(err, true)
	}
	if err := alpwire.VerifySigned(raw, alpwire.CtxEnvelope, auth.Origin, keys, now); err != nil {
		return accepted, tenant, fromWire(err, true)
	}
	if !s.nonces.add(auth.Origin, auth.Nonce, now) {
		return accepted, tenant, refuse(http.StatusUnauthorized, CodeReplay, "this request was received before")
	}
	if seen != nil {
		// The sender's broker sending again (its answer was lost): the
		// same envelope is accepted again and not delivered twice.
		if seen.digest != alpwire.Digest(raw) && !sameContent(seen.wire, raw) {
			return accepted, tenant, refuse(http.StatusConflict, CodeReplay, "envelope %s was received before with other content", env.ID)
		}
		a, rf := s.accept(ctx, env.ID, raw, true, now)
		return acceptance{signed: a, duplicate: true}, tenant, rf
	}
	// 7. The body is of a type this broker knows.
	if rf := s.checkType(env); rf != nil {
		return accepted, tenant, rf
	}
	// Strangers may only ask to connect, within their rate.
	connected, err := s.connected(ctx, tenant, recipient, from.String())
	if err != nil {
		return accepted, tenant, &refusal{&httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: 1,
			Message: "the recipient's connections cannot be read right now", Cause: err}}
	}
	trust := nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED
	if !connected {
		// A stranger may ask to connect, or answer the recipient's own
		// request (connection.accept/v1: policy checks that it answers
		// one); nothing else.
		if env.Type != msgtypes.ConnectionRequest && env.Type != msgtypes.ConnectionAccept {
			return accepted, tenant, refuse(http.StatusForbidden, CodeStrangerType, "%s is not connected to the recipient: only %s (or %s answering the recipient's request) may be sent",
				from.String(), msgtypes.ConnectionRequest, msgtypes.ConnectionAccept)
		}
		if ok, wait := s.strangers.allow(from.String(), auth.Origin, now); !ok {
			rf := refuse(http.StatusTooManyRequests, CodeRateLimited, "too many connection requests from this sender or broker; retry later")
			rf.RetryAfter = max(1, int(wait.Round(time.Second)/time.Second))
			return accepted, tenant, rf
		}
		trust = nmpv1.TrustLevel_TRUST_LEVEL_UNTRUSTED
	}
	if rf := s.store(ctx, subject, tenant, recipient, env, auth, raw, trust); rf != nil {
		return accepted, tenant, rf
	}
	a, rf := s.accept(ctx, env.ID, raw, false, now)
	return acceptance{signed: a}, tenant, rf
}

// sameContent reports whether two signed envelopes say the same thing,
// signatures aside (the sender re-signed after rotating its key).
func sameContent(stored, raw []byte) bool {
	a, err1 := alpwire.ParseEnvelope(stored)
	b, err2 := alpwire.ParseEnvelope(raw)
	if err1 != nil || err2 != nil {
		return false
	}
	a.Signatures, b.Signatures = nil, nil
	return a.ID == b.ID && a.From == b.From && a.To == b.To && a.Type == b.Type && a.CreatedTS == b.CreatedTS &&
		a.ExpiresTS == b.ExpiresTS && a.InReplyTo == b.InReplyTo && string(a.Body) == string(b.Body)
}

// seenEnvelope is an envelope recorded before: the digest of its bytes
// and the bytes (opened), for a retry's comparison.
type seenEnvelope struct {
	digest string
	wire   []byte
}

func (s *Service) seen(ctx context.Context, subject string) (*seenEnvelope, error) {
	m, err := s.Bus.LastMessageIn(ctx, streams.Inbound, subject)
	if err != nil || m == nil {
		return nil, err
	}
	ev, err := bus.Decode(m.Data)
	if err != nil {
		return nil, err
	}
	iv := ev.GetInboundVerified()
	wire, err := s.Sealer.Open(ctx, iv.GetWire(), []byte(iv.GetEnvelope().GetId()+"/wire"))
	if err != nil {
		return nil, err
	}
	return &seenEnvelope{digest: alpwire.Digest(wire), wire: wire}, nil
}

// checkType looks the type up among the built-in ones and validates the
// body against its schema.
func (s *Service) checkType(env *alpwire.Envelope) *refusal {
	typ, ok := s.types.Lookup(env.Type)
	if !ok {
		return refuse(http.StatusUnprocessableEntity, CodeUnknownType, "this broker does not know the message type %s", env.Type)
	}
	if _, _, err := typ.CheckWithheld(env.Body, env.Withheld); err != nil {
		rf := refuse(http.StatusUnprocessableEntity, CodeInvalidBody, "the body does not match %s: %v", env.Type, err)
		var ves msgtypes.ValidationErrors
		if errors.As(err, &ves) && len(ves) > 0 {
			rf.Pointer = "/body" + ves[0].Pointer
		}
		return rf
	}
	return nil
}

// connected asks policy whether the recipient is connected to the sender.
func (s *Service) connected(ctx context.Context, tenant, recipient, sender string) (bool, error) {
	conn, err := s.peer(alpv1.Role_ROLE_POLICY)
	if err != nil {
		return false, err
	}
	res, err := policyv1.NewPolicyServiceClient(conn).ListConnections(ctx, &policyv1.ListConnectionsRequest{Tenant: tenant, PersonId: recipient})
	if err != nil {
		return false, err
	}
	for _, c := range res.GetConnections() {
		if with, err := alp.ParseAddress(c.GetWith()); err == nil && c.GetState() == "connected" && with.String() == sender {
			return true, nil
		}
	}
	return false, nil
}

// store appends the verified envelope once: the body and the exact bytes
// sealed with the recipient's data key, trust as the receiver sets it.
func (s *Service) store(ctx context.Context, subject, tenant, recipient string, w *alpwire.Envelope, auth *alpwire.Authorization, raw []byte, trust nmpv1.TrustLevel) *refusal {
	unavailable := func(err error) *refusal {
		return &refusal{&httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: 1,
			Message: "the envelope could not be stored right now", Cause: err}}
	}
	env := &alpv1.Envelope{Id: w.ID, Tenant: tenant, From: w.From, FromAgent: w.FromAgent, To: w.To, Type: w.Type,
		Created: timestamppb.New(alpwire.Time(w.CreatedTS)), Expires: timestamppb.New(alpwire.Time(w.ExpiresTS)), InReplyTo: w.InReplyTo}
	body, err := s.Sealer.Seal(ctx, tenant, recipient, w.Body, []byte(w.ID))
	if err != nil {
		return unavailable(err)
	}
	env.SealedBody = body
	wire, err := s.Sealer.Seal(ctx, tenant, recipient, raw, []byte(w.ID+"/wire"))
	if err != nil {
		return unavailable(err)
	}
	hop := envelope.Begin(alpv1.Role_ROLE_FEDERATION, "verify")
	reason := "signed by " + auth.Origin + ", the sender domain's home broker"
	if trust != nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED {
		reason += "; a stranger's connection request"
	}
	if err := hop.SetTrust(trust, reason); err != nil {
		return unavailable(err)
	}
	hop.End(env)
	ev := s.NewEvent("inbound_verified", tenant, nil, w.ID, &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_SERVICE, Id: auth.Origin})
	ev.Header.EventId = bus.HashID("inbound_verified", tenant, w.ID)
	ev.Body = &alpv1.Event_InboundVerified{InboundVerified: &alpv1.InboundVerified{
		Envelope: env, RecipientPersonId: recipient, OriginBroker: auth.Origin, KeyId: auth.Key, Wire: wire,
		AgentClass: w.AgentClass, SenderLog: w.SenderLog, SenderCommitment: w.SenderCommitment, Withheld: w.Withheld,
		OriginSignature: auth.Origin + " " + auth.Key + " " + w.Signatures[auth.Origin][auth.Key], WireSha256: alpwire.Digest(raw),
	}}
	if _, err := s.Bus.Append(ctx, subject, 0, ev); err != nil && !errors.Is(err, bus.ErrConflict) {
		return unavailable(err)
	}
	s.m.received.Inc()
	return nil
}

// accept signs this broker's Accepted for the exact bytes received.
func (s *Service) accept(ctx context.Context, id string, raw []byte, duplicate bool, now time.Time) ([]byte, *refusal) {
	key, err := s.brokerKey(ctx)
	if err == nil {
		var out []byte
		out, err = alpwire.SignAccepted(&alpwire.Accepted{ID: id, EnvelopeSHA256: alpwire.Digest(raw), Receiver: s.opts.BrokerName,
			AcceptedTS: now.UnixMilli(), Duplicate: duplicate}, key.keyID, key.signer)
		if err == nil {
			return out, nil
		}
	}
	return nil, &refusal{&httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: 1,
		Message: "the answer could not be signed right now", Cause: err}}
}

// recordRefusal logs and counts a refusal and, for a destination hosted
// here, records it on federation's log.
func (s *Service) recordRefusal(ctx context.Context, tenant string, c claims, rf *refusal) {
	s.m.refused.WithLabelValues(rf.Code).Inc()
	s.Logger.LogAttrs(ctx, slog.LevelWarn, "federation: request refused", slog.String("code", rf.Code), slog.String("message", rf.Message),
		slog.String("origin", c.origin), slog.String("envelope_id", c.id), slog.String("remote", c.remote), slog.Any("cause", rf.Cause))
	if tenant == "" || rf.Code == CodeUnavailable {
		return
	}
	// Anyone can make a refusal: recording is rate-limited, so noise
	// cannot fill the log (beyond the rate, refusals are counted and
	// logged only).
	if !s.refusalRecords.Allow() {
		s.m.unrecorded.Inc()
		return
	}
	id := hex.EncodeToString(c.digest[:16])
	subject, err := streams.InboundRefusedSubject(tenant, id)
	if err != nil {
		return
	}
	ev := s.NewEvent("inbound_refused", tenant, nil, c.id, nil)
	ev.Header.EventId = bus.HashID("inbound_refused", tenant, id, rf.Code)
	ev.Body = &alpv1.Event_InboundRefused{InboundRefused: &alpv1.InboundRefused{
		Code: rf.Code, Message: rf.Message, Origin: c.origin, EnvelopeId: c.id, From: c.from, To: c.to, Type: c.typ,
		BodySha256: c.digest, RemoteAddress: c.remote,
	}}
	if _, err := s.Bus.Publish(context.WithoutCancel(ctx), subject, proto.CloneOf(ev)); err != nil {
		s.Logger.Error("federation: recording a refusal failed", "code", rf.Code, "err", err)
	}
}
