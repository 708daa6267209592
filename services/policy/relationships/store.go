package relationships

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/projection"
	"github.com/alpd-project/alpd/internal/streams"
)

// maxAttempts bounds a command's decide–append rounds on conflicts.
const maxAttempts = 5

// DefaultMaxStaleness is how stale a replica's projection may be before
// it stops deciding (readiness): a healthy reader confirms about every
// second.
const DefaultMaxStaleness = 10 * time.Second

// Store is a replica of the relationships of some tenants. Safe for
// concurrent use.
type Store struct {
	b       *bus.Bus
	f       *projection.Follower
	log     *slog.Logger
	tenants map[string]*tenantState // guarded by f's lock

	// beforeCommit, in tests, runs before each append (to make another
	// writer win a race).
	beforeCommit func(subject string)
}

type tenantState struct {
	conns  map[string]*Connection
	blocks map[string]map[Target]bool // by blocking person
	org    map[string]OrgRule         // active rules by id
}

// Open builds the projection of tenants' relationships from the policy
// stream of b's broker and keeps following it until Close. The stream
// must exist (the policy service creates it with its other streams).
func Open(ctx context.Context, b *bus.Bus, tenants []string, log *slog.Logger) (*Store, error) {
	if b == nil {
		return nil, invalid("bus", "nil")
	}
	if len(tenants) == 0 {
		return nil, invalid("tenants", "at least one is required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{b: b, log: log.With("component", "relationships"), tenants: map[string]*tenantState{}}
	if err := alp.ValidateTenants(tenants); err != nil {
		return nil, invalid("tenants", "%v", err)
	}
	var filters []string
	for _, t := range tenants {
		s.tenants[t] = &tenantState{conns: map[string]*Connection{}, blocks: map[string]map[Target]bool{}, org: map[string]OrgRule{}}
		for _, agg := range []string{streams.PolicyConnection, streams.PolicyBlocks, streams.PolicyOrgRule} {
			filters = append(filters, streams.PolicyAggregateFilter(t, agg))
		}
	}
	f, err := projection.Open(ctx, b, projection.Config{
		Stream: streams.Policy, Filters: filters, Apply: s.apply, Name: "relstore", Log: s.log,
	})
	if err != nil {
		return nil, fmt.Errorf("relationships: %w", err)
	}
	s.f = f
	return s, nil
}

// Close stops following the stream. Queries keep answering from the last
// state; Fresh and commands return projection.ErrClosed.
func (s *Store) Close() { s.f.Close() }

// Fresh returns nil only if the projection confirmed within maxStaleness
// that it had applied everything on the stream (see internal/projection),
// projection.ErrStale otherwise: a replica is not ready, and must not
// decide, while it fails.
func (s *Store) Fresh(maxStaleness time.Duration) error { return s.f.Fresh(maxStaleness) }

// Applied is the stream sequence of the last event applied.
func (s *Store) Applied() uint64 { return s.f.Applied() }

func (s *Store) state(tenant string) (*tenantState, error) {
	ts := s.tenants[tenant]
	if ts == nil {
		return nil, fmt.Errorf("%w: %q", ErrNotHosted, tenant)
	}
	return ts, nil
}

func (s *Store) command(tenant string) (*tenantState, error) {
	if s.f.Closed() {
		return nil, projection.ErrClosed
	}
	return s.state(tenant)
}

func subject(tenant, aggregate, id string) string {
	// Tenants are validated, ids are hashes or validated person ids, so
	// the subject is always well formed.
	subj, err := streams.PolicySubject(tenant, aggregate, id)
	if err != nil {
		panic(fmt.Sprintf("relationships: %v", err))
	}
	return subj
}

func newEvent(kind, tenant, correlation string, by *alpv1.Actor) *alpv1.Event {
	return &alpv1.Event{Header: &alpv1.EventHeader{
		Type:          kind,
		SchemaVersion: 1,
		EventId:       uuid.Must(uuid.NewV7()).String(),
		CorrelationId: correlation,
		Actor:         by,
		Tenant:        tenant,
		ProducerRole:  alpv1.Role_ROLE_POLICY,
		Occurred:      timestamppb.Now(),
	}}
}

func personActor(id string) *alpv1.Actor {
	return &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_PERSON, Id: id}
}

// decide runs round (read the projection and the subject's version,
// decide, append) until it does not conflict with another writer; after a
// conflict it waits for the winner's event and decides again. round
// returns a nil event when there is nothing to append.
func (s *Store) decide(ctx context.Context, subj, what string, round func() (*alpv1.Event, error)) error {
	for attempt := 1; ; attempt++ {
		s.f.RLock()
		version := s.f.Version(subj)
		ev, err := round()
		s.f.RUnlock()
		if err != nil || ev == nil {
			return err
		}
		if s.beforeCommit != nil {
			s.beforeCommit(subj)
		}
		seq, err := s.b.Append(ctx, subj, version, ev)
		if err == nil {
			if err := s.f.WaitApplied(ctx, seq); err != nil {
				return fmt.Errorf("relationships: %s stored at %d but not yet applied: %w", what, seq, err)
			}
			return nil
		}
		if !errors.Is(err, bus.ErrConflict) {
			return fmt.Errorf("relationships: %s: %w", what, err)
		}
		if attempt == maxAttempts {
			return fmt.Errorf("relationships: %s: still conflicting after %d attempts: %w", what, attempt, err)
		}
		if err := s.f.WaitSubject(ctx, subj); err != nil {
			return fmt.Errorf("relationships: %s: reload after conflict: %w", what, err)
		}
	}
}

// blockedBy reports whether person blocked party (its person, address or
// the address's domain). Call under the lock.
func (ts *tenantState) blockedBy(tenant, person string, p Party) bool {
	bl := ts.blocks[person]
	if len(bl) == 0 {
		return false
	}
	if p.Person != "" && bl[Target{TargetPerson, p.Person}] {
		return true
	}
	if p.Address != "" && bl[Target{TargetAddress, p.Address}] {
		return true
	}
	if d := domainOf(tenant, p); d != "" && p.Address != "" && bl[Target{TargetDomain, d}] {
		return true
	}
	return false
}

// Request records from's request to connect with person to (a
// connection.request/v1 message, envelopeID naming it, or a person's own
// request). It answers the connection as it now stands: requested (also
// when it already was), or accepted when to had asked from first (two
// people of the tenant asking each other are connected). A request to
// someone who declined the asker is refused with ErrDeclined, one to
// someone who blocked them with ErrBlocked; neither appends anything.
func (s *Store) Request(ctx context.Context, tenant string, from Party, to, envelopeID string) (Connection, error) {
	ts, err := s.command(tenant)
	if err != nil {
		return Connection{}, err
	}
	if from, err = checkParty("from", from); err != nil {
		return Connection{}, err
	}
	if err := checkPerson("to", to); err != nil {
		return Connection{}, err
	}
	if from.Person == to {
		return Connection{}, invalid("to", "a person cannot connect with themselves")
	}
	if envelopeID != "" && len(envelopeID) > 128 {
		return Connection{}, invalid("envelope_id", "at most 128 characters")
	}
	id := ConnectionID(tenant, from, to)
	var out Connection
	err = s.decide(ctx, subject(tenant, streams.PolicyConnection, id), "request connection", func() (*alpv1.Event, error) {
		if ts.blockedBy(tenant, to, from) {
			return nil, fmt.Errorf("%w: %s by %s", ErrBlocked, from, to)
		}
		c := ts.conns[id]
		switch {
		case c == nil:
			ev := newEvent("connection_requested", tenant, id, personOrService(from))
			ev.Body = &alpv1.Event_ConnectionRequested{ConnectionRequested: &alpv1.ConnectionRequested{
				Tenant: tenant, ConnectionId: id, FromPerson: from.Person, FromAddress: from.Address,
				ToPerson: to, EnvelopeId: envelopeID,
			}}
			return ev, nil
		case c.State == ConnDeclined:
			return nil, fmt.Errorf("%w: %s declined %s", ErrDeclined, c.To, c.From)
		case c.State == ConnRequested && from.Person != "" && c.To == from.Person:
			// The person asked asks back: that is their yes.
			return acceptEvent(tenant, id, from.Person), nil
		default:
			out = *c
			return nil, nil
		}
	})
	if err != nil || out.ID != "" {
		return out, err
	}
	return s.Connection(tenant, id)
}

// personOrService is the actor of a request: the asking person, or the
// policy service acting on a remote party's message.
func personOrService(p Party) *alpv1.Actor {
	if p.Person != "" {
		return personActor(p.Person)
	}
	return &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_SERVICE, Id: "policy"}
}

