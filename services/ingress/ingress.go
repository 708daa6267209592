// Package ingress is the agents' door into the broker. It owns no durable
// state of its own: it turns an authenticated agent's request into a
// SendRequested event on the send stream, with the body sealed under the
// sender's data key and trust set from the agent's credential (ingress is one
// of the two trust-setting points).
//
// Every agent binding goes through one send path, the [Door]: it admits an
// agent by its credential (trust from the credential class, rate limits per
// agent, person and tenant), checks the body against its message type
// (the built-in types and those the hosted organizations registered, which
// it follows on policy's stream: [BodyError] at the door, nothing stored),
// sends and awaits policy's decision up to a deadline (or answers pending)
// with every field's verdict, and parses recipients ([ParseRecipient]). The
// service holds one Door for all bindings ([Service.Door]), so an agent's
// rate limits are the broker's, whichever door it uses. A binding
// (services/ingress/nlipapi, mcpapi, restapi) only decodes its wire format
// into a [Submission] and encodes the [Outcome], or the error as every door
// answers it ([Problem]), with the pointer into its own request.
// docs/message-path.md follows one message through it, hop by hop.
package ingress

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ingressv1 "github.com/alpd-project/alpd/gen/alp/ingress/v1"
	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/msgtypes/typestore"
	"github.com/alpd-project/alpd/internal/nmp"
	"github.com/alpd-project/alpd/internal/service"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/ingress/inbox"
)

// Service is the ingress service.
type Service struct {
	service.Base
	ingressv1.UnimplementedIngressServiceServer
	opts     Options
	identity atomic.Pointer[agentauth.Follower]
	// types is the projection of the message types (built-in and the
	// organizations' registrations on policy's stream) the door validates
	// bodies against; nil until it is open.
	types  atomic.Pointer[typestore.Store]
	inbox  *inbox.Store
	door   *Door
	routes []httproute.Route
}

// Options are ingress's own settings.
type Options struct {
	// Issuers maps each tenant to its OAuth issuer; Resource is the audience
	// agents' tokens must carry.
	Issuers  map[string]string
	Resource string
	// MaxStaleness of the revocation and message-type projections before
	// every token is refused and ingress is not ready (default 30s).
	MaxStaleness time.Duration
	// ResourceMetadataURL is sent in every authentication challenge (RFC
	// 9728), so a refused agent can find the authorization server.
	ResourceMetadataURL string
	// Door tunes the send path every binding shares (Service.Door): its
	// rate limits are per broker process, whichever door an agent uses.
	Door DoorConfig
	// Bindings serve the send path over HTTP (HTTPRoutes).
	Bindings []Binding
	// Peer is a gRPC connection to the service of a role, wherever it
	// runs (the broker's Client): the agents' doors ask policy for a
	// person's connections and the ledger for their ledger's head.
	Peer func(alpv1.Role) (grpc.ClientConnInterface, error)
}

// New builds the ingress service.
func New(d service.Deps, o Options) *Service {
	if o.MaxStaleness == 0 {
		o.MaxStaleness = 30 * time.Second
	}
	s := &Service{Base: service.NewBase(alpv1.Role_ROLE_INGRESS, d), opts: o}
	s.inbox = inbox.New(inbox.Options{Bus: d.Bus, Sealer: d.Sealer, Tenants: d.Tenants, Log: s.Logger,
		People: s.people, NewEvent: s.NewEvent})
	s.door = newDoor(s, o.Door)
	for _, bind := range o.Bindings {
		s.routes = append(s.routes, bind(s)...)
	}
	return s
}

