// Package storage keeps the approvals service's state: every item of every
// hosted person and their standing rules, projected from the approvals
// stream into memory (internal/projection), and the commands that change it
// as appends with the expected last subject sequence, so that two replicas
// (or two clicks) can never both decide one item: the first decision wins.
package storage

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/projection"
	"github.com/alpd-project/alpd/internal/seal"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/approvals/items"
)

// Expiry says how long each kind of item waits for its person, and how
// long a standing rule lasts.
type Expiry struct {
	ConnectionRequest  time.Duration
	Commitment         time.Duration
	ConfidentialFields time.Duration
	StandingRule       time.Duration
}

// DefaultExpiry: a stranger's request waits a week (people answer those
// when they get to them), a commitment and a held field a day (they are
// part of an exchange that goes stale), a standing rule 90 days.
var DefaultExpiry = Expiry{
	ConnectionRequest:  7 * 24 * time.Hour,
	Commitment:         24 * time.Hour,
	ConfidentialFields: 24 * time.Hour,
	StandingRule:       90 * 24 * time.Hour,
}

func (e Expiry) complete() Expiry {
	d := DefaultExpiry
	for _, p := range []struct{ v, def *time.Duration }{
		{&e.ConnectionRequest, &d.ConnectionRequest}, {&e.Commitment, &d.Commitment},
		{&e.ConfidentialFields, &d.ConfidentialFields}, {&e.StandingRule, &d.StandingRule},
	} {
		if *p.v <= 0 {
			*p.v = *p.def
		}
	}
	return e
}

func (e Expiry) of(k items.Kind) time.Duration {
	switch k {
	case items.ConnectionRequest:
		return e.ConnectionRequest
	case items.Commitment:
		return e.Commitment
	}
	return e.ConfidentialFields
}

// Config is what a Store needs.
type Config struct {
	Bus     *bus.Bus
	Sealer  *seal.Sealer
	Tenants []string
	Expiry  Expiry
	Log     *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Store implements items.Store over the approvals stream.
type Store struct {
	cfg Config
	f   *projection.Follower
	log *slog.Logger

	// Guarded by f's lock (apply runs under the write lock).
	items map[key]*entry
	rules map[key]*items.StandingRule
	// byPerson lists each person's item ids in arrival order.
	byPerson map[personKey][]string
	rulesOf  map[personKey][]string

	// policy follows policy's connections: a connection request answered
	// on the connections page (not here) leaves its item nothing to decide.
	policy *projection.Follower
	// Guarded by policy's lock: the envelope of each connection's request,
	// and how each request envelope was answered.
	requestOf map[string]string
	answered  map[string]string
	// answers wakes the sweep when a request is answered.
	answers chan struct{}
}

type key struct{ tenant, person, id string }
type personKey struct{ tenant, person string }

type entry struct {
	items.Item
	subject string
}

// Open follows the approvals stream of the tenants; it answers once the
// projection caught up.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Bus == nil {
		return nil, errors.New("approvals storage: no bus")
	}
	if err := alp.ValidateTenants(cfg.Tenants); err != nil {
		return nil, fmt.Errorf("approvals storage: %w", err)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Expiry = cfg.Expiry.complete()
	s := &Store{cfg: cfg, log: cfg.Log.With("component", "approvals-store"),
		items: map[key]*entry{}, rules: map[key]*items.StandingRule{},
		byPerson: map[personKey][]string{}, rulesOf: map[personKey][]string{},
		requestOf: map[string]string{}, answered: map[string]string{}, answers: make(chan struct{}, 1)}
	var filters []string
	table, _ := streams.ByName(streams.Approvals)
	for _, t := range cfg.Tenants {
		filters = append(filters, streams.TenantFilter(table.Kind, t))
	}
	f, err := projection.Open(ctx, cfg.Bus, projection.Config{
		Stream: streams.Approvals, Filters: filters, Apply: s.apply, Name: "approvals", Log: s.log,
	})
	if err != nil {
		return nil, fmt.Errorf("approvals storage: %w", err)
	}
	s.f = f
	var conns []string
	for _, t := range cfg.Tenants {
		conns = append(conns, streams.PolicyAggregateFilter(t, streams.PolicyConnection))
	}
	if s.policy, err = projection.Open(ctx, cfg.Bus, projection.Config{
		Stream: streams.Policy, Filters: conns, Apply: s.applyConnection, Name: "approvals_conns", Log: s.log,
	}); err != nil {
		f.Close()
		return nil, fmt.Errorf("approvals storage: policy's connections: %w", err)
	}
	return s, nil
}

