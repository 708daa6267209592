package identitystore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/streams"
)

// The lifecycle of dynamically registered clients. Anyone may register one
// (RFC 7591), and every replica holds every client in memory, so a client
// nobody ever uses must not live forever: the identity service expires
// them (DynamicClientExpired), and every replica drops them when it applies
// that event. What keeps a client is its first use (ClientFirstUsed),
// recorded once per client, never per request. Both events go on the
// client's subject with its last sequence expected, so a first use and an
// expiry racing on two replicas cannot both win: the loser reloads and
// finds the client used (nothing to expire) or gone (not found).

// MarkClientUsed records that a person authorized an agent through the
// client, once: a client already marked is returned as it is, without an
// event. ErrNotFound if the client does not exist (or has just expired).
func (s *Store) MarkClientUsed(ctx context.Context, tenant, clientID string) (Client, error) {
	ts, err := s.command(tenant)
	if err != nil {
		return Client{}, err
	}
	cs := subject(tenant, streams.IdentityClient, clientToken(clientID))
	if _, ok, _ := s.clientAt(ts, clientID, cs); !ok {
		// A person may authorize through a client registered on another
		// replica a moment ago: catch up on its subject once before
		// answering that it does not exist.
		if err := s.f.WaitSubject(ctx, cs); err != nil {
			return Client{}, fmt.Errorf("identitystore: mark client used: %w", err)
		}
	}
	var out Client
	err = s.decide(ctx, "mark client used", func() (string, error) {
		cur, ok, version := s.clientAt(ts, clientID, cs)
		switch {
		case !ok:
			return "", fmt.Errorf("%w: client %q", ErrNotFound, clientID)
		case !cur.FirstUsed.IsZero():
			out = cur
			return "", nil
		}
		ev := s.newEvent(ctx, "client_first_used", tenant, clientID, nil)
		ev.Body = &alpv1.Event_ClientFirstUsed{ClientFirstUsed: &alpv1.ClientFirstUsed{
			Tenant: tenant, ClientId: clientID, Used: timestamppb.Now(),
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

// UnusedDynamicClients lists the ids of at most limit dynamically registered
// clients of tenant that were never used and were registered before
// registeredBefore, oldest first.
func (s *Store) UnusedDynamicClients(tenant string, registeredBefore time.Time, limit int) ([]string, error) {
	ts, err := s.state(tenant)
	if err != nil {
		return nil, err
	}
	s.f.RLock()
	var found []*Client
	for _, c := range ts.clients {
		if expirable(c) && c.Registered.Before(registeredBefore) {
			found = append(found, c)
		}
	}
	slices.SortFunc(found, func(a, b *Client) int { return a.Registered.Compare(b.Registered) })
	ids := make([]string, 0, min(limit, len(found)))
	for _, c := range found[:min(limit, len(found))] {
		ids = append(ids, c.ID)
	}
	s.f.RUnlock()
	return ids, nil
}

// ExpireDynamicClient removes a dynamically registered client that was never
// used and is older than ttl at now. It reports whether it did: false,
// without an event, for a client that is gone, used, of another kind or not
// old enough.
func (s *Store) ExpireDynamicClient(ctx context.Context, tenant, clientID string, ttl time.Duration, now time.Time) (bool, error) {
	ts, err := s.command(tenant)
	if err != nil {
		return false, err
	}
	if ttl <= 0 {
		return false, invalid("ttl", "must be positive")
	}
	cs := subject(tenant, streams.IdentityClient, clientToken(clientID))
	expired := false
	err = s.decide(ctx, "expire dynamic client", func() (string, error) {
		cur, ok, version := s.clientAt(ts, clientID, cs)
		if !ok || !expirable(&cur) || !cur.Registered.Before(now.Add(-ttl)) {
			return "", nil
		}
		ev := s.newEvent(ctx, "dynamic_client_expired", tenant, clientID, nil)
		ev.Body = &alpv1.Event_DynamicClientExpired{DynamicClientExpired: &alpv1.DynamicClientExpired{
			Tenant: tenant, ClientId: clientID, Registered: timestamppb.New(cur.Registered), Ttl: durationpb.New(ttl),
		}}
		if err := s.commit(ctx, cs, version, ev); err != nil {
			return cs, err
		}
		expired = true
		return "", nil
	})
	return expired, err
}

// UnusedDynamicClientCounts counts the dynamically registered clients nobody has
// used yet, of tenant and of every tenant of this store: the clients anyone
// can create without signing in, which the bounds on registration limit.
// (Used ones each took a person's authorization.)
func (s *Store) UnusedDynamicClientCounts(tenant string) (inTenant, total int, err error) {
	ts, err := s.state(tenant)
	if err != nil {
		return 0, 0, err
	}
	s.f.RLock()
	defer s.f.RUnlock()
	for _, t := range s.tenants {
		total += t.unusedDynamic
	}
	return ts.unusedDynamic, total, nil
}

// expirable: a dynamically registered client nobody has used.
func expirable(c *Client) bool {
	return c.Kind == alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR && c.FirstUsed.IsZero()
}

// countUnused keeps tenantState.unusedDynamic as unused dynamic clients
// come (delta 1) and go (-1: used or expired).
func (ts *tenantState) countUnused(c *Client, delta int) {
	if expirable(c) {
		ts.unusedDynamic += delta
	}
}

// applyClientFirstUsed folds ClientFirstUsed; a repeated one changes
// nothing.
func (ts *tenantState) applyClientFirstUsed(e *alpv1.ClientFirstUsed) error {
	c := ts.clients[e.GetClientId()]
	if c == nil {
		return fmt.Errorf("unknown client")
	}
	if c.FirstUsed.IsZero() {
		ts.countUnused(c, -1)
		c.FirstUsed = e.GetUsed().AsTime()
		if c.FirstUsed.IsZero() {
			return fmt.Errorf("no time of use")
		}
	}
	return nil
}

// applyDynamicClientExpired folds DynamicClientExpired: the client is
// forgotten. One that was used, or is not a dynamic one, is kept (the
// event is refused): only unused dynamic clients expire.
func (ts *tenantState) applyDynamicClientExpired(e *alpv1.DynamicClientExpired) error {
	c := ts.clients[e.GetClientId()]
	switch {
	case c == nil:
		return fmt.Errorf("unknown client")
	case !expirable(c):
		return fmt.Errorf("client %s is not an unused dynamic client", c.Kind)
	}
	ts.countUnused(c, -1)
	delete(ts.clients, e.GetClientId())
	return nil
}

// clientAt reads a copy of a client and the version of its subject, the
// starting point of every command that decides on one client.
func (s *Store) clientAt(ts *tenantState, clientID, subject string) (Client, bool, uint64) {
	s.f.RLock()
	defer s.f.RUnlock()
	c, ok := ts.clients[clientID]
	if !ok {
		return Client{}, false, s.f.Version(subject)
	}
	return c.clone(), true, s.f.Version(subject)
}