// Start creates the send and inbox streams, starts following identity's
// revocations, which agents' tokens are checked against, and the message
// types, which bodies are checked against, and runs the consumers that
// file deliverables into inboxes, record the people's decisions on held
// items there and purge erased people's.
func (s *Service) Start(ctx context.Context) error {
	if err := s.EnsureOwnedStreams(ctx); err != nil {
		return err
	}
	s.followIdentity(ctx)
	go s.followTypes(ctx)
	handlers := map[string]bus.Handler{streams.IngressInbox: s.inbox.File, streams.IngressErasure: s.inbox.Erase,
		streams.IngressReleases: s.inbox.Release}
	for _, c := range streams.OwnedConsumers(alpv1.Role_ROLE_INGRESS, 0) {
		spec := c.Spec()
		spec.EnsureStream = s.EnsureStream(c.Stream)
		if err := s.Consume(ctx, spec, handlers[c.Durable]); err != nil {
			return err
		}
	}
	go s.inbox.Sweep(ctx)
	// The inboxes close once the consumers have drained.
	stopped := s.Stopped()
	go func() {
		<-ctx.Done()
		<-stopped
		s.inbox.Close()
	}()
	s.MarkStarted()
	return nil
}

// Inbox is the people's inboxes (services/ingress/inbox).
func (s *Service) Inbox() *inbox.Store { return s.inbox }

// Door is the send path, the one every binding admits agents through: an
// agent's budget is the same whether it comes over NLIP, MCP or REST.
func (s *Service) Door() *Door { return s.door }

// people is identity's projection; nil until it is open.
func (s *Service) people() *identitystore.Store {
	if f := s.identity.Load(); f != nil {
		return f.Store()
	}
	return nil
}

