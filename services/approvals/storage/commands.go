package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/seal"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/approvals/items"
)

const maxAttempts = 5

// Sender is what the approvals service knows of who sent a deliverable:
// the agent's name, class and attestation (identity's projection for a
// sender on this broker; the origin broker's word for one elsewhere).
type Sender struct {
	AgentName    string
	AgentClass   string
	Attested     bool
	Verification string
}

// Request makes an item of each held item of a deliverable: one
// ApprovalRequested per item subject, written once (a redelivered
// deliverable finds the subject taken). A pending item of the same person
// from the same sender about the same thing (same kind, type and
// in_reply_to) is superseded by the new one.
func (s *Store) Request(ctx context.Context, cause *alpv1.Event, dv *alpv1.Deliverable, from Sender) error {
	tenant := cause.GetHeader().GetTenant()
	env := dv.GetEnvelope()
	person := dv.GetRecipientPersonId()
	if err := alp.ValidatePersonID(person); err != nil {
		return bus.Permanent(fmt.Errorf("approvals: deliverable %s: recipient: %w", env.GetId(), err))
	}
	classes := map[string]string{}
	var reasons []*alpv1.Reason
	for _, f := range dv.GetFields() {
		classes[f.GetPointer()] = f.GetClass()
		if f.GetAction() == alpv1.FieldAction_FIELD_ACTION_HOLD {
			reasons = append(reasons, f.GetReasons()...)
		}
	}
	reasons = append(slices.Clone(dv.GetReasons()), reasons...)
	now := s.cfg.Now()
	for _, h := range dv.GetHeld() {
		kind := kindOf(h.GetKind())
		plain, err := s.cfg.Sealer.Open(ctx, h.GetBody(), seal.HeldAAD(env.GetId(), h.GetId()))
		if errors.Is(err, seal.ErrKeyDestroyed) {
			// The person was erased: nothing is left for them to decide.
			continue
		} else if err != nil {
			return fmt.Errorf("approvals: opening held item %s: %w", h.GetId(), err)
		}
		digest := PayloadDigest(kind, env.GetId(), h.GetId(), plain)
		expires := now.Add(s.cfg.Expiry.of(kind))
		if e := env.GetExpires(); e != nil && e.AsTime().Before(expires) {
			expires = e.AsTime()
		}
		r := &alpv1.ApprovalRequested{
			ItemId: h.GetId(), PersonId: person, Kind: h.GetKind(), EnvelopeId: env.GetId(),
			From: env.GetFrom(), FromAgent: env.GetFromAgent(), AgentName: from.AgentName, AgentClass: from.AgentClass,
			Attested: from.Attested, Verification: from.Verification, SenderPersonId: dv.GetSenderPersonId(),
			OriginBroker: dv.GetOriginBroker(), Type: env.GetType(), InReplyTo: thread(env, plain), Commits: h.GetCommits(),
			Payload: h.GetBody(), PayloadDigest: digest, Reasons: reasons, BindingCode: BindingCode(digest),
			Expires: timestamppb.New(expires), Created: timestamppb.New(now),
		}
		for _, p := range h.GetPointers() {
			r.Disclosed = append(r.Disclosed, &alpv1.DisclosedField{Pointer: p, Class: classes[p]})
		}
		subj, err := streams.ApprovalItemSubject(tenant, person, h.GetId())
		if err != nil {
			return bus.Permanent(fmt.Errorf("approvals: item subject: %w", err))
		}
		ev := newEvent("approval_requested", tenant, env.GetId(), cause, serviceActor(), now)
		ev.Body = &alpv1.Event_ApprovalRequested{ApprovalRequested: r}
		// The message id derives from the held item, so a retried append
		// after a lost ack is the same message, not a conflict.
		ev.Header.EventId = bus.HashID("approval_requested", tenant, h.GetId())
		seq, err := s.cfg.Bus.Append(ctx, subj, 0, ev)
		if errors.Is(err, bus.ErrConflict) {
			continue // requested before: a redelivery
		} else if err != nil {
			return err
		}
		if err := s.f.WaitApplied(ctx, seq); err != nil {
			return fmt.Errorf("approvals: item %s stored but not yet applied: %w", h.GetId(), err)
		}
		if err := s.supersede(ctx, ev, tenant, person, h.GetId()); err != nil {
			return err
		}
	}
	return nil
}