func acceptEvent(tenant, id, by string) *alpv1.Event {
	ev := newEvent("connection_accepted", tenant, id, personActor(by))
	ev.Body = &alpv1.Event_ConnectionAccepted{ConnectionAccepted: &alpv1.ConnectionAccepted{Tenant: tenant, ConnectionId: id, ByPerson: by}}
	return ev
}

// Accept is person's yes to connection id, which must be requested of
// them (ErrNotFound for anyone else's, ErrState once declined). Accepting
// an accepted connection changes nothing.
func (s *Store) Accept(ctx context.Context, tenant, person, id string) (Connection, error) {
	return s.answer(ctx, tenant, person, id, ConnAccepted)
}

// Decline is person's no to connection id, which must be requested of
// them (ErrNotFound for anyone else's, ErrState once accepted). Declining
// a declined connection changes nothing.
func (s *Store) Decline(ctx context.Context, tenant, person, id string) (Connection, error) {
	return s.answer(ctx, tenant, person, id, ConnDeclined)
}

func (s *Store) answer(ctx context.Context, tenant, person, id string, to ConnState) (Connection, error) {
	ts, err := s.command(tenant)
	if err != nil {
		return Connection{}, err
	}
	if err := checkPerson("person", person); err != nil {
		return Connection{}, err
	}
	if err := bus.CheckToken(id); err != nil {
		return Connection{}, fmt.Errorf("%w: connection %q", ErrNotFound, id)
	}
	err = s.decide(ctx, subject(tenant, streams.PolicyConnection, id), "answer connection", func() (*alpv1.Event, error) {
		c := ts.conns[id]
		if c == nil || c.To != person {
			return nil, fmt.Errorf("%w: connection %q", ErrNotFound, id)
		}
		switch c.State {
		case to:
			return nil, nil
		case ConnRequested:
		default:
			return nil, fmt.Errorf("%w: connection %s is %s", ErrState, id, c.State)
		}
		if to == ConnAccepted {
			return acceptEvent(tenant, id, person), nil
		}
		ev := newEvent("connection_declined", tenant, id, personActor(person))
		ev.Body = &alpv1.Event_ConnectionDeclined{ConnectionDeclined: &alpv1.ConnectionDeclined{Tenant: tenant, ConnectionId: id, ByPerson: person}}
		return ev, nil
	})
	if err != nil {
		return Connection{}, err
	}
	return s.Connection(tenant, id)
}