// Close stops following the streams.
func (s *Store) Close() {
	s.f.Close()
	s.policy.Close()
}

// Fresh reports whether the projections are no staler than maxStaleness.
func (s *Store) Fresh(maxStaleness time.Duration) error {
	return errors.Join(s.f.Fresh(maxStaleness), s.policy.Fresh(maxStaleness))
}

// Answers is signalled when a connection request is answered on policy's
// side: the sweep then cancels its item.
func (s *Store) Answers() <-chan struct{} { return s.answers }

func (s *Store) applyConnection(_ string, _ uint64, ev *alpv1.Event) error {
	answer := ""
	var id string
	switch b := ev.GetBody().(type) {
	case *alpv1.Event_ConnectionRequested:
		if env := b.ConnectionRequested.GetEnvelopeId(); env != "" {
			s.requestOf[b.ConnectionRequested.GetConnectionId()] = env
		}
		return nil
	case *alpv1.Event_ConnectionAccepted:
		answer, id = "accepted", b.ConnectionAccepted.GetConnectionId()
	case *alpv1.Event_ConnectionDeclined:
		answer, id = "declined", b.ConnectionDeclined.GetConnectionId()
	default:
		return nil
	}
	if env, ok := s.requestOf[id]; ok {
		s.answered[env] = answer
		select {
		case s.answers <- struct{}{}:
		default:
		}
	}
	return nil
}

// answerOf is how the connection request of envelope was answered, "" if
// it was not.
func (s *Store) answerOf(envelopeID string) string {
	s.policy.RLock()
	defer s.policy.RUnlock()
	return s.answered[envelopeID]
}

func (s *Store) apply(subject string, _ uint64, ev *alpv1.Event) error {
	tenant := ev.GetHeader().GetTenant()
	switch b := ev.GetBody().(type) {
	case *alpv1.Event_ApprovalRequested:
		r := b.ApprovalRequested
		k := key{tenant, r.GetPersonId(), r.GetItemId()}
		if _, ok := s.items[k]; ok {
			return nil
		}
		s.items[k] = &entry{Item: itemOf(tenant, r), subject: subject}
		pk := personKey{tenant, r.GetPersonId()}
		s.byPerson[pk] = append(s.byPerson[pk], r.GetItemId())
	case *alpv1.Event_ApprovalDecided:
		d := b.ApprovalDecided
		e, ok := s.items[key{tenant, d.GetPersonId(), d.GetItemId()}]
		if !ok {
			return fmt.Errorf("a decision on %s, which was never requested", d.GetItemId())
		}
		if e.State.Terminal() {
			return fmt.Errorf("a second decision on %s (already %s)", d.GetItemId(), e.State)
		}
		e.State = stateOf(d.GetState())
		e.Decided = ev.GetHeader().GetOccurred().AsTime()
		e.StandingRuleID, e.SupersededBy, e.DecisionReason = d.GetStandingRuleId(), d.GetSupersededBy(), d.GetReason()
	case *alpv1.Event_StandingRuleCreated:
		r := b.StandingRuleCreated
		k := key{tenant, r.GetPersonId(), r.GetRuleId()}
		if _, ok := s.rules[k]; ok {
			return nil
		}
		s.rules[k] = &items.StandingRule{ID: r.GetRuleId(), Type: r.GetType(), Counterparty: r.GetCounterparty(), Action: r.GetAction(),
			Created: ev.GetHeader().GetOccurred().AsTime(), Expires: r.GetExpires().AsTime(), FromItem: r.GetFromItemId()}
		pk := personKey{tenant, r.GetPersonId()}
		s.rulesOf[pk] = append(s.rulesOf[pk], r.GetRuleId())
	case *alpv1.Event_StandingRuleRevoked:
		r := b.StandingRuleRevoked
		if rule, ok := s.rules[key{tenant, r.GetPersonId(), r.GetRuleId()}]; ok {
			rule.Revoked = true
		}
	}
	return nil
}