// thread is what a request answers: the envelope's in_reply_to, or the
// body's own (the meeting types carry it as a field), so that a newer
// answer in the same thread supersedes a pending one.
func thread(env *alpv1.Envelope, held []byte) string {
	if r := env.GetInReplyTo(); r != "" {
		return r
	}
	var body struct {
		InReplyTo string `json:"in_reply_to"`
	}
	if json.Unmarshal(held, &body) == nil {
		return body.InReplyTo
	}
	return ""
}

// supersede ends the person's other pending items from the same sender
// about the same thing as item newID.
func (s *Store) supersede(ctx context.Context, cause *alpv1.Event, tenant, person, newID string) error {
	s.f.RLock()
	n := s.items[key{tenant, person, newID}].Item
	var older []string
	for _, id := range s.byPerson[personKey{tenant, person}] {
		o := s.items[key{tenant, person, id}].Item
		if id != newID && o.State == items.Pending && o.Kind == n.Kind && o.From == n.From && o.Type == n.Type &&
			o.InReplyTo != "" && o.InReplyTo == n.InReplyTo {
			older = append(older, id)
		}
	}
	s.f.RUnlock()
	for _, id := range older {
		_, err := s.end(ctx, cause, tenant, person, id, items.Superseded, serviceActor(), func(d *alpv1.ApprovalDecided) {
			d.SupersededBy, d.Reason = newID, "a newer request from the same sender replaced it"
		})
		if err != nil && !errors.Is(err, items.ErrDecided) {
			return err
		}
	}
	return nil
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// Decide implements items.Store.
func (s *Store) Decide(ctx context.Context, tenant, personID, id string, d items.Decision, payloadDigest string, by items.Actor) (items.Item, error) {
	if !idPattern.MatchString(id) {
		return items.Item{}, fmt.Errorf("%w: item id %q", items.ErrInvalid, id)
	}
	var state items.State
	switch d {
	case items.ApproveOnce:
		state = items.ApprovedOnce
	case items.ApproveAlways:
		state = items.ApprovedAlways
	case items.Deny:
		state = items.Denied
	default:
		return items.Item{}, fmt.Errorf("%w: decision %q (approve_once, approve_always or deny)", items.ErrInvalid, d)
	}
	if by.PersonID != personID {
		return items.Item{}, fmt.Errorf("%w: %s", items.ErrNotFound, id)
	}
	it, err := s.Get(ctx, tenant, personID, id)
	if err != nil {
		return it, err
	}
	if it.State.Terminal() {
		if it.State == items.ApprovedAlways {
			// The decision is stored; make sure its rule is too (a crash
			// between the two appends).
			if err := s.createRule(ctx, nil, it, by); err != nil {
				return it, err
			}
		}
		return it, fmt.Errorf("%w: %s is %s", items.ErrDecided, id, it.State)
	}
	if payloadDigest != it.PayloadDigest {
		return it, fmt.Errorf("%w: the decision was made on another version of %s", items.ErrDigest, id)
	}
	if !it.Expires.After(s.cfg.Now()) {
		final, err := s.expire(ctx, it)
		if err != nil && !errors.Is(err, items.ErrDecided) {
			return it, err
		}
		return final, fmt.Errorf("%w: %s expired at %s", items.ErrDecided, id, it.Expires.UTC().Format(time.RFC3339))
	}
	offered := false
	for _, o := range it.Offers() {
		offered = offered || o == d
	}
	if !offered {
		return it, fmt.Errorf("%w: %s is not offered for a %s from a %s agent", items.ErrNotOffered, d, it.Kind, attestation(it.Attested))
	}
	if _, err := s.cfg.Sealer.Open(ctx, it.Payload, seal.HeldAAD(it.EnvelopeID, it.ID)); errors.Is(err, seal.ErrKeyDestroyed) {
		final, cerr := s.end(ctx, nil, tenant, personID, id, items.Cancelled, serviceActor(), func(d *alpv1.ApprovalDecided) {
			d.Reason = "the held values were erased"
		})
		if cerr != nil && !errors.Is(cerr, items.ErrDecided) {
			return it, cerr
		}
		return final, fmt.Errorf("%w: %s was cancelled: the held values were erased", items.ErrDecided, id)
	}
	ruleID := ""
	if state == items.ApprovedAlways {
		ruleID = RuleID(tenant, personID, id)
	}
	final, err := s.end(ctx, nil, tenant, personID, id, state, personActor(by), func(d *alpv1.ApprovalDecided) {
		d.StandingRuleId = ruleID
	})
	if err != nil {
		return final, err
	}
	if ruleID != "" {
		if err := s.createRule(ctx, nil, final, by); err != nil {
			return final, err
		}
	}
	return final, nil
}

func attestation(attested bool) string {
	if attested {
		return "attested"
	}
	return "self-attested"
}

// RuleID is the id of the standing rule an item's approve-always created.
func RuleID(tenant, personID, itemID string) string {
	return "r" + bus.HashID("standing_rule", tenant, personID, itemID)
}

// end appends the item's one decision, expecting the item's subject to end
// with its request: if another decision came first, ErrDecided with the
// item as that decision left it.
func (s *Store) end(ctx context.Context, cause *alpv1.Event, tenant, personID, id string, state items.State, actor *alpv1.Actor,
	fill func(*alpv1.ApprovalDecided)) (items.Item, error) {
	subj, err := streams.ApprovalItemSubject(tenant, personID, id)
	if err != nil {
		return items.Item{}, fmt.Errorf("%w: %v", items.ErrInvalid, err)
	}
	for attempt := 1; ; attempt++ {
		s.f.RLock()
		version := s.f.Version(subj)
		e, ok := s.items[key{tenant, personID, id}]
		var it items.Item
		if ok {
			it = e.Item
		}
		s.f.RUnlock()
		if !ok {
			return it, fmt.Errorf("%w: %s", items.ErrNotFound, id)
		}
		if it.State.Terminal() {
			return it, fmt.Errorf("%w: %s is %s", items.ErrDecided, id, it.State)
		}
		d := &alpv1.ApprovalDecided{ItemId: id, PersonId: personID, Kind: heldKind(it.Kind), EnvelopeId: it.EnvelopeID,
			State: stateProto(state), PayloadDigest: it.PayloadDigest, From: it.From, Type: it.Type,
			OriginBroker: it.OriginBroker, Commits: it.Commits}
		for _, f := range it.Disclosed {
			d.Pointers = append(d.Pointers, f.Pointer)
		}
		if fill != nil {
			fill(d)
		}
		ev := newEvent("approval_decided", tenant, it.EnvelopeID, cause, actor, s.cfg.Now())
		ev.Body = &alpv1.Event_ApprovalDecided{ApprovalDecided: d}
		seq, err := s.cfg.Bus.Append(ctx, subj, version, ev)
		if err == nil {
			if err := s.f.WaitApplied(ctx, seq); err != nil {
				return it, fmt.Errorf("approvals: decision on %s stored at %d but not yet applied: %w", id, seq, err)
			}
			return s.Get(ctx, tenant, personID, id)
		}
		if !errors.Is(err, bus.ErrConflict) || attempt == maxAttempts {
			return it, fmt.Errorf("approvals: deciding %s: %w", id, err)
		}
		if err := s.f.WaitSubject(ctx, subj); err != nil {
			return it, fmt.Errorf("approvals: deciding %s: reload after conflict: %w", id, err)
		}
	}
}

// createRule stores the standing rule of an approved-always item, once.
func (s *Store) createRule(ctx context.Context, cause *alpv1.Event, it items.Item, by items.Actor) error {
	if it.StandingRuleID == "" {
		return nil
	}
	subj, err := streams.StandingRuleSubject(it.Tenant, it.PersonID, it.StandingRuleID)
	if err != nil {
		return fmt.Errorf("approvals: rule subject: %w", err)
	}
	now := s.cfg.Now()
	ev := newEvent("standing_rule_created", it.Tenant, it.EnvelopeID, cause, personActor(by), now)
	ev.Header.EventId = bus.HashID("standing_rule_created", it.StandingRuleID)
	ev.Body = &alpv1.Event_StandingRuleCreated{StandingRuleCreated: &alpv1.StandingRuleCreated{
		RuleId: it.StandingRuleID, PersonId: it.PersonID, Type: it.Type, Counterparty: it.From, Action: it.Commits,
		Expires: timestamppb.New(now.Add(s.cfg.Expiry.StandingRule)), FromItemId: it.ID,
	}}
	seq, err := s.cfg.Bus.Append(ctx, subj, 0, ev)
	if errors.Is(err, bus.ErrConflict) {
		return nil // created before
	} else if err != nil {
		return fmt.Errorf("approvals: creating standing rule %s: %w", it.StandingRuleID, err)
	}
	return s.f.WaitApplied(ctx, seq)
}

// RevokeRule implements items.Store.
func (s *Store) RevokeRule(ctx context.Context, tenant, personID, ruleID string, by items.Actor) (items.StandingRule, error) {
	if !idPattern.MatchString(ruleID) || by.PersonID != personID {
		return items.StandingRule{}, fmt.Errorf("%w: rule %s", items.ErrNotFound, ruleID)
	}
	subj, err := streams.StandingRuleSubject(tenant, personID, ruleID)
	if err != nil {
		return items.StandingRule{}, fmt.Errorf("%w: %v", items.ErrInvalid, err)
	}
	for attempt := 1; ; attempt++ {
		s.f.RLock()
		version := s.f.Version(subj)
		r, ok := s.rules[key{tenant, personID, ruleID}]
		var rule items.StandingRule
		if ok {
			rule = *r
		}
		s.f.RUnlock()
		if !ok {
			return rule, fmt.Errorf("%w: rule %s", items.ErrNotFound, ruleID)
		}
		if rule.Revoked {
			return rule, nil
		}
		ev := newEvent("standing_rule_revoked", tenant, ruleID, nil, personActor(by), s.cfg.Now())
		ev.Body = &alpv1.Event_StandingRuleRevoked{StandingRuleRevoked: &alpv1.StandingRuleRevoked{RuleId: ruleID, PersonId: personID}}
		seq, err := s.cfg.Bus.Append(ctx, subj, version, ev)
		if err == nil {
			if err := s.f.WaitApplied(ctx, seq); err != nil {
				return rule, fmt.Errorf("approvals: revoking %s stored but not yet applied: %w", ruleID, err)
			}
			rule.Revoked = true
			return rule, nil
		}
		if !errors.Is(err, bus.ErrConflict) || attempt == maxAttempts {
			return rule, fmt.Errorf("approvals: revoking %s: %w", ruleID, err)
		}
		if err := s.f.WaitSubject(ctx, subj); err != nil {
			return rule, fmt.Errorf("approvals: revoking %s: reload after conflict: %w", ruleID, err)
		}
	}
}

func (s *Store) expire(ctx context.Context, it items.Item) (items.Item, error) {
	return s.end(ctx, nil, it.Tenant, it.PersonID, it.ID, items.Expired, serviceActor(), func(d *alpv1.ApprovalDecided) {
		d.Reason = "not decided before " + it.Expires.UTC().Format(time.RFC3339) + ": as denied"
	})
}

// Sweep ends every pending item whose time is up (expired means denied),
// and every connection request answered on the connections page instead
// (cancelled: nothing left to decide). Several replicas may sweep at once:
// the first append wins. It answers how many items it ended.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	now := s.cfg.Now()
	n := 0
	var errs []error
	for _, it := range s.Pending() {
		var err error
		switch answer := s.answerOf(it.EnvelopeID); {
		case it.Kind == items.ConnectionRequest && answer != "":
			_, err = s.end(ctx, nil, it.Tenant, it.PersonID, it.ID, items.Cancelled, serviceActor(), func(d *alpv1.ApprovalDecided) {
				d.Reason = "answered on the connections page: " + answer
			})
		case !it.Expires.After(now):
			_, err = s.expire(ctx, it)
		default:
			continue
		}
		if err == nil {
			n++
		} else if !errors.Is(err, items.ErrDecided) {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}