func targetProto(t Target) *alpv1.Blocked {
	switch t.Kind {
	case TargetPerson:
		return &alpv1.Blocked{Target: &alpv1.Blocked_Person{Person: t.Value}}
	case TargetAddress:
		return &alpv1.Blocked{Target: &alpv1.Blocked_Address{Address: t.Value}}
	default:
		return &alpv1.Blocked{Target: &alpv1.Blocked_Domain{Domain: t.Value}}
	}
}

func targetOf(b *alpv1.Blocked) (Target, bool) {
	switch t := b.GetTarget().(type) {
	case *alpv1.Blocked_Person:
		return Target{TargetPerson, t.Person}, true
	case *alpv1.Blocked_Address:
		return Target{TargetAddress, t.Address}, true
	case *alpv1.Blocked_Domain:
		return Target{TargetDomain, t.Domain}, true
	}
	return Target{}, false
}

// Block puts target on person's block list (from any state of any
// connection: nothing from them reaches the person while it stands).
// Blocking a blocked target changes nothing.
func (s *Store) Block(ctx context.Context, tenant, person string, target Target) error {
	return s.setBlock(ctx, tenant, person, target, true)
}

// Unblock takes target off person's block list; what the connection was
// before counts again. Unblocking what is not blocked changes nothing.
func (s *Store) Unblock(ctx context.Context, tenant, person string, target Target) error {
	return s.setBlock(ctx, tenant, person, target, false)
}

