package identitystore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"

	"github.com/alpd-project/alpd/internal/personmap"
)

// Queries answer from this replica's projection, and people's addresses
// and accounts from the person map (cached; see internal/personmap). Use
// Fresh to know how current the projection is.

// PersonBySubject is the person bound to the IdP account (issuer, subject).
func (s *Store) PersonBySubject(ctx context.Context, tenant, issuer, subject string) (Person, error) {
	if _, err := s.state(tenant); err != nil {
		return Person{}, err
	}
	id, err := s.people.AccountOwner(ctx, tenant, issuer, subject)
	if errors.Is(err, personmap.ErrNotFound) {
		return Person{}, fmt.Errorf("%w: no person bound to that IdP account", ErrNotFound)
	}
	if err != nil {
		return Person{}, fmt.Errorf("identitystore: %w", err)
	}
	return s.Person(ctx, tenant, id)
}

// PersonByAddress is the person the address belongs to.
func (s *Store) PersonByAddress(ctx context.Context, tenant, address string) (Person, error) {
	if _, err := s.state(tenant); err != nil {
		return Person{}, err
	}
	id, err := s.people.AddressOwner(ctx, tenant, address)
	if errors.Is(err, personmap.ErrNotFound) {
		return Person{}, fmt.Errorf("%w: no person has that address", ErrNotFound)
	}
	if err != nil {
		return Person{}, fmt.Errorf("identitystore: %w", err)
	}
	return s.Person(ctx, tenant, id)
}

// Roles are the app roles of the person with the id, from the projection
// alone: unlike Person, no read of the person map, so a caller on a hot
// path that knows the address already pays no round trip. ErrNotFound for
// an unknown or erased person.
func (s *Store) Roles(tenant, id string) ([]string, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return nil, err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	p := ts.persons[id]
	if p == nil || p.erased {
		return nil, fmt.Errorf("%w: person %q", ErrNotFound, id)
	}
	return slices.Clone(p.Roles), nil
}

// OwnerOf is the id of the person the address belongs to now and their
// roles: one read of the person map (PersonByAddress reads it twice more
// for the account). ErrNotFound when nobody has the address.
func (s *Store) OwnerOf(ctx context.Context, tenant, address string) (id string, roles []string, err error) {
	if _, err := s.state(tenant); err != nil {
		return "", nil, err
	}
	id, err = s.people.AddressOwner(ctx, tenant, address)
	if errors.Is(err, personmap.ErrNotFound) {
		return "", nil, fmt.Errorf("%w: no person has that address", ErrNotFound)
	}
	if err != nil {
		return "", nil, fmt.Errorf("identitystore: %w", err)
	}
	roles, err = s.Roles(tenant, id)
	return id, roles, err
}

// Person is the person with the id, with their address and account from
// the person map. ErrNotFound (with ErrErased after erasure) when the
// projection or the map does not know them: a person whose binding an
// earlier version made, and whose address a more recent person took, is
// not found either.
func (s *Store) Person(ctx context.Context, tenant, id string) (Person, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return Person{}, err
	}
	s.f.RLock()
	var p Person
	found := false
	if pp := ts.persons[id]; pp != nil {
		p, found = pp.clone(), true
	}
	s.f.RUnlock()
	switch {
	case !found:
		return Person{}, fmt.Errorf("%w: person %q", ErrNotFound, id)
	case p.erased:
		return Person{}, fmt.Errorf("%w: person %q: %w", ErrNotFound, id, ErrErased)
	}
	e, err := s.people.Get(ctx, tenant, id)
	switch {
	case errors.Is(err, personmap.ErrErased):
		return Person{}, fmt.Errorf("%w: person %q: %w", ErrNotFound, id, ErrErased)
	case errors.Is(err, personmap.ErrNotFound):
		return Person{}, fmt.Errorf("%w: person %q has no entry in the person map", ErrNotFound, id)
	case err != nil:
		return Person{}, fmt.Errorf("identitystore: person %q: %w", id, err)
	}
	p.Address, p.Issuer, p.Subject = e.Address, e.Issuer, e.Subject
	p.legacy = personmap.Entry{}
	return p, nil
}

