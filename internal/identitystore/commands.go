package identitystore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/personmap"
	"github.com/alpd-project/alpd/internal/streams"
)

// Values of ClientRegistered.registered_by for self-registered clients.
const (
	RegisteredByDCR  = "dcr"
	RegisteredByCIMD = "cimd"
)

// ReasonRefreshReuse is the GrantRevoked reason after refresh token reuse.
const ReasonRefreshReuse = "refresh token reuse"

type actorKey struct{}

// WithActor names who causes the events of commands run with ctx (an
// operator, an admin, the person). Without it each command names the person
// it acts for, or the identity service.
func WithActor(ctx context.Context, a *alpv1.Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

func actor(ctx context.Context, def *alpv1.Actor) *alpv1.Actor {
	if a, ok := ctx.Value(actorKey{}).(*alpv1.Actor); ok && a != nil {
		return a
	}
	if def != nil {
		return def
	}
	return &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_SERVICE, Id: "identity"}
}

func personActor(id string) *alpv1.Actor {
	return &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_PERSON, Id: id}
}

// state is the projection of a hosted tenant, for a command or query.
func (s *Store) state(tenant string) (*tenantState, error) {
	ts := s.tenants[tenant]
	if ts == nil {
		return nil, fmt.Errorf("%w: %q", ErrNotHosted, tenant)
	}
	return ts, nil
}

// command is state for a command: the store must be open.
func (s *Store) command(tenant string) (*tenantState, error) {
	if s.f.Closed() {
		return nil, ErrClosed
	}
	return s.state(tenant)
}

func (s *Store) newEvent(ctx context.Context, kind, tenant, correlation string, def *alpv1.Actor) *alpv1.Event {
	return &alpv1.Event{Header: &alpv1.EventHeader{
		Type:          kind,
		SchemaVersion: 1,
		EventId:       uuid.Must(uuid.NewV7()).String(),
		CorrelationId: correlation,
		Actor:         actor(ctx, def),
		Tenant:        tenant,
		ProducerRole:  alpv1.Role_ROLE_IDENTITY,
		Occurred:      timestamppb.Now(),
	}}
}

func subject(tenant, aggregate, id string) string {
	// Every id reaching here is a valid token (generated, hashed or
	// checked), so Subject cannot fail.
	s, err := streams.IdentitySubject(tenant, aggregate, id)
	if err != nil {
		panic(fmt.Sprintf("identitystore: %v", err))
	}
	return s
}

// commit appends ev on subj if the subject's last sequence is still
// expected, and waits until this store has applied it.
func (s *Store) commit(ctx context.Context, subj string, expected uint64, ev *alpv1.Event) error {
	if s.beforeCommit != nil {
		s.beforeCommit(subj)
	}
	seq, err := s.b.Append(ctx, subj, expected, ev)
	if err != nil {
		return err
	}
	if err := s.f.WaitApplied(ctx, seq); err != nil {
		return fmt.Errorf("identitystore: %s stored at %d but not yet applied: %w", bus.Kind(ev), seq, err)
	}
	return nil
}

// decide runs round (read the projection, decide, commit) until it does not
// conflict with another writer. After a conflict it waits until the
// projection has the subject's last event, then decides again; it gives up
// after maxAttempts rounds.
func (s *Store) decide(ctx context.Context, what string, round func() (subj string, err error)) error {
	for attempt := 1; ; attempt++ {
		subj, err := round()
		if !errors.Is(err, bus.ErrConflict) {
			return err
		}
		if attempt == maxAttempts {
			return fmt.Errorf("identitystore: %s: still conflicting after %d attempts: %w", what, attempt, err)
		}
		if err := s.f.WaitSubject(ctx, subj); err != nil {
			return fmt.Errorf("identitystore: %s: reload after conflict: %w", what, err)
		}
	}
}