// BlockConnection blocks the other party of connection id, one of
// person's (asked or asking), whatever its state, and answers it.
func (s *Store) BlockConnection(ctx context.Context, tenant, person, id string) (Target, error) {
	c, err := s.Connection(tenant, id)
	if err != nil {
		return Target{}, err
	}
	if c.To != person && c.From.Person != person {
		return Target{}, fmt.Errorf("%w: connection %q", ErrNotFound, id)
	}
	other := c.Other(person)
	t := Target{TargetPerson, other.Person}
	if other.Person == "" {
		t = Target{TargetAddress, other.Address}
	}
	return t, s.Block(ctx, tenant, person, t)
}

func (s *Store) setBlock(ctx context.Context, tenant, person string, target Target, on bool) error {
	ts, err := s.command(tenant)
	if err != nil {
		return err
	}
	if err := checkPerson("person", person); err != nil {
		return err
	}
	if target, err = checkTarget(target); err != nil {
		return err
	}
	if target.Kind == TargetPerson && target.Value == person {
		return invalid("value", "a person cannot block themselves")
	}
	return s.decide(ctx, subject(tenant, streams.PolicyBlocks, person), "block", func() (*alpv1.Event, error) {
		if ts.blocks[person][target] == on {
			return nil, nil
		}
		if on {
			ev := newEvent("person_blocked", tenant, person, personActor(person))
			ev.Body = &alpv1.Event_PersonBlocked{PersonBlocked: &alpv1.PersonBlocked{Tenant: tenant, ByPerson: person, Blocked: targetProto(target)}}
			return ev, nil
		}
		ev := newEvent("person_unblocked", tenant, person, personActor(person))
		ev.Body = &alpv1.Event_PersonUnblocked{PersonUnblocked: &alpv1.PersonUnblocked{Tenant: tenant, ByPerson: person, Blocked: targetProto(target)}}
		return ev, nil
	})
}

// SetOrgRule makes rule of tenant active (with its commits) or lifts it,
// on behalf of by (an admin or operator; the event's actor). Setting a
// rule to what it is changes nothing; setting an active rule's other
// commits is a new event of the same rule.
func (s *Store) SetOrgRule(ctx context.Context, tenant string, rule OrgRule, active bool, by *alpv1.Actor) error {
	ts, err := s.command(tenant)
	if err != nil {
		return err
	}
	if rule, err = CheckOrgRule(rule); err != nil {
		return err
	}
	if by.GetId() == "" || by.GetKind() == alpv1.ActorKind_ACTOR_KIND_UNSPECIFIED {
		return invalid("by", "an actor with kind and id is required")
	}
	id := OrgRuleID(tenant, rule)
	return s.decide(ctx, subject(tenant, streams.PolicyOrgRule, id), "set org rule", func() (*alpv1.Event, error) {
		if cur, on := ts.org[id]; on == active && (!active || slices.Equal(cur.Commits, rule.Commits)) {
			return nil, nil
		}
		set := &alpv1.OrgRelationshipSet{Tenant: tenant, RuleId: id, Active: active}
		if active {
			set.Commits = rule.Commits
		}
		switch rule.Kind {
		case SameOrg:
			set.Rule = &alpv1.OrgRelationshipSet_SameOrg{SameOrg: &alpv1.SameOrg{}}
		case RoleMayReceiveFrom:
			set.Rule = &alpv1.OrgRelationshipSet_RoleMayReceiveFrom{RoleMayReceiveFrom: &alpv1.RoleMayReceiveFrom{Role: rule.Role, Domain: rule.Domain}}
		}
		ev := newEvent("org_relationship_set", tenant, id, by)
		ev.Body = &alpv1.Event_OrgRelationshipSet{OrgRelationshipSet: set}
		return ev, nil
	})
}