// followTypes opens the message-type projection (typestore) once policy's
// stream exists — in split mode policy may start later — retrying with
// backoff up to 5s, and keeps it open until ctx ends. Ingress only reads
// it: registrations are policy's.
func (s *Service) followTypes(ctx context.Context) {
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		store, err := typestore.Open(ctx, s.Bus, s.Tenants, s.Logger)
		if err == nil {
			s.types.Store(store)
			<-ctx.Done()
			store.Close()
			return
		}
		s.Logger.Debug("message types not available yet", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// followIdentity opens the identity projection once identity's stream
// exists (in split mode identity may start later) and builds the token
// verifier on it (agentauth.Follow), until ctx ends.
func (s *Service) followIdentity(ctx context.Context) {
	s.identity.Store(agentauth.Follow(ctx, agentauth.FollowOptions{
		Bus: s.Bus, Tenants: s.Tenants, Keys: s.Keys,
		Issuers: s.opts.Issuers, Resource: s.opts.Resource, ResourceMetadataURL: s.opts.ResourceMetadataURL,
		MaxStaleness: s.opts.MaxStaleness, Logger: s.Logger,
	}))
}

// Verifier checks agents' access tokens locally, with revocations from the
// identity stream; nil until the projection is open.
func (s *Service) Verifier() *accesstoken.Verifier {
	if f := s.identity.Load(); f != nil {
		return f.Verifier()
	}
	return nil
}

// Authenticator checks agents' bearer credentials (access tokens and
// personal access tokens); before the identity projection is open it
// refuses everything as temporarily unavailable.
func (s *Service) Authenticator() *agentauth.Authenticator {
	if f := s.identity.Load(); f != nil {
		return f.Authenticator()
	}
	return &agentauth.Authenticator{ResourceMetadataURL: s.opts.ResourceMetadataURL}
}

// Ready adds the token verifier and the message types: without a fresh
// revocation projection ingress would have to refuse every agent, and
// without fresh message types it could not tell an unknown type from one
// registered a moment ago, so it is not ready.
func (s *Service) Ready() error {
	if err := s.Base.Ready(); err != nil {
		return err
	}
	f := s.identity.Load()
	if f == nil || f.Verifier() == nil {
		return errors.New("ingress: identity's revocations are not followed yet")
	}
	if err := f.Ready(); err != nil {
		return err
	}
	// A stale registry would refuse a type registered meanwhile as unknown.
	t := s.types.Load()
	if t == nil {
		return errors.New("ingress: the message types on policy's stream are not followed yet")
	}
	if err := t.Fresh(s.opts.MaxStaleness); err != nil {
		return fmt.Errorf("ingress: message types: %w", err)
	}
	return nil
}

// RegisterGRPC registers the ingress gRPC API.
func (s *Service) RegisterGRPC(r grpc.ServiceRegistrar) { ingressv1.RegisterIngressServiceServer(r, s) }

// Ping implements IngressService.Ping.
func (s *Service) Ping(_ context.Context, req *ingressv1.PingRequest) (*ingressv1.PingResponse, error) {
	env, ready := s.Pass(req.GetEnvelope(), "ping")
	return &ingressv1.PingResponse{Envelope: env, Service: s.Name(), Ready: ready}, nil
}

// Sender is the authenticated sender as identity resolved it: never taken
// from the message.
type Sender struct {
	Tenant   string
	PersonID string
	// Address is the person's address; it becomes the envelope's from.
	Address string
	AgentID string
	// Class is the trust class of the agent's credential.
	Class alpv1.TrustClass
	// Trust follows the agent's credential class (company 3, consumer 2).
	Trust       nmpv1.TrustLevel
	TrustReason string
	// Scopes are what the agent's credential allows (Door.MaySend checks
	// ScopeSend); Accept does not read them.
	Scopes []string
}

// Submission is one agent's request to send.
type Submission struct {
	Sender Sender
	// Envelope carries to, type, body and any NLIP/NMP headers; id, tenant,
	// from_agent are set here.
	Envelope       *alpv1.Envelope
	IdempotencyKey string
	// EnvelopeID, when set, is the id to use for a submission without an
	// idempotency key (from EnvelopeID, so the caller can await the
	// envelope's decision before submitting). A key always derives the id.
	EnvelopeID string
	// TrustCap lowers the trust set from the credential (the agent asked
	// for less, e.g. in its NMP header); unspecified leaves it.
	TrustCap       nmpv1.TrustLevel
	TrustCapReason string
	// AgentNMP is the NMP header the agent sent, if any. It is merged
	// (nmp.Apply with the rules in NMP) after the ingress hop, so the
	// agent's trace entries follow the ingress entry (docs/nmp.md).
	AgentNMP *nmp.AgentHeader
	NMP      nmp.Config
}

// ErrInvalid marks a submission the agent must fix.
var ErrInvalid = errors.New("ingress: invalid submission")

// ErrSenderMismatch marks a submission that names a sender other than the
// one its credential proves (bindings answer 403 sender_mismatch): the
// sender is always the credential's, never what a message says.
var ErrSenderMismatch = errors.New("ingress: sender mismatch")

// ErrIdempotencyKeyReused marks a submission whose idempotency key the same
// agent already used for a message to another recipient or of another type.
var ErrIdempotencyKeyReused = errors.New("ingress: idempotency key already used for another message")

// ErrIdempotencyBodyDiffers marks a submission whose idempotency key the
// same agent already used for the same recipient and type but another body
// (or in_reply_to): a retry must repeat the request exactly.
var ErrIdempotencyBodyDiffers = errors.New("ingress: idempotency key already used for a message with another body")

// Domains of the keyed digests ingress stores (seal.Sealer.Digest).
const (
	digestIdempotencyKey = "alpd/ingress/idempotency-key/v1"
	digestRequest        = "alpd/ingress/request/v1"
)

// ErrTooLarge marks a submission whose event would not fit in one NATS
// message. It can never be stored, so it is not worth a retry.
var ErrTooLarge = errors.New("ingress: envelope too large")

// payloadHeadroom is kept free under the NATS payload limit: the message
// headers take a few hundred bytes, and later hops add to the envelope
// (trace entries, policy's decision with its reasons) and must still fit.
const payloadHeadroom = 16 << 10

// envelopeNamespace scopes derived envelope ids.
var envelopeNamespace = uuid.MustParse("6f1d3c2a-4b5e-4f60-8a7b-9c0d1e2f3a4b")

// EnvelopeID is the id of the sender's envelope: derived from the keyed
// digest of (agent, idempotency key) when the agent sent a key, so a retry
// after a timeout is the same envelope; random (UUIDv7) otherwise. The
// digest is keyed by the sender's data key (seal.Sealer.Digest): an id
// derived from the key alone would let anyone who reads the streams test
// guesses of a key, and the key itself is never stored.
func (s *Service) EnvelopeID(ctx context.Context, snd Sender, key string) (string, error) {
	if key == "" {
		return uuid.Must(uuid.NewV7()).String(), nil
	}
	d, err := s.keyDigest(ctx, snd, key)
	if err != nil {
		return "", err
	}
	return envelopeIDOf(d), nil
}

func (s *Service) keyDigest(ctx context.Context, snd Sender, key string) ([]byte, error) {
	d, err := s.Sealer.Digest(ctx, snd.Tenant, snd.PersonID, digestIdempotencyKey, []byte(snd.AgentID), []byte(key))
	if err != nil {
		return nil, fmt.Errorf("ingress: idempotency key digest: %w", err)
	}
	return d, nil
}

func envelopeIDOf(keyDigest []byte) string {
	return uuid.NewSHA1(envelopeNamespace, keyDigest).String()
}

// requestDigest is the keyed digest of what a message says, which a retry
// under the same idempotency key must repeat.
func (s *Service) requestDigest(ctx context.Context, snd Sender, env *alpv1.Envelope) ([]byte, error) {
	d, err := s.Sealer.Digest(ctx, snd.Tenant, snd.PersonID, digestRequest,
		[]byte(env.GetType()), []byte(env.GetTo()), []byte(env.GetInReplyTo()), env.GetBody())
	if err != nil {
		return nil, fmt.Errorf("ingress: request digest: %w", err)
	}
	return d, nil
}

// ErrInvalidEnvelopeID marks an envelope id that is not a UUID. It is an
// ErrInvalid too.
var ErrInvalidEnvelopeID = fmt.Errorf("%w: an envelope id is a UUID", ErrInvalid)

// ParseEnvelopeID checks an envelope id that came from outside (a URL, a
// caller's submission) and returns its canonical, lower-case form. Every
// envelope id is a UUID (EnvelopeID), and it becomes a token of the
// envelope's subjects: parsing it as what it is first keeps anything else
// (kilobytes of it, separators, wildcards) away from NATS. Only the
// 36-character form is an id; uuid.Parse would also take the braced and
// urn:uuid: forms and bare hex. The refusal never repeats the input.
func ParseEnvelopeID(id string) (string, error) {
	const form = "8-4-4-4-12 hexadecimal digits, e.g. 0192f0c4-7b1e-7a00-8000-000000000001"
	if len(id) != 36 {
		return "", fmt.Errorf("%w (%s); got %d characters", ErrInvalidEnvelopeID, form, len(id))
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return "", fmt.Errorf("%w (%s)", ErrInvalidEnvelopeID, form)
	}
	return u.String(), nil
}

// nlipPartsAAD binds sealed NLIP parts to their envelope and keeps them
// apart from the body sealed for the same envelope.
func nlipPartsAAD(envelopeID string) []byte { return []byte(envelopeID + "\x00nlip") }

// Accepted is ingress's answer to a submission.
type Accepted struct {
	EnvelopeID string
	// Duplicate: the agent had already submitted this idempotency key; no
	// new event was written.
	Duplicate bool
}

// Submit seals the body, sets trust, and appends SendRequested. It returns
// the envelope id; submitting the same idempotency key again is a no-op that
// returns the same id.
func (s *Service) Submit(ctx context.Context, sub Submission) (string, error) {
	a, err := s.Accept(ctx, sub)
	return a.EnvelopeID, err
}

// Accept is Submit that also says whether the submission was a retry.
//
// Each envelope has its own subject, appended with "subject empty" as
// expectation: one event per envelope however late a retry comes. The
// NLIP parts (top-level content, submessages) are sealed like the body.
func (s *Service) Accept(ctx context.Context, sub Submission) (Accepted, error) {
	snd := sub.Sender
	env := proto.CloneOf(sub.Envelope)
	switch {
	case !s.Tenants.Hosts(snd.Tenant):
		return Accepted{}, fmt.Errorf("%w: tenant %q is not hosted by this broker", ErrInvalid, snd.Tenant)
	case snd.PersonID == "" || snd.AgentID == "":
		return Accepted{}, fmt.Errorf("%w: sender person and agent are required", ErrInvalid)
	case env == nil:
		return Accepted{}, fmt.Errorf("%w: no envelope", ErrInvalid)
	case env.GetTo() == "" || env.GetType() == "":
		return Accepted{}, fmt.Errorf("%w: recipient and message type are required", ErrInvalid)
	case env.GetFrom() != "" && alp.NormalizeAddress(strings.TrimPrefix(strings.ToLower(env.GetFrom()), "acct:")) != alp.NormalizeAddress(snd.Address):
		return Accepted{}, fmt.Errorf("%w: the message says it is from %q, but the credential is %s's: the broker writes the sender", ErrSenderMismatch, env.GetFrom(), snd.Address)
	case len(env.GetBody()) == 0 || !json.Valid(env.GetBody()):
		return Accepted{}, fmt.Errorf("%w: body must be a JSON document", ErrInvalid)
	}
	var keyDigest, reqDigest []byte
	switch {
	case sub.IdempotencyKey != "":
		var err error
		if keyDigest, err = s.keyDigest(ctx, snd, sub.IdempotencyKey); err != nil {
			return Accepted{}, err
		}
		if reqDigest, err = s.requestDigest(ctx, snd, env); err != nil {
			return Accepted{}, err
		}
		env.Id = envelopeIDOf(keyDigest)
	case sub.EnvelopeID != "":
		id, err := ParseEnvelopeID(sub.EnvelopeID)
		if err != nil {
			return Accepted{}, err
		}
		env.Id = id
	default:
		env.Id = uuid.Must(uuid.NewV7()).String()
	}
	subject, err := streams.SendSubject(snd.Tenant, snd.PersonID, env.Id)
	if err != nil {
		return Accepted{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if sub.IdempotencyKey != "" {
		if dup, err := s.earlier(ctx, subject, env, reqDigest); dup || err != nil {
			return Accepted{EnvelopeID: env.Id, Duplicate: dup}, err
		}
	}
	hop := envelope.Begin(alpv1.Role_ROLE_INGRESS, "accept")
	if err := hop.SetTrust(snd.Trust, snd.TrustReason); err != nil {
		return Accepted{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if sub.TrustCap != nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED {
		hop.LowerTrust(sub.TrustCap, sub.TrustCapReason)
	}
	env.Tenant = snd.Tenant
	// The broker's clock, not the agent's: the envelope digest both sides'
	// ledgers commit to includes it.
	env.Created = timestamppb.Now()
	env.From = snd.Address
	env.FromAgent = snd.AgentID
	sealed, err := s.Sealer.Seal(ctx, snd.Tenant, snd.PersonID, env.GetBody(), []byte(env.Id))
	if err != nil {
		return Accepted{}, fmt.Errorf("ingress: seal body: %w", err)
	}
	env.SealedBody, env.Body = sealed, nil
	if err := s.sealNLIPParts(ctx, snd, env); err != nil {
		return Accepted{}, err
	}
	hop.End(env)
	if sub.AgentNMP != nil {
		// What Apply ignores the binding already told the agent.
		h, _ := nmp.Apply(envelope.NMP(env), sub.AgentNMP, sub.NMP)
		envelope.SetNMP(env, h)
	}

	ev := s.NewEvent("send_requested", snd.Tenant, nil, env.Id,
		&alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_AGENT, Id: snd.AgentID})
	// The event id follows the envelope id, so a retried submission has the
	// same message id downstream.
	ev.Header.EventId = uuid.NewSHA1(envelopeNamespace, []byte("send_requested\x00"+env.Id)).String()
	ev.Body = &alpv1.Event_SendRequested{SendRequested: &alpv1.SendRequested{
		Envelope: env, SenderPersonId: snd.PersonID,
		IdempotencyKeyDigest: keyDigest, RequestDigest: reqDigest,
	}}
	if err := s.checkSize(snd, ev); err != nil {
		return Accepted{}, err
	}
	if _, err := s.Bus.Append(ctx, subject, 0, ev); err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			// The server's limit is lower than the one checkSize read.
			return Accepted{}, s.tooLarge(snd, ev, proto.Size(ev), 0)
		}
		if errors.Is(err, bus.ErrConflict) {
			// A concurrent retry with the same key won the race.
			dup, err := s.earlier(ctx, subject, env, reqDigest)
			return Accepted{EnvelopeID: env.Id, Duplicate: dup}, err
		}
		return Accepted{}, err
	}
	return Accepted{EnvelopeID: env.Id}, nil
}

// checkSize refuses an event that would not fit in one NATS message with
// the headroom later hops need. Canonical JSON can be much longer than what
// the agent sent (numbers are written out), so only the built event tells.
func (s *Service) checkSize(snd Sender, ev *alpv1.Event) error {
	limit := int(s.Bus.Conn().MaxPayload()) - payloadHeadroom
	if limit <= 0 {
		return nil // not connected yet: the publish will say so
	}
	if n := proto.Size(ev); n > limit {
		return s.tooLarge(snd, ev, n, limit)
	}
	return nil
}

// tooLarge logs the refusal (who and how big, never what) and returns the
// error for the agent.
func (s *Service) tooLarge(snd Sender, ev *alpv1.Event, size, limit int) error {
	s.Logger.Warn("ingress: envelope too large for the bus; refused",
		"tenant", snd.Tenant, "person", snd.PersonID, "agent", snd.AgentID,
		"envelope", ev.GetSendRequested().GetEnvelope().GetId(), "bytes", size, "limit", limit)
	if limit <= 0 {
		return fmt.Errorf("%w: the stored envelope would be %d bytes, over the message bus's payload limit", ErrTooLarge, size)
	}
	return fmt.Errorf("%w: the stored envelope would be %d bytes, over the limit of %d; send a smaller body or fewer parts", ErrTooLarge, size, limit)
}

// earlier reports whether the envelope's subject already holds its
// SendRequested, and refuses a reused key for a different message: another
// recipient or type, or (for events that carry the digest) anything else the
// request digest covers.
func (s *Service) earlier(ctx context.Context, subject string, env *alpv1.Envelope, reqDigest []byte) (bool, error) {
	m, err := s.Bus.LastMessageIn(ctx, streams.Send, subject)
	if err != nil || m == nil {
		return false, err
	}
	ev, err := bus.Decode(m.Data)
	if err != nil {
		return false, fmt.Errorf("ingress: earlier submission of %s: %w", env.GetId(), err)
	}
	sr := ev.GetSendRequested()
	was := sr.GetEnvelope()
	if was.GetTo() != env.GetTo() || was.GetType() != env.GetType() {
		return false, fmt.Errorf("%w: it was sent as %s to %s", ErrIdempotencyKeyReused, was.GetType(), was.GetTo())
	}
	if d := sr.GetRequestDigest(); len(d) > 0 && !hmac.Equal(d, reqDigest) {
		return false, fmt.Errorf("%w: a retry must send the same body and in_reply_to as the first request; use a new key for a new message", ErrIdempotencyBodyDiffers)
	}
	return true, nil
}

// sealNLIPParts moves the NLIP content and submessages (what the agent
// said besides the typed body) under the sender's data key.
func (s *Service) sealNLIPParts(ctx context.Context, snd Sender, env *alpv1.Envelope) error {
	h := envelope.NLIP(env)
	if h == nil || h.GetParts() == nil {
		return nil
	}
	raw, err := proto.Marshal(h.GetParts())
	if err != nil {
		return fmt.Errorf("ingress: encode NLIP parts: %w", err)
	}
	sealed, err := s.Sealer.Seal(ctx, snd.Tenant, snd.PersonID, raw, nlipPartsAAD(env.GetId()))
	if err != nil {
		return fmt.Errorf("ingress: seal NLIP parts: %w", err)
	}
	h = proto.CloneOf(h)
	h.Parts, h.SealedParts = nil, sealed
	envelope.SetNLIP(env, h)
	return nil
}