// BindPerson returns the person bound to the IdP account (issuer,
// subject), binding a new person with a random id at the account's first
// sign-in. Address and roles are the current ones (the caller decides where
// the address comes from). The account and address go to the person map,
// never to the stream: PersonBound and PersonUpdated carry the person id
// and roles only.
//
// An address belongs to at most one person of the tenant: when it belongs
// to a person bound to another account (the IdP's issuer or the person's
// subject changed), BindPerson refuses with ErrAddressTaken and creates
// nothing; only an operator's RebindPerson moves it. Concurrent first
// sign-ins of one account, on any replicas, bind one person; concurrent
// first sign-ins of two accounts with one address bind one of them.
func (s *Store) BindPerson(ctx context.Context, tenant, issuer, subj, address string, roles []string) (Person, error) {
	ts, err := s.command(tenant)
	if err != nil {
		return Person{}, err
	}
	if err := checkIssuer(issuer); err != nil {
		return Person{}, err
	}
	if err := checkText("subject", subj, maxText); err != nil {
		return Person{}, err
	}
	if err := checkAddress(address); err != nil {
		return Person{}, err
	}
	roles, err = normalizeList("roles", roles, checkRole)
	if err != nil {
		return Person{}, err
	}
	entry := personmap.Entry{Address: address, Issuer: issuer, Subject: subj}
	var id string
	for attempt := 1; ; attempt++ {
		owner, err := s.people.AccountOwner(ctx, tenant, issuer, subj)
		switch {
		case err == nil:
			id = owner
		case errors.Is(err, personmap.ErrNotFound):
			id = "p_" + randomHex()
		default:
			return Person{}, fmt.Errorf("identitystore: bind person: %w", err)
		}
		err = s.people.Claim(ctx, tenant, id, entry)
		if errors.Is(err, personmap.ErrAccountTaken) && attempt < maxAttempts {
			continue // another replica bound the account first: take theirs
		}
		if errors.Is(err, ErrAddressTaken) {
			s.log.Warn("sign-in refused: the address belongs to a person bound to another IdP account",
				"tenant", tenant, "issuer", issuer)
			return Person{}, fmt.Errorf("identitystore: bind person: %w (an operator re-binds it with RebindPerson)", err)
		}
		if err != nil {
			return Person{}, fmt.Errorf("identitystore: bind person: %w", err)
		}
		break
	}
	// The map says who; the stream gets the person (once) and their roles.
	// A binding interrupted after the map was written is completed here.
	ps := subject(tenant, streams.IdentityPerson, id)
	err = s.decide(ctx, "bind person", func() (string, error) {
		s.f.RLock()
		p, found := ts.persons[id]
		var cur Person
		if found {
			cur = p.clone()
		}
		version := s.f.Version(ps)
		s.f.RUnlock()
		switch {
		case found && cur.erased:
			return "", fmt.Errorf("%w: person %q: %w", ErrNotFound, id, ErrErased)
		case found && slices.Equal(cur.Roles, roles):
			return "", nil
		case found:
			ev := s.newEvent(ctx, "person_updated", tenant, id, personActor(id))
			ev.Body = &alpv1.Event_PersonUpdated{PersonUpdated: &alpv1.PersonUpdated{Tenant: tenant, PersonId: id, Roles: roles}}
			return ps, s.commit(ctx, ps, version, ev)
		}
		ev := s.newEvent(ctx, "person_bound", tenant, id, personActor(id))
		ev.Body = &alpv1.Event_PersonBound{PersonBound: &alpv1.PersonBound{
			Tenant: tenant, PersonId: id, Roles: roles, Bound: timestamppb.Now(),
		}}
		return ps, s.commit(ctx, ps, version, ev)
	})
	if err != nil {
		return Person{}, err
	}
	return s.Person(ctx, tenant, id)
}

