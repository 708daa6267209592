package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/msgtypes/typestore"
	"github.com/alpd-project/alpd/services/policy/relationships"
	"github.com/alpd-project/alpd/services/policy/rules"
	"github.com/alpd-project/alpd/services/policy/rulestore"
)

// DefaultMaxStaleness is how long a replica's projections may go without
// confirming they hold everything on the policy stream before the replica
// stops being ready: a healthy follower confirms about every second.
const DefaultMaxStaleness = relationships.DefaultMaxStaleness

// stores are policy's state on this replica, each a projection of the
// policy stream for every hosted tenant: the relationships, the versioned
// rule sets of every party and the organizations' message types. Every
// decision and every write surface reads them; the service is not ready
// while any of them is stale.
type stores struct {
	Relationships *relationships.Store
	Rules         *rulestore.Store
	Types         *typestore.Store
	// Engine validates and compiles rule sets (Rules uses it too).
	Engine *rules.Engine
}

// openStores opens the three projections on the policy stream, which must
// exist. On failure nothing stays open.
func openStores(ctx context.Context, b *bus.Bus, tenants []string, log *slog.Logger) (*stores, error) {
	engine, err := rules.New(rules.Limits{})
	if err != nil {
		return nil, fmt.Errorf("policy: rules engine: %w", err)
	}
	st := &stores{Engine: engine}
	if st.Relationships, err = relationships.Open(ctx, b, tenants, log); err != nil {
		return nil, fmt.Errorf("policy: open relationships: %w", err)
	}
	if st.Rules, err = rulestore.Open(ctx, b, tenants, engine, 0, log); err != nil {
		st.close()
		return nil, fmt.Errorf("policy: open rule sets: %w", err)
	}
	if st.Types, err = typestore.Open(ctx, b, tenants, log); err != nil {
		st.close()
		return nil, fmt.Errorf("policy: open message types: %w", err)
	}
	return st, nil
}

// close stops following the stream; reads keep answering from the last
// state, writes fail.
func (st *stores) close() {
	if st.Relationships != nil {
		st.Relationships.Close()
	}
	if st.Rules != nil {
		st.Rules.Close()
	}
	if st.Types != nil {
		st.Types.Close()
	}
}

// fresh is nil only if every projection confirmed within maxStaleness that
// it had applied everything on the stream; otherwise it names each stale
// one, so /readyz?verbose=1 says which.
func (st *stores) fresh(maxStaleness time.Duration) error {
	var errs []error
	for _, p := range []struct {
		name  string
		fresh func(time.Duration) error
	}{
		{"relationships", st.Relationships.Fresh},
		{"rule sets", st.Rules.Fresh},
		{"message types", st.Types.Fresh},
	} {
		if err := p.fresh(maxStaleness); err != nil {
			errs = append(errs, fmt.Errorf("policy: %s projection: %w", p.name, err))
		}
	}
	return errors.Join(errs...)
}
