package identitystore

import (
	"fmt"
	"slices"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/personmap"
	"github.com/alpd-project/alpd/internal/streams"
)

// apply folds one event into the projection under the follower's write
// lock. An event that
// does not fit (forged producer, a tenant or id that disagrees with its
// subject, an aggregate that does not exist) is refused with an error and
// leaves the state as it was.
func (s *Store) apply(subject string, ev *alpv1.Event) error {
	if err := streams.CheckProducer(subject, ev); err != nil {
		return err
	}
	kind := bus.Kind(ev)
	switch kind {
	case "key_lifecycle", "sealed_secret_created", "idp_token_stored", "":
		// Keys are the identity service's. An unknown kind is from a newer
		// version: skipped.
		return nil
	}
	token, aggregate, id, ok := streams.ParseIdentitySubject(subject)
	if !ok {
		return fmt.Errorf("subject %q is not alp.identity.<tenant>.<aggregate>.<id>", subject)
	}
	tenant := ev.GetHeader().GetTenant()
	ts := s.tenants[tenant]
	if ts == nil || bus.TenantToken(tenant) != token {
		return fmt.Errorf("header tenant %q does not match the subject's tenant", tenant)
	}
	body := func(bodyTenant, wantAggregate, wantID string) error {
		if bodyTenant != tenant {
			return fmt.Errorf("body tenant %q, header tenant %q", bodyTenant, tenant)
		}
		if aggregate != wantAggregate || id != wantID {
			return fmt.Errorf("%s belongs on %s.%s, not %s.%s", kind, wantAggregate, wantID, aggregate, id)
		}
		return nil
	}
	occurred := ev.GetHeader().GetOccurred().AsTime()

	switch b := ev.GetBody().(type) {
	case *alpv1.Event_DataKeyDestroyed:
		// The person's erasure: their data key is destroyed and their
		// entry of the person map purged. The person stays (their grants
		// and tokens must keep failing), marked erased.
		e := b.DataKeyDestroyed
		if err := body(e.GetTenant(), streams.IdentityErasure, e.GetPersonId()); err != nil {
			return err
		}
		if p := ts.persons[e.GetPersonId()]; p != nil {
			if a := accountKey(p.legacy.Issuer, p.legacy.Subject); ts.byAccount[a] == p.ID {
				delete(ts.byAccount, a)
			}
			p.erased, p.legacy = true, personmap.Entry{}
		}
		if s.people != nil {
			s.people.Forget(tenant, e.GetPersonId())
		}

	case *alpv1.Event_PersonBound:
		e := b.PersonBound
		if err := alp.ValidatePersonID(e.GetPersonId()); err != nil {
			return invalid("person_id", "%v", err)
		}
		if ts.persons[e.GetPersonId()] != nil {
			return fmt.Errorf("person %s already bound", e.GetPersonId())
		}
		p := &Person{Tenant: tenant, ID: e.GetPersonId(), Roles: slices.Clone(e.GetRoles()), Bound: e.GetBound().AsTime()}
		if aggregate == streams.IdentityIdPAccount {
			// An earlier version's binding, with the account and address
			// in clear on the account's subject.
			if err := body(e.GetTenant(), streams.IdentityIdPAccount, accountToken(e.GetIssuer(), e.GetSubject())); err != nil {
				return err
			}
			key := accountKey(e.GetIssuer(), e.GetSubject())
			if _, dup := ts.byAccount[key]; dup {
				return fmt.Errorf("IdP account already bound")
			}
			p.legacy = personmap.Entry{Address: e.GetAddress(), Issuer: e.GetIssuer(), Subject: e.GetSubject()}
			ts.byAccount[key] = e.GetPersonId()
		} else {
			if err := body(e.GetTenant(), streams.IdentityPerson, e.GetPersonId()); err != nil {
				return err
			}
			if e.GetIssuer() != "" || e.GetSubject() != "" || e.GetAddress() != "" {
				return fmt.Errorf("a binding on person.%s names an account or address: those belong in the person map", e.GetPersonId())
			}
		}
		ts.persons[e.GetPersonId()] = p

	case *alpv1.Event_PersonUpdated:
		e := b.PersonUpdated
		if err := body(e.GetTenant(), streams.IdentityPerson, e.GetPersonId()); err != nil {
			return err
		}
		p := ts.persons[e.GetPersonId()]
		if p == nil {
			return fmt.Errorf("unknown person %s", e.GetPersonId())
		}
		if a := e.GetAddress(); a != "" && !p.erased {
			p.legacy.Address = a // an earlier version's address change
		}
		p.Roles = slices.Clone(e.GetRoles())

	case *alpv1.Event_PersonRebound:
		e := b.PersonRebound
		if err := body(e.GetTenant(), streams.IdentityPerson, e.GetPersonId()); err != nil {
			return err
		}
		if ts.persons[e.GetPersonId()] == nil {
			return fmt.Errorf("unknown person %s", e.GetPersonId())
		}
		// The map changed on another replica: read it again.
		if s.people != nil {
			s.people.Forget(tenant, e.GetPersonId())
		}

	case *alpv1.Event_PersonSessionsRevoked:
		e := b.PersonSessionsRevoked
		if err := body(e.GetTenant(), streams.IdentityPerson, e.GetPersonId()); err != nil {
			return err
		}
		p := ts.persons[e.GetPersonId()]
		if p == nil {
			return fmt.Errorf("unknown person %s", e.GetPersonId())
		}
		if before := e.GetBefore().AsTime(); before.After(p.SessionsRevokedBefore) {
			p.SessionsRevokedBefore = before
		}

	case *alpv1.Event_PersonAgentsRevoked:
		e := b.PersonAgentsRevoked
		if err := body(e.GetTenant(), streams.IdentityPerson, e.GetPersonId()); err != nil {
			return err
		}
		p := ts.persons[e.GetPersonId()]
		if p == nil {
			return fmt.Errorf("unknown person %s", e.GetPersonId())
		}
		// A revocation never moves the cut-off back.
		if before := e.GetBefore().AsTime(); before.After(p.AgentsRevokedBefore) {
			p.AgentsRevokedBefore, p.AgentsRevokedReason = before, e.GetReason()
		}

	case *alpv1.Event_ClientRegistered:
		e := b.ClientRegistered
		if err := body(e.GetTenant(), streams.IdentityClient, clientToken(e.GetClientId())); err != nil {
			return err
		}
		if ts.clients[e.GetClientId()] != nil {
			return fmt.Errorf("client already registered")
		}
		ts.clients[e.GetClientId()] = &Client{
			Tenant: tenant, ID: e.GetClientId(), Kind: e.GetKind(), RedirectURIs: slices.Clone(e.GetRedirectUris()),
			Name: e.GetClientName(), SecretSHA256: hashFrom(e.GetSecretSha256()), JWKSURI: e.GetJwksUri(),
			JWKS: slices.Clone(e.GetJwks()), RegisteredBy: e.GetRegisteredBy(),
			VendorAttestation: e.GetVendorAttestation(), Registered: occurred,
		}
		ts.countUnused(ts.clients[e.GetClientId()], 1)

	case *alpv1.Event_VendorAttestationBound:
		e := b.VendorAttestationBound
		if err := body(e.GetTenant(), streams.IdentityClient, clientToken(e.GetClientId())); err != nil {
			return err
		}
		c := ts.clients[e.GetClientId()]
		if c == nil {
			return fmt.Errorf("unknown client")
		}
		c.VendorAttestation, c.AttestedBy = e.GetAttestation(), e.GetBy()

	case *alpv1.Event_ClientFirstUsed:
		e := b.ClientFirstUsed
		if err := body(e.GetTenant(), streams.IdentityClient, clientToken(e.GetClientId())); err != nil {
			return err
		}
		return ts.applyClientFirstUsed(e)

	case *alpv1.Event_DynamicClientExpired:
		e := b.DynamicClientExpired
		if err := body(e.GetTenant(), streams.IdentityClient, clientToken(e.GetClientId())); err != nil {
			return err
		}
		return ts.applyDynamicClientExpired(e)

	case *alpv1.Event_GrantIssued:
		e := b.GrantIssued
		if err := body(e.GetTenant(), streams.IdentityGrant, e.GetGrantId()); err != nil {
			return err
		}
		if ts.grants[e.GetGrantId()] != nil {
			return fmt.Errorf("grant already issued")
		}
		g := &Grant{
			Tenant: tenant, ID: e.GetGrantId(), PersonID: e.GetPersonId(), ClientID: e.GetClientId(),
			AgentID: e.GetAgentId(), Class: e.GetClass(), Scopes: slices.Clone(e.GetScopes()),
			Resource: e.GetResource(), Issued: e.GetIssued().AsTime(),
		}
		if h := hashFrom(e.GetRefreshTokenSha256()); !h.IsZero() {
			g.RefreshGeneration, g.RefreshSHA256 = 1, h
			ts.byRefresh[h] = g.ID
		}
		ts.grants[g.ID] = g
		ts.grantsOf[g.PersonID] = append(ts.grantsOf[g.PersonID], g)

	case *alpv1.Event_RefreshTokenRotated:
		e := b.RefreshTokenRotated
		if err := body(e.GetTenant(), streams.IdentityGrant, e.GetGrantId()); err != nil {
			return err
		}
		g := ts.grants[e.GetGrantId()]
		if g == nil {
			return fmt.Errorf("unknown grant")
		}
		h := hashFrom(e.GetTokenSha256())
		if h.IsZero() {
			return fmt.Errorf("no token hash")
		}
		g.previousRefresh, g.RefreshSHA256, g.RefreshGeneration = g.RefreshSHA256, h, e.GetGeneration()
		ts.byRefresh[h] = g.ID

	case *alpv1.Event_GrantRevoked:
		e := b.GrantRevoked
		if err := body(e.GetTenant(), streams.IdentityGrant, e.GetGrantId()); err != nil {
			return err
		}
		g := ts.grants[e.GetGrantId()]
		if g == nil {
			return fmt.Errorf("unknown grant")
		}
		if !g.Revoked {
			g.Revoked, g.RevokedReason = true, e.GetReason()
		}

	case *alpv1.Event_PersonalAccessTokenIssued:
		e := b.PersonalAccessTokenIssued
		if err := body(e.GetTenant(), streams.IdentityPAT, e.GetPatId()); err != nil {
			return err
		}
		if ts.pats[e.GetPatId()] != nil {
			return fmt.Errorf("personal access token already issued")
		}
		h := hashFrom(e.GetTokenSha256())
		if h.IsZero() {
			return fmt.Errorf("no token hash")
		}
		p := &PAT{
			Tenant: tenant, ID: e.GetPatId(), PersonID: e.GetPersonId(), Name: e.GetName(), TokenSHA256: h,
			Scopes: slices.Clone(e.GetScopes()), Expires: e.GetExpires().AsTime(), Issued: occurred,
		}
		ts.pats[p.ID] = p
		ts.patsOf[p.PersonID] = append(ts.patsOf[p.PersonID], p)
		ts.byPATHash[h] = e.GetPatId()

	case *alpv1.Event_PersonalAccessTokenRevoked:
		e := b.PersonalAccessTokenRevoked
		if err := body(e.GetTenant(), streams.IdentityPAT, e.GetPatId()); err != nil {
			return err
		}
		p := ts.pats[e.GetPatId()]
		if p == nil {
			return fmt.Errorf("unknown personal access token")
		}
		if !p.Revoked {
			p.Revoked, p.RevokedReason = true, e.GetReason()
		}
	}
	return nil
}