// RebindPerson moves the person to another IdP account (issuer, subject),
// keeping their id, address and everything issued to them: the explicit,
// audited answer to an IdP whose issuer or subjects changed. The old
// account no longer signs in as the person. ErrAccountTaken when the new
// account is another person's. The PersonRebound event names the actor of
// ctx (WithActor) and the old and new issuers as keyed hashes only.
func (s *Store) RebindPerson(ctx context.Context, tenant, personID, issuer, subj, reason string) (Person, error) {
	ts, err := s.command(tenant)
	if err != nil {
		return Person{}, err
	}
	if err := checkIssuer(issuer); err != nil {
		return Person{}, err
	}
	if err := checkText("subject", subj, maxText); err != nil {
		return Person{}, err
	}
	if err := checkText("reason", reason, maxText); err != nil {
		return Person{}, err
	}
	s.f.RLock()
	known := ts.live(personID) != nil
	s.f.RUnlock()
	if !known {
		return Person{}, fmt.Errorf("%w: person %q", ErrNotFound, personID)
	}
	cur, err := s.people.Get(ctx, tenant, personID)
	if err != nil {
		return Person{}, fmt.Errorf("identitystore: rebind person: %w", err)
	}
	if err := s.people.Claim(ctx, tenant, personID, personmap.Entry{Address: cur.Address, Issuer: issuer, Subject: subj}); err != nil {
		return Person{}, fmt.Errorf("identitystore: rebind person: %w", err)
	}
	oldHash, err := s.people.IssuerHash(ctx, tenant, cur.Issuer)
	if err != nil {
		return Person{}, err
	}
	newHash, err := s.people.IssuerHash(ctx, tenant, issuer)
	if err != nil {
		return Person{}, err
	}
	ps := subject(tenant, streams.IdentityPerson, personID)
	err = s.decide(ctx, "rebind person", func() (string, error) {
		s.f.RLock()
		version := s.f.Version(ps)
		s.f.RUnlock()
		ev := s.newEvent(ctx, "person_rebound", tenant, personID, nil)
		ev.Body = &alpv1.Event_PersonRebound{PersonRebound: &alpv1.PersonRebound{
			Tenant: tenant, PersonId: personID, OldIssuerHmac: oldHash, NewIssuerHmac: newHash,
			SubjectChanged: cur.Subject != subj, Reason: reason,
		}}
		return ps, s.commit(ctx, ps, version, ev)
	})
	if err != nil {
		return Person{}, fmt.Errorf("identitystore: person %s re-bound, but the audit event was not recorded (run it again): %w", personID, err)
	}
	s.log.Info("person re-bound to another IdP account", "tenant", tenant, "person_id", personID,
		"issuer_changed", cur.Issuer != issuer, "subject_changed", cur.Subject != subj)
	return s.Person(ctx, tenant, personID)
}

// RevokePersonSessions voids every web session of the person issued until
// now (see SessionValid); later sign-ins are unaffected.
func (s *Store) RevokePersonSessions(ctx context.Context, tenant, personID, reason string) error {
	ts, err := s.command(tenant)
	if err != nil {
		return err
	}
	if err := checkText("reason", reason, maxText); err != nil {
		return err
	}
	before := timestamppb.Now()
	ps := subject(tenant, streams.IdentityPerson, personID)
	return s.decide(ctx, "revoke person's sessions", func() (string, error) {
		s.f.RLock()
		_, ok := ts.persons[personID]
		version := s.f.Version(ps)
		s.f.RUnlock()
		if !ok {
			return "", fmt.Errorf("%w: person %q", ErrNotFound, personID)
		}
		ev := s.newEvent(ctx, "person_sessions_revoked", tenant, personID, nil)
		ev.Body = &alpv1.Event_PersonSessionsRevoked{PersonSessionsRevoked: &alpv1.PersonSessionsRevoked{
			Tenant: tenant, PersonId: personID, Reason: reason, Before: before,
		}}
		return ps, s.commit(ctx, ps, version, ev)
	})
}

// ErasePeople removes the person from the person map: their address and
// IdP account (also those that earlier versions' events name) are free
// again and nothing holds them any more. The caller (the identity
// service's erasure) then records the erasure on the stream, which marks
// the person erased in every replica's projection. Idempotent.
func (s *Store) ErasePeople(ctx context.Context, tenant, personID string) error {
	ts, err := s.command(tenant)
	if err != nil {
		return err
	}
	if err := alp.ValidatePersonID(personID); err != nil {
		return invalid("person_id", "%v", err)
	}
	s.f.RLock()
	var legacy personmap.Entry
	if p := ts.persons[personID]; p != nil {
		legacy = p.legacy
	}
	s.f.RUnlock()
	if err := s.people.Erase(ctx, tenant, personID, legacy); err != nil {
		return fmt.Errorf("identitystore: erase %s from the person map: %w", personID, err)
	}
	return nil
}