// Relationship is what from is to person to of tenant, whose roles are
// toRoles (for role_may_receive_from), in the order of the package doc:
// blocked, connected, org_preapproved, requested, declined, stranger.
func (s *Store) Relationship(tenant string, from Party, to string, toRoles []string) (State, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return "", err
	}
	if from, err = checkQueryParty("from", from); err != nil {
		return "", err
	}
	if err := checkPerson("to", to); err != nil {
		return "", err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	if ts.blockedBy(tenant, to, from) {
		return Blocked, nil
	}
	var c *Connection
	if from.Person != "" {
		c = ts.conns[ConnectionID(tenant, Party{Person: from.Person}, to)]
	} else {
		c = ts.conns[ConnectionID(tenant, from, to)]
	}
	if c != nil && c.State == ConnAccepted {
		return Connected, nil
	}
	domain := domainOf(tenant, from)
	for _, r := range ts.org {
		if r.covers(from, to, domain, toRoles) {
			return OrgPreapproved, nil
		}
	}
	if c != nil && c.State == ConnRequested {
		return Requested, nil
	}
	if c != nil && c.State == ConnDeclined {
		return Declined, nil
	}
	return Stranger, nil
}

// Connection is connection id of tenant.
func (s *Store) Connection(tenant, id string) (Connection, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return Connection{}, err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	c := ts.conns[id]
	if c == nil {
		return Connection{}, fmt.Errorf("%w: connection %q", ErrNotFound, id)
	}
	return *c, nil
}

// Pending are the requests waiting for person's answer, oldest first,
// without those from parties the person blocked.
func (s *Store) Pending(tenant, person string) ([]Connection, error) {
	return s.list(tenant, person, func(ts *tenantState, c *Connection) bool {
		return c.To == person && c.State == ConnRequested && !ts.blockedBy(tenant, person, c.From)
	})
}

// Connections are every connection person is part of (asked or asking),
// oldest first.
func (s *Store) Connections(tenant, person string) ([]Connection, error) {
	return s.list(tenant, person, func(_ *tenantState, c *Connection) bool {
		return c.To == person || c.From.Person == person
	})
}

func (s *Store) list(tenant, person string, keep func(*tenantState, *Connection) bool) ([]Connection, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return nil, err
	}
	if err := checkPerson("person", person); err != nil {
		return nil, err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	// A scan: a tenant's connections are few enough per replica; an index
	// by person is the next step if they are not.
	var out []Connection
	for _, c := range ts.conns {
		if keep(ts, c) {
			out = append(out, *c)
		}
	}
	slices.SortFunc(out, func(a, b Connection) int {
		return cmp.Or(a.Requested.Compare(b.Requested), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Blocks is person's block list, sorted.
func (s *Store) Blocks(tenant, person string) ([]Target, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return nil, err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	var out []Target
	for t := range ts.blocks[person] {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Target) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Value, b.Value)) })
	return out, nil
}

// OrgRules are tenant's active rules, sorted by id.
func (s *Store) OrgRules(tenant string) ([]OrgRule, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return nil, err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	ids := make([]string, 0, len(ts.org))
	for id := range ts.org {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]OrgRule, len(ids))
	for i, id := range ids {
		out[i] = ts.org[id]
	}
	return out, nil
}

// BlockedBy reports whether person blocked party (its person, its address
// or the address's domain).
func (s *Store) BlockedBy(tenant, person string, p Party) (bool, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return false, err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	return ts.blockedBy(tenant, person, p), nil
}

// covers reports whether r pre-approves from (at domain) reaching to, who
// has toRoles.
func (r OrgRule) covers(from Party, to, domain string, toRoles []string) bool {
	switch r.Kind {
	case SameOrg:
		return from.Person != "" && from.Person != to
	case RoleMayReceiveFrom:
		return r.Domain == domain && slices.Contains(toRoles, r.Role)
	}
	return false
}

// OrgCover is an active organization rule that covers a pair and the
// commit actions it pre-approves between them.
type OrgCover struct {
	RuleID  string   `json:"rule_id"`
	Commits []string `json:"commits"`
}

