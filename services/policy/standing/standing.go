// Package standing is policy's projection of the standing rules people
// create on the approvals page ("approve always"): the approvals stream's
// rule subjects, alp.approvals.<tenant>.<person>.rule.<rule>, each a
// StandingRuleCreated and at most one StandingRuleRevoked after it. The
// recipient side of a commitment asks it which rules the recipient has
// ([Store.Rules]); services/policy/decision says which of them cover a
// message.
//
// The approvals service owns the stream and may start after policy (in one
// process policy starts first): [Open] returns at once and keeps trying to
// follow the stream until it exists. Until the projection has caught up,
// and whenever it is stale, [Store.Fresh] fails and the replica is not
// ready; a commitment decided meanwhile finds no rule and is held for the
// person, which asks them rather than committing them.
package standing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/projection"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/policy/decision"
)

// ErrNotOpen: the approvals stream could not be followed yet.
var ErrNotOpen = errors.New("standing: not following the approvals stream yet")

// retry bounds the wait between attempts to follow the stream.
const (
	retryMin = 100 * time.Millisecond
	retryMax = 2 * time.Second
)

// Store is a replica's projection of the standing rules of some tenants.
// Safe for concurrent use.
type Store struct {
	log     *slog.Logger
	tenants map[string]bool

	mu sync.RWMutex
	f  *projection.Follower // nil until the stream is followed
	// rules by tenant, then person, then rule id; a revoked rule is gone.
	rules map[string]map[string]map[string]decision.StandingRule

	cancel context.CancelFunc
	done   chan struct{}
}

// Open starts following the standing rules of tenants on b's broker and
// returns at once; the projection is fresh once it has caught up.
func Open(b *bus.Bus, tenants []string, log *slog.Logger) (*Store, error) {
	if b == nil || len(tenants) == 0 {
		return nil, errors.New("standing: a bus and at least one tenant are required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{log: log.With("component", "standing"), tenants: map[string]bool{},
		rules: map[string]map[string]map[string]decision.StandingRule{}, done: make(chan struct{})}
	for _, t := range tenants {
		s.tenants[t] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.follow(ctx, b)
	return s, nil
}

// follow opens the projection, trying again with backoff while the
// stream is missing or NATS is away, until it is open or the store
// closed.
func (s *Store) follow(ctx context.Context, b *bus.Bus) {
	defer close(s.done)
	wait := retryMin
	for {
		f, err := projection.Open(ctx, b, projection.Config{
			Stream: streams.Approvals, Filters: []string{streams.StandingRuleFilter()},
			Apply: s.apply, Name: "standing", Log: s.log,
		})
		if err == nil {
			s.mu.Lock()
			s.f = f
			s.mu.Unlock()
			return
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Debug("standing rules not followed yet; trying again", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, retryMax)
	}
}

// Close stops following the stream; Rules keeps answering from the last
// state.
func (s *Store) Close() {
	s.cancel()
	<-s.done
	if f := s.follower(); f != nil {
		f.Close()
	}
}

func (s *Store) follower() *projection.Follower {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.f
}

// Fresh is nil only once the projection caught up and has confirmed
// within maxStaleness that it applied everything on the stream.
func (s *Store) Fresh(maxStaleness time.Duration) error {
	f := s.follower()
	if f == nil {
		return ErrNotOpen
	}
	return f.Fresh(maxStaleness)
}

// Applied is the stream sequence of the last event applied (0 before the
// stream is followed).
func (s *Store) Applied() uint64 {
	if f := s.follower(); f != nil {
		return f.Applied()
	}
	return 0
}

// Rules are person's standing rules of tenant that were not revoked,
// sorted by id; expired ones are included (whether a rule covers a
// message depends on the time of the decision, decision's to check).
func (s *Store) Rules(tenant, person string) []decision.StandingRule {
	f := s.follower()
	if f == nil {
		return nil
	}
	f.RLock()
	defer f.RUnlock()
	byID := s.rules[tenant][person]
	out := make([]decision.StandingRule, 0, len(byID))
	for _, r := range byID {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b decision.StandingRule) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// apply folds one event in (under the follower's write lock). An event
// that does not fit its subject, a rule without its scope, or a revoke of
// a rule never created is refused and changes nothing.
func (s *Store) apply(subject string, _ uint64, ev *alpv1.Event) error {
	if err := streams.CheckProducer(subject, ev); err != nil {
		return err
	}
	tenant := ev.GetHeader().GetTenant()
	if !s.tenants[tenant] {
		return nil // another broker's tenant on a shared stream: not ours
	}
	at := func(person, rule string) error {
		want, err := streams.StandingRuleSubject(tenant, person, rule)
		if err != nil || want != subject {
			return fmt.Errorf("%s of rule %q of %q stands on the wrong subject", bus.Kind(ev), rule, person)
		}
		return nil
	}
	switch b := ev.GetBody().(type) {
	case *alpv1.Event_StandingRuleCreated:
		c := b.StandingRuleCreated
		if err := at(c.GetPersonId(), c.GetRuleId()); err != nil {
			return err
		}
		if msgtypes.ValidateName(c.GetType()) != nil || c.GetCounterparty() == "" || msgtypes.CheckCommitWord(c.GetAction()) != nil {
			return fmt.Errorf("standing rule %s without a valid type, counterparty or action", c.GetRuleId())
		}
		people := s.rules[tenant]
		if people == nil {
			people = map[string]map[string]decision.StandingRule{}
			s.rules[tenant] = people
		}
		if people[c.GetPersonId()] == nil {
			people[c.GetPersonId()] = map[string]decision.StandingRule{}
		}
		if _, ok := people[c.GetPersonId()][c.GetRuleId()]; ok {
			return fmt.Errorf("standing rule %s created twice", c.GetRuleId())
		}
		r := decision.StandingRule{ID: c.GetRuleId(), Type: c.GetType(), Counterparty: c.GetCounterparty(), Action: c.GetAction()}
		if c.GetExpires() != nil {
			r.Expires = c.GetExpires().AsTime()
		}
		people[c.GetPersonId()][c.GetRuleId()] = r
	case *alpv1.Event_StandingRuleRevoked:
		r := b.StandingRuleRevoked
		if err := at(r.GetPersonId(), r.GetRuleId()); err != nil {
			return err
		}
		byID := s.rules[tenant][r.GetPersonId()]
		if _, ok := byID[r.GetRuleId()]; !ok {
			return fmt.Errorf("standing rule %s revoked but never created", r.GetRuleId())
		}
		delete(byID, r.GetRuleId())
	default:
		return fmt.Errorf("%s is no standing rule event", bus.Kind(ev))
	}
	return nil
}