// MigrateBindings moves the bindings of earlier versions (account and
// address in clear on the stream) into the person map, so that they obey
// the one-person-per-address rule: for each address the most recently
// bound person keeps it, and every other person with that address (the
// duplicates the old rule let in) gets no entry, so their tokens stop
// working. Persons already in the map are left as they are. It is
// idempotent: the identity service runs it at every start, before sign-in
// opens. It returns how many persons it migrated and superseded.
func (s *Store) MigrateBindings(ctx context.Context) (migrated, superseded int, err error) {
	for tenant, ts := range s.tenants {
		s.f.RLock()
		var todo []Person
		for _, p := range ts.persons {
			if !p.erased && p.legacy.Issuer != "" {
				todo = append(todo, p.clone())
			}
		}
		s.f.RUnlock()
		// Newest binding first: it is the one in use.
		slices.SortFunc(todo, func(a, b Person) int {
			if c := b.Bound.Compare(a.Bound); c != 0 {
				return c
			}
			return strings.Compare(a.ID, b.ID)
		})
		for _, p := range todo {
			if _, err := s.people.Get(ctx, tenant, p.ID); err == nil || errors.Is(err, personmap.ErrErased) {
				continue
			} else if !errors.Is(err, personmap.ErrNotFound) {
				return migrated, superseded, fmt.Errorf("identitystore: migrate %s: %w", p.ID, err)
			}
			switch err := s.people.Claim(ctx, tenant, p.ID, p.legacy); {
			case err == nil:
				migrated++
			case errors.Is(err, ErrAddressTaken), errors.Is(err, ErrAccountTaken):
				superseded++
				s.log.Warn("earlier binding superseded: its address belongs to a more recently bound person; its tokens stop working",
					"tenant", tenant, "person_id", p.ID)
			default:
				return migrated, superseded, fmt.Errorf("identitystore: migrate %s: %w", p.ID, err)
			}
		}
	}
	return migrated, superseded, nil
}

// PersonIDBinder adapts a Store to callers that need only the person id of
// a sign-in (internal/signin's Binder).
type PersonIDBinder struct{ Store *Store }

// BindPerson is Store.BindPerson, returning the person id.
func (b PersonIDBinder) BindPerson(ctx context.Context, tenant, issuer, subject, address string, roles []string) (string, error) {
	p, err := b.Store.BindPerson(ctx, tenant, issuer, subject, address, roles)
	return p.ID, err
}

// ClientSpec is a client to register.
type ClientSpec struct {
	Tenant       string
	ClientID     string
	Kind         alpv1.ClientKind
	RedirectURIs []string
	Name         string
	// SecretSHA256: confidential clients authenticating with a secret.
	SecretSHA256 Hash
	// JWKSURI or JWKS: confidential clients using private_key_jwt.
	JWKSURI string
	JWKS    []byte
	// RegisteredBy: the admin's person id for confidential and vendor
	// clients; RegisteredByDCR or RegisteredByCIMD (the default for those
	// kinds) otherwise.
	RegisteredBy string
	// VendorAttestation: only for vendor clients registered by an admin.
	VendorAttestation string
}

func (s *Store) checkClient(ts *tenantState, c *ClientSpec) error {
	switch c.Kind {
	case alpv1.ClientKind_CLIENT_KIND_PUBLIC_CIMD:
		if _, err := checkURL("client_id", c.ClientID, false); err != nil {
			return err
		}
	case alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL, alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR, alpv1.ClientKind_CLIENT_KIND_PUBLIC_VENDOR:
		if err := checkText("client_id", c.ClientID, maxURL); err != nil {
			return err
		}
	default:
		return invalid("kind", "%s is not a client kind", c.Kind)
	}
	if len(c.RedirectURIs) == 0 {
		return invalid("redirect_uris", "at least one is required")
	}
	uris, err := normalizeList("redirect_uris", c.RedirectURIs, checkRedirect)
	if err != nil {
		return err
	}
	c.RedirectURIs = uris
	if c.Name != "" {
		if err := checkText("client_name", c.Name, maxText); err != nil {
			return err
		}
	}
	if c.JWKSURI != "" && len(c.JWKS) > 0 {
		return invalid("jwks", "give jwks_uri or jwks, not both")
	}
	if c.JWKSURI != "" {
		if _, err := checkURL("jwks_uri", c.JWKSURI, false); err != nil {
			return err
		}
	}
	if len(c.JWKS) > 0 {
		if err := checkJWKS(c.JWKS); err != nil {
			return err
		}
	}
	keyJWT := c.JWKSURI != "" || len(c.JWKS) > 0
	admin := func() error {
		if ts.live(c.RegisteredBy) == nil {
			return fmt.Errorf("%w: registered_by: no person %q in %s", ErrNotFound, c.RegisteredBy, ts.domain)
		}
		return nil
	}
	switch c.Kind {
	case alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL:
		if c.SecretSHA256.IsZero() == !keyJWT {
			return invalid("secret_sha256", "a confidential client authenticates with exactly one of a secret or private_key_jwt (jwks_uri / jwks)")
		}
		if c.VendorAttestation != "" {
			return invalid("vendor_attestation", "only public clients carry a vendor attestation")
		}
		return admin()
	case alpv1.ClientKind_CLIENT_KIND_PUBLIC_VENDOR:
		if !c.SecretSHA256.IsZero() || keyJWT {
			return invalid("secret_sha256", "a public client has no credentials")
		}
		if c.VendorAttestation != "" {
			if err := checkText("vendor_attestation", c.VendorAttestation, maxText); err != nil {
				return err
			}
		}
		return admin()
	default: // DCR, CIMD
		if !c.SecretSHA256.IsZero() || keyJWT {
			return invalid("secret_sha256", "a public client has no credentials")
		}
		want := RegisteredByDCR
		if c.Kind == alpv1.ClientKind_CLIENT_KIND_PUBLIC_CIMD {
			want = RegisteredByCIMD
		}
		if c.RegisteredBy == "" {
			c.RegisteredBy = want
		}
		if c.RegisteredBy != want {
			return invalid("registered_by", "a %s client is registered by %q", c.Kind, want)
		}
		if c.VendorAttestation != "" {
			return invalid("vendor_attestation", "an admin binds attestations (BindVendorAttestation)")
		}
	}
	return nil
}

