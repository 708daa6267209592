package relationships

import (
	"fmt"
	"slices"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/streams"
)

// apply folds one event into the projection (under the follower's write
// lock). It depends on nothing but the state and the event (time comes
// from the event's header), so every replica that applies the same stream
// ends in the same state. An event that does not fit (wrong subject or
// producer, a transition the state machine does not allow) is refused and
// changes nothing: commands never append one, so it can only come from a
// bug or a foreign writer.
func (s *Store) apply(subject string, _ uint64, ev *alpv1.Event) error {
	if err := streams.CheckProducer(subject, ev); err != nil {
		return err
	}
	tok, aggregate, id, ok := streams.ParsePolicySubject(subject)
	if !ok {
		return fmt.Errorf("not a policy subject")
	}
	tenant := ev.GetHeader().GetTenant()
	ts := s.tenants[tenant]
	if ts == nil || bus.TenantToken(tenant) != tok {
		return fmt.Errorf("tenant %q is not hosted here or not the subject's", tenant)
	}
	at := ev.GetHeader().GetOccurred().AsTime()
	want := func(agg, aid, bodyTenant string) error {
		if aggregate != agg || id != aid || bodyTenant != tenant {
			return fmt.Errorf("%s for %s %s of %q stands on the wrong subject", bus.Kind(ev), agg, aid, bodyTenant)
		}
		return nil
	}
	switch b := ev.GetBody().(type) {
	case *alpv1.Event_ConnectionRequested:
		r := b.ConnectionRequested
		if err := want(streams.PolicyConnection, r.GetConnectionId(), r.GetTenant()); err != nil {
			return err
		}
		from := Party{Person: r.GetFromPerson(), Address: r.GetFromAddress()}
		if (from.Person == "") == (from.Address == "") || r.GetToPerson() == "" ||
			ConnectionID(tenant, from, r.GetToPerson()) != id {
			return fmt.Errorf("connection %s: parties do not match its id", id)
		}
		if c := ts.conns[id]; c != nil {
			return fmt.Errorf("connection %s already %s", id, c.State)
		}
		ts.conns[id] = &Connection{ID: id, From: from, To: r.GetToPerson(), State: ConnRequested, EnvelopeID: r.GetEnvelopeId(), Requested: at}
	case *alpv1.Event_ConnectionAccepted:
		a := b.ConnectionAccepted
		if err := want(streams.PolicyConnection, a.GetConnectionId(), a.GetTenant()); err != nil {
			return err
		}
		return ts.answer(id, a.GetByPerson(), ConnAccepted, at)
	case *alpv1.Event_ConnectionDeclined:
		d := b.ConnectionDeclined
		if err := want(streams.PolicyConnection, d.GetConnectionId(), d.GetTenant()); err != nil {
			return err
		}
		return ts.answer(id, d.GetByPerson(), ConnDeclined, at)
	case *alpv1.Event_PersonBlocked:
		return ts.block(want, streams.PolicyBlocks, b.PersonBlocked.GetTenant(), b.PersonBlocked.GetByPerson(), b.PersonBlocked.GetBlocked(), true)
	case *alpv1.Event_PersonUnblocked:
		return ts.block(want, streams.PolicyBlocks, b.PersonUnblocked.GetTenant(), b.PersonUnblocked.GetByPerson(), b.PersonUnblocked.GetBlocked(), false)
	case *alpv1.Event_OrgRelationshipSet:
		o := b.OrgRelationshipSet
		if err := want(streams.PolicyOrgRule, o.GetRuleId(), o.GetTenant()); err != nil {
			return err
		}
		var r OrgRule
		switch rule := o.GetRule().(type) {
		case *alpv1.OrgRelationshipSet_SameOrg:
			r = OrgRule{Kind: SameOrg}
		case *alpv1.OrgRelationshipSet_RoleMayReceiveFrom:
			r = OrgRule{Kind: RoleMayReceiveFrom, Role: rule.RoleMayReceiveFrom.GetRole(), Domain: rule.RoleMayReceiveFrom.GetDomain()}
		default:
			return fmt.Errorf("org rule %s without a rule", id)
		}
		commits, err := checkCommits(o.GetCommits())
		if err != nil || !slices.Equal(commits, o.GetCommits()) {
			return fmt.Errorf("org rule %s: commits not sorted, distinct valid actions", id)
		}
		r.Commits = commits
		if OrgRuleID(tenant, r) != id {
			return fmt.Errorf("org rule %s: rule does not match its id", id)
		}
		if o.GetActive() {
			ts.org[id] = r
		} else {
			delete(ts.org, id)
		}
	default:
		return fmt.Errorf("%s is no relationships event", bus.Kind(ev))
	}
	return nil
}

func (ts *tenantState) answer(id, by string, to ConnState, at time.Time) error {
	c := ts.conns[id]
	switch {
	case c == nil:
		return fmt.Errorf("connection %s: %s before any request", id, to)
	case c.To != by:
		return fmt.Errorf("connection %s: %s by %s, not the person asked", id, to, by)
	case c.State != ConnRequested:
		return fmt.Errorf("connection %s: %s, but it is %s", id, to, c.State)
	}
	c.State, c.Decided = to, at
	return nil
}

func (ts *tenantState) block(want func(agg, id, tenant string) error, agg, tenant, by string, b *alpv1.Blocked, on bool) error {
	if err := want(agg, by, tenant); err != nil {
		return err
	}
	t, ok := targetOf(b)
	if !ok || t.Value == "" {
		return fmt.Errorf("block by %s without a target", by)
	}
	if on {
		if ts.blocks[by] == nil {
			ts.blocks[by] = map[Target]bool{}
		}
		ts.blocks[by][t] = true
		return nil
	}
	delete(ts.blocks[by], t)
	if len(ts.blocks[by]) == 0 {
		delete(ts.blocks, by)
	}
	return nil
}