// OrgCommits are the active organization rules of tenant that cover from
// reaching person to (whose roles are toRoles) and pre-approve commit
// actions, sorted by rule id; none when to blocked from. They count
// whatever else the two are to each other: a connection does not take
// away what the organization pre-approved.
func (s *Store) OrgCommits(tenant string, from Party, to string, toRoles []string) ([]OrgCover, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return nil, err
	}
	if from, err = checkQueryParty("from", from); err != nil {
		return nil, err
	}
	if err := checkPerson("to", to); err != nil {
		return nil, err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	if ts.blockedBy(tenant, to, from) {
		return nil, nil
	}
	domain := domainOf(tenant, from)
	var out []OrgCover
	for id, r := range ts.org {
		if len(r.Commits) > 0 && r.covers(from, to, domain, toRoles) {
			out = append(out, OrgCover{RuleID: id, Commits: slices.Clone(r.Commits)})
		}
	}
	slices.SortFunc(out, func(a, b OrgCover) int { return cmp.Compare(a.RuleID, b.RuleID) })
	return out, nil
}

// RequestOf is the connection asked of person whose request came with
// envelope id (a connection.request/v1 message), ErrNotFound when there
// is none. A connection remembers the envelope of its first request: a
// later request of the same pair names its own envelope, so a caller that
// knows the asker also looks the pair up (ConnectionID).
func (s *Store) RequestOf(tenant, person, envelopeID string) (Connection, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return Connection{}, err
	}
	if err := checkPerson("person", person); err != nil {
		return Connection{}, err
	}
	if envelopeID == "" {
		return Connection{}, invalid("envelope_id", "required")
	}
	s.f.RLock()
	defer s.f.RUnlock()
	for _, c := range ts.conns {
		if c.To == person && c.EnvelopeID == envelopeID {
			return *c, nil
		}
	}
	return Connection{}, fmt.Errorf("%w: no connection requested of %s by envelope %q", ErrNotFound, person, envelopeID)
}

// AcceptedByRemote records that remote, an address at another broker,
// accepted person's request to connect (person's connection.request/v1,
// envelope request, which the caller verified person sent to remote).
// The request was decided at remote's broker, so nothing of it is here;
// it is recorded as the two events the state machine already has, in the
// way two people of a tenant asking each other connect: remote's answer
// is remote asking person (envelope request, the request it answers), and
// person's own earlier request is person's yes. A connection already
// accepted changes nothing; one person declined is refused with
// ErrDeclined, and one from a party person blocked with ErrBlocked
// (nothing appended). A request of remote's still waiting for person is
// accepted: both asked.
func (s *Store) AcceptedByRemote(ctx context.Context, tenant, person, remote, request string) (Connection, error) {
	ts, err := s.command(tenant)
	if err != nil {
		return Connection{}, err
	}
	if err := checkPerson("person", person); err != nil {
		return Connection{}, err
	}
	from, err := checkParty("remote", Party{Address: remote})
	if err != nil {
		return Connection{}, err
	}
	if request == "" || len(request) > 128 {
		return Connection{}, invalid("envelope_id", "1 to 128 characters")
	}
	id := ConnectionID(tenant, from, person)
	for step := 0; step < 2; step++ {
		var done bool
		err = s.decide(ctx, subject(tenant, streams.PolicyConnection, id), "connection accepted by the remote party", func() (*alpv1.Event, error) {
			if ts.blockedBy(tenant, person, from) {
				return nil, fmt.Errorf("%w: %s by %s", ErrBlocked, from, person)
			}
			c := ts.conns[id]
			switch {
			case c == nil:
				ev := newEvent("connection_requested", tenant, id, personOrService(from))
				ev.Body = &alpv1.Event_ConnectionRequested{ConnectionRequested: &alpv1.ConnectionRequested{
					Tenant: tenant, ConnectionId: id, FromAddress: from.Address, ToPerson: person, EnvelopeId: request,
				}}
				return ev, nil
			case c.State == ConnRequested:
				return acceptEvent(tenant, id, person), nil
			case c.State == ConnDeclined:
				return nil, fmt.Errorf("%w: %s declined %s", ErrDeclined, person, from)
			default:
				done = true
				return nil, nil
			}
		})
		if err != nil || done {
			break
		}
	}
	if err != nil {
		return Connection{}, err
	}
	return s.Connection(tenant, id)
}