// RegisterClient registers an OAuth client under a tenant. A client id is
// registered once (ErrExists after).
func (s *Store) RegisterClient(ctx context.Context, spec ClientSpec) (Client, error) {
	ts, err := s.command(spec.Tenant)
	if err != nil {
		return Client{}, err
	}
	spec.JWKS = slices.Clone(spec.JWKS)
	s.f.RLock()
	err = s.checkClient(ts, &spec)
	s.f.RUnlock()
	if err != nil {
		return Client{}, err
	}
	cs := subject(spec.Tenant, streams.IdentityClient, clientToken(spec.ClientID))
	var def *alpv1.Actor
	if spec.Kind == alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL || spec.Kind == alpv1.ClientKind_CLIENT_KIND_PUBLIC_VENDOR {
		def = personActor(spec.RegisteredBy)
	}
	var out Client
	err = s.decide(ctx, "register client", func() (string, error) {
		s.f.RLock()
		exists := ts.clients[spec.ClientID] != nil
		version := s.f.Version(cs)
		s.f.RUnlock()
		if exists {
			return "", fmt.Errorf("%w: client %q", ErrExists, spec.ClientID)
		}
		ev := s.newEvent(ctx, "client_registered", spec.Tenant, spec.ClientID, def)
		ev.Body = &alpv1.Event_ClientRegistered{ClientRegistered: &alpv1.ClientRegistered{
			Tenant: spec.Tenant, ClientId: spec.ClientID, Kind: spec.Kind, RedirectUris: spec.RedirectURIs,
			ClientName: spec.Name, SecretSha256: spec.SecretSHA256.bytes(), JwksUri: spec.JWKSURI, Jwks: spec.JWKS,
			RegisteredBy: spec.RegisteredBy, VendorAttestation: spec.VendorAttestation,
		}}
		if err := s.commit(ctx, cs, version, ev); err != nil {
			return cs, err
		}
		var err error
		out, err = s.Client(spec.Tenant, spec.ClientID)
		return "", err
	})
	return out, err
}

// BindVendorAttestation binds a vendor attestation to a public client, on
// the word of admin `by` (a person of the tenant): its agents become
// company class for grants issued from then on.
func (s *Store) BindVendorAttestation(ctx context.Context, tenant, clientID, attestation, by string) (Client, error) {
	ts, err := s.command(tenant)
	if err != nil {
		return Client{}, err
	}
	if err := checkText("attestation", attestation, maxText); err != nil {
		return Client{}, err
	}
	cs := subject(tenant, streams.IdentityClient, clientToken(clientID))
	var out Client
	err = s.decide(ctx, "bind vendor attestation", func() (string, error) {
		s.f.RLock()
		c, ok := ts.clients[clientID]
		var cur Client
		if ok {
			cur = c.clone()
		}
		admin := ts.live(by) != nil
		version := s.f.Version(cs)
		s.f.RUnlock()
		switch {
		case !ok:
			return "", fmt.Errorf("%w: client %q", ErrNotFound, clientID)
		case !admin:
			return "", fmt.Errorf("%w: by: no person %q in %s", ErrNotFound, by, tenant)
		case cur.Kind == alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL:
			return "", invalid("client_id", "a confidential client needs no vendor attestation")
		case cur.VendorAttestation == attestation:
			out = cur
			return "", nil
		}
		ev := s.newEvent(ctx, "vendor_attestation_bound", tenant, clientID, personActor(by))
		ev.Body = &alpv1.Event_VendorAttestationBound{VendorAttestationBound: &alpv1.VendorAttestationBound{
			Tenant: tenant, ClientId: clientID, Attestation: attestation, By: by,
		}}
		if err := s.commit(ctx, cs, version, ev); err != nil {
			return cs, err
		}
		var err error
		out, err = s.Client(tenant, clientID)
		return "", err
	})
	return out, err
}