// SessionValid is nil if a web session of the person issued at issued may
// still be used: the person is known, not erased, and their sessions were
// not revoked at or after issued (RevokePersonSessions). It answers from
// the projection only.
func (s *Store) SessionValid(tenant, personID string, issued time.Time) error {
	ts, err := s.state(tenant)
	if err != nil {
		return err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	p := ts.live(personID)
	switch {
	case p == nil:
		return fmt.Errorf("%w: person %q", ErrNotFound, personID)
	case !p.SessionsRevokedBefore.IsZero() && !issued.After(p.SessionsRevokedBefore):
		return fmt.Errorf("%w: the person's sessions were revoked", ErrRevoked)
	}
	return nil
}

// Client is the registered client with the id.
func (s *Store) Client(tenant, clientID string) (Client, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return Client{}, err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	if c := ts.clients[clientID]; c != nil {
		return c.clone(), nil
	}
	return Client{}, fmt.Errorf("%w: client %q", ErrNotFound, clientID)
}

// Grant is the grant with the id, revoked or not (see Revoked).
func (s *Store) Grant(tenant, grantID string) (Grant, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return Grant{}, err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	if g := ts.grants[grantID]; g != nil {
		return g.clone(), nil
	}
	return Grant{}, fmt.Errorf("%w: grant %q", ErrNotFound, grantID)
}

// GrantByRefreshHash is the grant that a refresh token of any generation
// belongs to. The token is current only if the grant's RefreshSHA256 equals
// hash; pass it to RotateRefresh either way, which treats a spent one as
// reuse.
func (s *Store) GrantByRefreshHash(tenant string, hash Hash) (Grant, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return Grant{}, err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	if id, ok := ts.byRefresh[hash]; ok && !hash.IsZero() {
		return ts.grants[id].clone(), nil
	}
	return Grant{}, fmt.Errorf("%w: no grant has that refresh token", ErrNotFound)
}

// PAT is the personal access token with the id, revoked or not (see
// PATRevoked).
func (s *Store) PAT(tenant, patID string) (PAT, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return PAT{}, err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	if p := ts.pats[patID]; p != nil {
		return p.clone(), nil
	}
	return PAT{}, fmt.Errorf("%w: personal access token %q", ErrNotFound, patID)
}

// PATByHash is the personal access token with the hash, revoked or not.
func (s *Store) PATByHash(tenant string, hash Hash) (PAT, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return PAT{}, err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	if id, ok := ts.byPATHash[hash]; ok && !hash.IsZero() {
		return ts.pats[id].clone(), nil
	}
	return PAT{}, fmt.Errorf("%w: no personal access token has that hash", ErrNotFound)
}

// Revoked reports whether a token of person personID under grant grantID,
// issued at issuedAt, is void, and why (the reason holds no secret): the
// grant is unknown, belongs to someone else or is revoked, or the person's
// agents were revoked at or after the grant's or the token's issue. It
// fails closed: an unhosted tenant or unknown grant is revoked.
// (accesstoken.RevocationChecker)
func (s *Store) Revoked(tenant, personID, grantID string, issuedAt time.Time) (bool, string) {
	ts, err := s.state(tenant)
	if err != nil {
		return true, "tenant not hosted"
	}
	s.f.RLock()
	defer s.f.RUnlock()
	g := ts.grants[grantID]
	switch {
	case g == nil:
		return true, "unknown grant"
	case g.PersonID != personID:
		return true, "grant belongs to another person"
	}
	if reason := ts.voidReason(g, issuedAt); reason != "" {
		return true, reason
	}
	return false, ""
}

// PATRevoked reports whether the personal access token is void at now, and
// why: unknown, revoked, expired, or issued at or before a revocation of its
// person's agents.
func (s *Store) PATRevoked(tenant, patID string, now time.Time) (bool, string) {
	ts, err := s.state(tenant)
	if err != nil {
		return true, "tenant not hosted"
	}
	s.f.RLock()
	defer s.f.RUnlock()
	p := ts.pats[patID]
	if p == nil {
		return true, "unknown personal access token"
	}
	if p.Revoked {
		return true, "personal access token revoked: " + p.RevokedReason
	}
	if !now.Before(p.Expires) {
		return true, "personal access token expired"
	}
	person := ts.persons[p.PersonID]
	if person == nil {
		return true, "unknown person"
	}
	if person.erased {
		return true, "person erased"
	}
	if before := person.AgentsRevokedBefore; !before.IsZero() && !p.Issued.After(before) {
		return true, "person's agents revoked: " + person.AgentsRevokedReason
	}
	return false, ""
}

// AgentClasses are the trust classes of the agents that may act for the
// person at now, sorted (company before consumer) and without repeats:
// each live grant's class, and consumer for a live personal access token.
// Empty when the person has no agent; ErrNotFound for an unknown person.
// Policy asks it to know which views a recipient's agents take.
func (s *Store) AgentClasses(tenant, personID string, now time.Time) ([]alpv1.TrustClass, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return nil, err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	if p := ts.persons[personID]; p == nil || p.erased {
		return nil, fmt.Errorf("%w: person %q", ErrNotFound, personID)
	}
	var out []alpv1.TrustClass
	add := func(c alpv1.TrustClass) {
		if c != alpv1.TrustClass_TRUST_CLASS_UNSPECIFIED && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	for _, g := range ts.grantsOf[personID] {
		if ts.voidReason(g, now) == "" {
			add(g.Class)
		}
	}
	for _, p := range ts.patsOf[personID] {
		if !p.Revoked && now.Before(p.Expires) {
			if before := ts.persons[personID].AgentsRevokedBefore; before.IsZero() || p.Issued.After(before) {
				add(alpv1.TrustClass_TRUST_CLASS_CONSUMER)
			}
		}
	}
	slices.Sort(out)
	if out == nil {
		out = []alpv1.TrustClass{}
	}
	return out, nil
}

// Agent is what identity knows of one of a person's agents, for the line
// the broker writes above what the agent sent: its name, the trust class
// of its credential and whether an organization vouched for it.
type Agent struct {
	ID string
	// Name is the client's registered name, or the personal access
	// token's; empty when identity no longer knows the agent.
	Name  string
	Class alpv1.TrustClass
	// Attested: an organization admin registered the agent's client
	// (company) or bound a vendor's attestation to it; every other agent
	// (public clients, personal access tokens) is self-attested.
	Attested bool
}

// AgentOf describes agent agentID of person personID: a grant's client
// (revoked or not: a message it sent earlier still names it), or a
// personal access token ("pat_<id>"). ErrNotFound when the person has no
// such agent.
func (s *Store) AgentOf(tenant, personID, agentID string) (Agent, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return Agent{}, err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	if id, ok := strings.CutPrefix(agentID, "pat_"); ok {
		if p := ts.pats[id]; p != nil && p.PersonID == personID {
			return Agent{ID: agentID, Name: p.Name, Class: alpv1.TrustClass_TRUST_CLASS_CONSUMER}, nil
		}
		return Agent{}, fmt.Errorf("%w: agent %q", ErrNotFound, agentID)
	}
	for _, g := range ts.grantsOf[personID] {
		if g.AgentID != agentID {
			continue
		}
		a := Agent{ID: agentID, Class: g.Class}
		if c := ts.clients[g.ClientID]; c != nil {
			a.Name = c.Name
			a.Attested = c.Kind == alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL || c.VendorAttestation != ""
		}
		return a, nil
	}
	return Agent{}, fmt.Errorf("%w: agent %q", ErrNotFound, agentID)
}
