package policy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/msgtypes/typestore"
	"github.com/alpd-project/alpd/services/policy/relationships"
	"github.com/alpd-project/alpd/services/policy/rules"
	"github.com/alpd-project/alpd/services/policy/rulestore"
	"github.com/alpd-project/alpd/services/policy/standing"
)

// compiledSets bounds the compiled rule sets a replica keeps: people on
// the template share one entry, so this is about people with their own.
const compiledSets = 4096

// state is what a decision reads, every replica keeping its own
// projection of each: the people (identity's stream, to resolve addresses
// and roles), the relationships, the rule sets and the organizations'
// types (policy's stream).
type state struct {
	tenants alp.Tenants
	people  *identitystore.Store
	rels    *relationships.Store
	rules   *rulestore.Store
	types   *typestore.Store
	// standing are people's standing rules ("approve always", the
	// approvals stream's rule subjects).
	standing *standing.Store
	// engine validates rule writes (rules uses it; the REST API bounds
	// their bodies by its limit).
	engine *rules.Engine
}

func (s *Service) openState(ctx context.Context) (*state, error) {
	st := &state{tenants: s.Tenants}
	var err error
	if st.people, err = identitystore.Open(ctx, s.Bus, s.Keys, s.Tenants, s.Logger); err != nil {
		return nil, fmt.Errorf("policy: identity projection: %w", err)
	}
	if st.rels, err = relationships.Open(ctx, s.Bus, s.Tenants, s.Logger); err != nil {
		st.close()
		return nil, fmt.Errorf("policy: relationships: %w", err)
	}
	if st.engine, err = rules.New(rules.Limits{}); err != nil {
		st.close()
		return nil, err
	}
	if st.rules, err = rulestore.Open(ctx, s.Bus, s.Tenants, st.engine, compiledSets, s.Logger); err != nil {
		st.close()
		return nil, fmt.Errorf("policy: rule sets: %w", err)
	}
	if st.types, err = typestore.Open(ctx, s.Bus, s.Tenants, s.Logger); err != nil {
		st.close()
		return nil, fmt.Errorf("policy: message types: %w", err)
	}
	if st.standing, err = standing.Open(s.Bus, s.Tenants, s.Logger); err != nil {
		st.close()
		return nil, fmt.Errorf("policy: standing rules: %w", err)
	}
	return st, nil
}

func (st *state) close() {
	if st.people != nil {
		st.people.Close()
	}
	if st.rels != nil {
		st.rels.Close()
	}
	if st.rules != nil {
		st.rules.Close()
	}
	if st.types != nil {
		st.types.Close()
	}
	if st.standing != nil {
		st.standing.Close()
	}
}

// fresh is nil while every projection confirmed within maxStaleness;
// otherwise it names each stale one, always in the same order.
func (st *state) fresh(maxStaleness time.Duration) error {
	var errs []error
	for _, p := range []struct {
		name  string
		fresh func(time.Duration) error
	}{
		{"identity", st.people.Fresh}, {"relationships", st.rels.Fresh}, {"rules", st.rules.Fresh}, {"types", st.types.Fresh},
		{"standing rules", st.standing.Fresh},
	} {
		if err := p.fresh(maxStaleness); err != nil {
			errs = append(errs, fmt.Errorf("policy: %s projection: %w", p.name, err))
		}
	}
	return errors.Join(errs...)
}