// GrantSpec is a grant to issue.
type GrantSpec struct {
	Tenant   string
	PersonID string
	ClientID string
	AgentID  string
	// Class: unspecified takes the client's class (Client.Class); a caller
	// may lower company to consumer, never raise it.
	Class    alpv1.TrustClass
	Scopes   []string
	Resource string
	// RefreshSHA256: the first refresh token's hash, if the grant has one.
	RefreshSHA256 Hash
}

// IssueGrant records a person's authorization of an agent through a
// client. The trust class comes from the client (the credential), never
// from the agent.
func (s *Store) IssueGrant(ctx context.Context, spec GrantSpec) (Grant, error) {
	ts, err := s.command(spec.Tenant)
	if err != nil {
		return Grant{}, err
	}
	if err := checkID("agent_id", spec.AgentID); err != nil {
		return Grant{}, err
	}
	scopes, err := normalizeList("scopes", spec.Scopes, checkScope)
	if err != nil {
		return Grant{}, err
	}
	if spec.Resource != "" {
		if _, err := checkURL("resource", spec.Resource, true); err != nil {
			return Grant{}, err
		}
	}
	s.f.RLock()
	person := ts.live(spec.PersonID) != nil
	c, client := ts.clients[spec.ClientID]
	_, refreshUsed := ts.byRefresh[spec.RefreshSHA256]
	var class alpv1.TrustClass
	if client {
		class = c.Class()
	}
	s.f.RUnlock()
	switch {
	case !person:
		return Grant{}, fmt.Errorf("%w: person %q", ErrNotFound, spec.PersonID)
	case !client:
		return Grant{}, fmt.Errorf("%w: client %q", ErrNotFound, spec.ClientID)
	case !spec.RefreshSHA256.IsZero() && refreshUsed:
		return Grant{}, fmt.Errorf("%w: refresh token hash already in use", ErrExists)
	}
	switch spec.Class {
	case alpv1.TrustClass_TRUST_CLASS_UNSPECIFIED, class:
	case alpv1.TrustClass_TRUST_CLASS_CONSUMER:
		class = spec.Class
	default:
		return Grant{}, invalid("class", "%s is above the client's class %s", spec.Class, class)
	}
	id := "g_" + randomHex()
	ev := s.newEvent(ctx, "grant_issued", spec.Tenant, id, personActor(spec.PersonID))
	ev.Body = &alpv1.Event_GrantIssued{GrantIssued: &alpv1.GrantIssued{
		Tenant: spec.Tenant, GrantId: id, PersonId: spec.PersonID, ClientId: spec.ClientID,
		AgentId: spec.AgentID, Class: class, Scopes: scopes, Resource: spec.Resource,
		Issued: timestamppb.Now(), RefreshTokenSha256: spec.RefreshSHA256.bytes(),
	}}
	// A fresh random id: the subject is empty, nothing to reload on.
	if err := s.commit(ctx, subject(spec.Tenant, streams.IdentityGrant, id), 0, ev); err != nil {
		return Grant{}, err
	}
	return s.Grant(spec.Tenant, id)
}