func itemOf(tenant string, r *alpv1.ApprovalRequested) items.Item {
	it := items.Item{
		ID: r.GetItemId(), Tenant: tenant, PersonID: r.GetPersonId(), Kind: kindOf(r.GetKind()), State: items.Pending,
		EnvelopeID: r.GetEnvelopeId(), From: r.GetFrom(), FromAgent: r.GetFromAgent(), AgentName: r.GetAgentName(),
		AgentClass: r.GetAgentClass(), Attested: r.GetAttested(), Verification: r.GetVerification(), OriginBroker: r.GetOriginBroker(),
		Type: r.GetType(), InReplyTo: r.GetInReplyTo(), Commits: r.GetCommits(),
		PayloadDigest: r.GetPayloadDigest(), BindingCode: r.GetBindingCode(),
		Created: r.GetCreated().AsTime(), Expires: r.GetExpires().AsTime(), Payload: r.GetPayload(),
		Disclosed: []items.Field{}, Reasons: []items.Reason{},
	}
	for _, f := range r.GetDisclosed() {
		it.Disclosed = append(it.Disclosed, items.Field{Pointer: f.GetPointer(), Class: f.GetClass()})
	}
	for _, x := range r.GetReasons() {
		it.Reasons = append(it.Reasons, items.Reason{Party: x.GetParty(), Rule: x.GetRule(), Code: x.GetCode(), Message: x.GetMessage()})
	}
	return it
}

// KindOf and its inverse map the held kinds of policy to the items' names.
func kindOf(k alpv1.HeldKind) items.Kind {
	switch k {
	case alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST:
		return items.ConnectionRequest
	case alpv1.HeldKind_HELD_KIND_COMMITMENT:
		return items.Commitment
	}
	return items.ConfidentialFields
}

func heldKind(k items.Kind) alpv1.HeldKind {
	switch k {
	case items.ConnectionRequest:
		return alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST
	case items.Commitment:
		return alpv1.HeldKind_HELD_KIND_COMMITMENT
	}
	return alpv1.HeldKind_HELD_KIND_CONFIDENTIAL_FIELDS
}

var states = map[alpv1.ApprovalState]items.State{
	alpv1.ApprovalState_APPROVAL_STATE_PENDING:         items.Pending,
	alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ONCE:   items.ApprovedOnce,
	alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ALWAYS: items.ApprovedAlways,
	alpv1.ApprovalState_APPROVAL_STATE_DENIED:          items.Denied,
	alpv1.ApprovalState_APPROVAL_STATE_EXPIRED:         items.Expired,
	alpv1.ApprovalState_APPROVAL_STATE_SUPERSEDED:      items.Superseded,
	alpv1.ApprovalState_APPROVAL_STATE_CANCELLED:       items.Cancelled,
}

func stateOf(s alpv1.ApprovalState) items.State {
	if st, ok := states[s]; ok {
		return st
	}
	return items.Cancelled
}

func stateProto(s items.State) alpv1.ApprovalState {
	for k, v := range states {
		if v == s {
			return k
		}
	}
	return alpv1.ApprovalState_APPROVAL_STATE_UNSPECIFIED
}