// RotateRefresh exchanges the grant's current refresh token (presented) for
// a new one (next). A presented hash that is not the current one is reuse
// of a spent (or stolen) token: the grant is revoked and ErrRefreshReuse
// returned. Repeating a rotation that was stored (same presented and next)
// succeeds. A void grant gives ErrRevoked.
func (s *Store) RotateRefresh(ctx context.Context, tenant, grantID string, presented, next Hash) error {
	ts, err := s.command(tenant)
	if err != nil {
		return err
	}
	switch {
	case presented.IsZero():
		return invalid("presented", "empty hash")
	case next.IsZero():
		return invalid("next", "empty hash")
	case presented.Equal(next):
		return invalid("next", "the new refresh token must differ from the presented one")
	}
	reuse := false
	err = s.decide(ctx, "rotate refresh token", func() (string, error) {
		reuse = false
		s.f.RLock()
		g, ok := ts.grants[grantID]
		var cur Grant
		var void string
		if ok {
			cur = g.clone()
			void = ts.voidReason(g, time.Now())
		}
		_, nextUsed := ts.byRefresh[next]
		var gs string
		var version uint64
		if ok {
			gs = subject(tenant, streams.IdentityGrant, grantID)
			version = s.f.Version(gs)
		}
		s.f.RUnlock()
		switch {
		case !ok:
			return "", fmt.Errorf("%w: grant %q", ErrNotFound, grantID)
		case void != "":
			return "", fmt.Errorf("%w: %s", ErrRevoked, void)
		case cur.previousRefresh.Equal(presented) && cur.RefreshSHA256.Equal(next):
			return "", nil // this rotation was already stored
		case !cur.RefreshSHA256.IsZero() && cur.RefreshSHA256.Equal(presented):
			if nextUsed {
				return "", fmt.Errorf("%w: next refresh token hash already in use", ErrExists)
			}
			ev := s.newEvent(ctx, "refresh_token_rotated", tenant, grantID, nil)
			ev.Body = &alpv1.Event_RefreshTokenRotated{RefreshTokenRotated: &alpv1.RefreshTokenRotated{
				Tenant: tenant, GrantId: grantID, Generation: cur.RefreshGeneration + 1, TokenSha256: next.bytes(),
			}}
			return gs, s.commit(ctx, gs, version, ev)
		}
		reuse = true
		ev := s.newEvent(ctx, "grant_revoked", tenant, grantID, nil)
		ev.Body = &alpv1.Event_GrantRevoked{GrantRevoked: &alpv1.GrantRevoked{
			Tenant: tenant, GrantId: grantID, Reason: ReasonRefreshReuse,
		}}
		return gs, s.commit(ctx, gs, version, ev)
	})
	if err == nil && reuse {
		s.log.Warn("refresh token reuse: grant revoked", "tenant", tenant, "grant", grantID)
		return fmt.Errorf("%w: grant %s revoked", ErrRefreshReuse, grantID)
	}
	return err
}

// RevokeGrant voids a grant and every token under it. Revoking a revoked
// grant does nothing.
func (s *Store) RevokeGrant(ctx context.Context, tenant, grantID, reason string) error {
	return s.revoke(ctx, tenant, streams.IdentityGrant, "grant_revoked", grantID, reason, func(ts *tenantState) (bool, bool) {
		g, ok := ts.grants[grantID]
		return ok, ok && g.Revoked
	}, func(ev *alpv1.Event) {
		ev.Body = &alpv1.Event_GrantRevoked{GrantRevoked: &alpv1.GrantRevoked{Tenant: tenant, GrantId: grantID, Reason: reason}}
	})
}

// revoke appends the kind event revoking aggregate id (a grant or a PAT) unless it
// is unknown (ErrNotFound) or already revoked (nothing to do). state
// reports both under the read lock; body fills in the event.
func (s *Store) revoke(ctx context.Context, tenant, aggregate, kind, id, reason string,
	state func(*tenantState) (exists, revoked bool), body func(*alpv1.Event)) error {
	ts, err := s.command(tenant)
	if err != nil {
		return err
	}
	if err := checkText("reason", reason, maxText); err != nil {
		return err
	}
	return s.decide(ctx, "revoke "+aggregate, func() (string, error) {
		subj := subject(tenant, aggregate, id)
		s.f.RLock()
		exists, revoked := state(ts)
		version := s.f.Version(subj)
		s.f.RUnlock()
		switch {
		case !exists:
			return "", fmt.Errorf("%w: %s %q", ErrNotFound, aggregate, id)
		case revoked:
			return "", nil
		}
		ev := s.newEvent(ctx, kind, tenant, id, nil)
		body(ev)
		return subj, s.commit(ctx, subj, version, ev)
	})
}