// List implements items.Store.
func (s *Store) List(_ context.Context, tenant, personID string) ([]items.Item, error) {
	s.f.RLock()
	ids := s.byPerson[personKey{tenant, personID}]
	out := make([]items.Item, 0, len(ids))
	for _, id := range ids {
		out = append(out, s.items[key{tenant, personID, id}].Item)
	}
	s.f.RUnlock()
	slices.SortStableFunc(out, func(a, b items.Item) int {
		if (a.State == items.Pending) != (b.State == items.Pending) {
			if a.State == items.Pending {
				return -1
			}
			return 1
		}
		return b.Created.Compare(a.Created)
	})
	return out, nil
}

// Get implements items.Store.
func (s *Store) Get(_ context.Context, tenant, personID, id string) (items.Item, error) {
	s.f.RLock()
	defer s.f.RUnlock()
	e, ok := s.items[key{tenant, personID, id}]
	if !ok {
		return items.Item{}, fmt.Errorf("%w: %s", items.ErrNotFound, id)
	}
	return e.Item, nil
}

// Pending is every pending item of every person, for the expiry sweep and
// the notifications' digest.
func (s *Store) Pending() []items.Item {
	s.f.RLock()
	defer s.f.RUnlock()
	var out []items.Item
	for _, e := range s.items {
		if e.State == items.Pending {
			out = append(out, e.Item)
		}
	}
	return out
}

// Rules implements items.Store.
func (s *Store) Rules(_ context.Context, tenant, personID string) ([]items.StandingRule, error) {
	now := s.cfg.Now()
	s.f.RLock()
	var out []items.StandingRule
	for _, id := range s.rulesOf[personKey{tenant, personID}] {
		out = append(out, *s.rules[key{tenant, personID, id}])
	}
	s.f.RUnlock()
	slices.SortStableFunc(out, func(a, b items.StandingRule) int {
		if a.Active(now) != b.Active(now) {
			if a.Active(now) {
				return -1
			}
			return 1
		}
		return b.Created.Compare(a.Created)
	})
	return out, nil
}

// newEvent is an approvals event.
func newEvent(kind, tenant, correlation string, cause *alpv1.Event, actor *alpv1.Actor, now time.Time) *alpv1.Event {
	h := &alpv1.EventHeader{Type: kind, SchemaVersion: 1, EventId: uuid.Must(uuid.NewV7()).String(), CorrelationId: correlation,
		Actor: actor, Tenant: tenant, ProducerRole: alpv1.Role_ROLE_APPROVALS, Occurred: timestamppb.New(now)}
	if cause != nil {
		h.CausationId = cause.GetHeader().GetEventId()
	}
	return &alpv1.Event{Header: h}
}

// PayloadDigest binds a decision to exactly what the person saw: the kind,
// the envelope, the item and the held values' exact bytes.
func PayloadDigest(kind items.Kind, envelopeID, itemID string, payload []byte) string {
	h := sha256.New()
	for _, p := range []string{"alpd/approval/v1", string(kind), envelopeID, itemID} {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	h.Write(payload)
	return hex.EncodeToString(h.Sum(nil))
}

// codeAlphabet leaves out letters and digits people confuse (0/O, 1/I/L).
var codeAlphabet = base32.NewEncoding("ABCDEFGHJKMNPQRSTUVWXYZ23456789*").WithPadding(base32.NoPadding)

// BindingCode is the short code the page and the sending agent both show:
// derived from the payload digest, so it names exactly one request.
func BindingCode(payloadDigest string) string {
	sum := sha256.Sum256([]byte("alpd/binding-code/v1\x00" + payloadDigest))
	c := strings.ReplaceAll(codeAlphabet.EncodeToString(sum[:5]), "*", "Z")
	return c[:4] + "-" + c[4:8]
}

// personActor is the person deciding.
func personActor(by items.Actor) *alpv1.Actor {
	return &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_PERSON, Id: by.PersonID}
}

func serviceActor() *alpv1.Actor {
	return &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_SERVICE, Id: "approvals"}
}