// RevokePersonAgents voids every grant and token of the person issued until
// now; later ones are unaffected (the person signs their agents in again).
func (s *Store) RevokePersonAgents(ctx context.Context, tenant, personID, reason string) error {
	ts, err := s.command(tenant)
	if err != nil {
		return err
	}
	if err := checkText("reason", reason, maxText); err != nil {
		return err
	}
	before := timestamppb.Now()
	return s.decide(ctx, "revoke person's agents", func() (string, error) {
		s.f.RLock()
		_, ok := ts.persons[personID]
		var ps string
		var version uint64
		if ok {
			ps = subject(tenant, streams.IdentityPerson, personID)
			version = s.f.Version(ps)
		}
		s.f.RUnlock()
		if !ok {
			return "", fmt.Errorf("%w: person %q", ErrNotFound, personID)
		}
		ev := s.newEvent(ctx, "person_agents_revoked", tenant, personID, nil)
		ev.Body = &alpv1.Event_PersonAgentsRevoked{PersonAgentsRevoked: &alpv1.PersonAgentsRevoked{
			Tenant: tenant, PersonId: personID, Reason: reason, Before: before,
		}}
		return ps, s.commit(ctx, ps, version, ev)
	})
}

// PATSpec is a personal access token to record.
type PATSpec struct {
	Tenant string
	// ID: the token's id (it is part of the token, see accesstoken.NewPAT);
	// a random one when empty.
	ID          string
	PersonID    string
	Name        string
	TokenSHA256 Hash
	Scopes      []string
	Expires     time.Time
}

// IssuePAT records a person's personal access token (its hash only).
func (s *Store) IssuePAT(ctx context.Context, spec PATSpec) (PAT, error) {
	ts, err := s.command(spec.Tenant)
	if err != nil {
		return PAT{}, err
	}
	if spec.ID == "" {
		spec.ID = "pat_" + randomHex()
	}
	if err := checkID("pat_id", spec.ID); err != nil {
		return PAT{}, err
	}
	if err := checkText("name", spec.Name, maxText); err != nil {
		return PAT{}, err
	}
	if spec.TokenSHA256.IsZero() {
		return PAT{}, invalid("token_sha256", "empty hash")
	}
	scopes, err := normalizeList("scopes", spec.Scopes, checkScope)
	if err != nil {
		return PAT{}, err
	}
	if !spec.Expires.After(time.Now()) {
		return PAT{}, invalid("expires", "must be in the future")
	}
	ps := subject(spec.Tenant, streams.IdentityPAT, spec.ID)
	var out PAT
	err = s.decide(ctx, "issue personal access token", func() (string, error) {
		s.f.RLock()
		person := ts.live(spec.PersonID) != nil
		_, exists := ts.pats[spec.ID]
		_, hashUsed := ts.byPATHash[spec.TokenSHA256]
		version := s.f.Version(ps)
		s.f.RUnlock()
		switch {
		case !person:
			return "", fmt.Errorf("%w: person %q", ErrNotFound, spec.PersonID)
		case exists:
			return "", fmt.Errorf("%w: personal access token %q", ErrExists, spec.ID)
		case hashUsed:
			return "", fmt.Errorf("%w: token hash already in use", ErrExists)
		}
		ev := s.newEvent(ctx, "personal_access_token_issued", spec.Tenant, spec.ID, personActor(spec.PersonID))
		ev.Body = &alpv1.Event_PersonalAccessTokenIssued{PersonalAccessTokenIssued: &alpv1.PersonalAccessTokenIssued{
			Tenant: spec.Tenant, PatId: spec.ID, PersonId: spec.PersonID, Name: spec.Name,
			TokenSha256: spec.TokenSHA256.bytes(), Scopes: scopes, Expires: timestamppb.New(spec.Expires),
		}}
		if err := s.commit(ctx, ps, version, ev); err != nil {
			return ps, err
		}
		var err error
		out, err = s.PAT(spec.Tenant, spec.ID)
		return "", err
	})
	return out, err
}

// RevokePAT voids a personal access token. Revoking a revoked one does
// nothing.
func (s *Store) RevokePAT(ctx context.Context, tenant, patID, reason string) error {
	return s.revoke(ctx, tenant, streams.IdentityPAT, "personal_access_token_revoked", patID, reason, func(ts *tenantState) (bool, bool) {
		p, ok := ts.pats[patID]
		return ok, ok && p.Revoked
	}, func(ev *alpv1.Event) {
		ev.Body = &alpv1.Event_PersonalAccessTokenRevoked{PersonalAccessTokenRevoked: &alpv1.PersonalAccessTokenRevoked{
			Tenant: tenant, PatId: patID, Reason: reason}}
	})
}
