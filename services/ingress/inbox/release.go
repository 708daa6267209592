package inbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/streams"
)

// The person's decisions on held items (docs/inbox.md, "Held items and
// the person's decisions").
//
// Approvals records each decision on the item's subject of its stream;
// ingress's consumer on those subjects (Release) copies it, once, to the
// person's inbox, alp.inbox.<tenant>.<person>.decision.<envelope>.<held id>
// (an expected-empty append: a redelivered decision is recorded once). The
// projection applies it to the envelope's item: an approved held
// commitment opens the held message to every agent of the person, approved
// confidential fields join the consumer-class view; the held body was
// sealed by policy with the person's data key, bound to the envelope and
// the held item (seal.HeldAAD). An agent that had acknowledged the item
// without the released fields is offered it again, at the decision's place
// in the inbox (its cursor), and acknowledges it again on
// alp.inbox.<tenant>.<person>.ack.<agent token>.<envelope>.<held id>. A
// decision that releases nothing (denied, expired, superseded, cancelled)
// changes only the held notice, which then says what was decided.

// Approval states as agents read them (Held.State), the approvals
// service's names.
const (
	StatePending        = "pending"
	StateApprovedOnce   = "approved_once"
	StateApprovedAlways = "approved_always"
	StateDenied         = "denied"
	StateExpired        = "expired"
	StateSuperseded     = "superseded"
	StateCancelled      = "cancelled"
)

// ApprovalStateName is the name of an approval state; "pending" for a
// state this broker does not know (it releases nothing).
func ApprovalStateName(s alpv1.ApprovalState) string {
	switch s {
	case alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ONCE:
		return StateApprovedOnce
	case alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ALWAYS:
		return StateApprovedAlways
	case alpv1.ApprovalState_APPROVAL_STATE_DENIED:
		return StateDenied
	case alpv1.ApprovalState_APPROVAL_STATE_EXPIRED:
		return StateExpired
	case alpv1.ApprovalState_APPROVAL_STATE_SUPERSEDED:
		return StateSuperseded
	case alpv1.ApprovalState_APPROVAL_STATE_CANCELLED:
		return StateCancelled
	}
	return StatePending
}

// Approved reports whether a state releases what was held.
func Approved(s alpv1.ApprovalState) bool {
	return s == alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ONCE || s == alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ALWAYS
}

// DecisionText says a decision in words, for the held notice.
func DecisionText(d *alpv1.ApprovalDecided) string {
	switch d.GetState() {
	case alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ONCE:
		return "approved by the person"
	case alpv1.ApprovalState_APPROVAL_STATE_APPROVED_ALWAYS:
		return "approved by the person, also for later ones like it"
	case alpv1.ApprovalState_APPROVAL_STATE_DENIED:
		return "denied by the person"
	case alpv1.ApprovalState_APPROVAL_STATE_EXPIRED:
		return "expired before the person decided (as denied)"
	case alpv1.ApprovalState_APPROVAL_STATE_SUPERSEDED:
		return "superseded by a later request from the same sender"
	case alpv1.ApprovalState_APPROVAL_STATE_CANCELLED:
		if r := d.GetReason(); r != "" {
			return "cancelled: " + r
		}
		return "cancelled: nothing is left to decide"
	}
	return "waiting for the person"
}

// decision is one of the person's decisions on a held item of an entry,
// at its place in the inbox.
type decision struct {
	seq uint64
	d   *alpv1.ApprovalDecided
}

// ackState is what one agent acknowledged of one item: the item as first
// offered, and the item again after each release (by held id).
type ackState struct {
	base     bool
	released map[string]bool
}

// releasing is a decision that opens a held item to the agent reading it.
type releasing struct {
	seq  uint64
	held *alpv1.HeldItem
}

// releases are the decisions of e that open something to an agent reading
// the view of class (its trust class's, or the consumer view a company
// agent without one reads), in inbox order: an approved commitment opens
// the held message to every agent; approved confidential fields open to
// the consumer-class view (the company view has them already). decided
// has every decision of e by held id.
func releases(e *entry, ds []decision, class string) (out []releasing, decided map[string]*alpv1.ApprovalDecided) {
	for _, dc := range ds {
		var held *alpv1.HeldItem
		for _, h := range e.dv.GetHeld() {
			if h.GetId() == dc.d.GetItemId() && h.GetKind() == dc.d.GetKind() {
				held = h
			}
		}
		if held == nil {
			continue // about no held item of this envelope: nothing to apply
		}
		if decided == nil {
			decided = map[string]*alpv1.ApprovalDecided{}
		}
		decided[held.GetId()] = dc.d
		if !Approved(dc.d.GetState()) {
			continue
		}
		switch held.GetKind() {
		case alpv1.HeldKind_HELD_KIND_COMMITMENT:
			out = append(out, releasing{seq: dc.seq, held: held})
		case alpv1.HeldKind_HELD_KIND_CONFIDENTIAL_FIELDS:
			if class != classCompany {
				out = append(out, releasing{seq: dc.seq, held: held})
			}
		}
	}
	return out, decided
}

// lastRelease is the latest release of e for agent a (nil: none): the one
// its acknowledgement must cover.
func (s *Store) lastRelease(a Agent, e *entry) *releasing {
	if len(e.decisions) == 0 {
		return nil
	}
	rs, _ := releases(e, e.decisions, s.view(a, e.dv, nil).class())
	if len(rs) == 0 {
		return nil
	}
	return &rs[len(rs)-1]
}

// offered is where e stands in a's inbox (its cursor): the item's place,
// or the latest decision that released something to a.
func (s *Store) offered(a Agent, e *entry) uint64 {
	if r := s.lastRelease(a, e); r != nil && r.seq > e.seq {
		return r.seq
	}
	return e.seq
}

// acked reports whether a acknowledged e as it stands now: the item, and
// the latest release to a if any. Under f's read lock.
func (s *Store) acked(p *person, a Agent, tok string, e *entry) bool {
	st := p.acks[tok][e.id]
	if st == nil || !st.base {
		return false
	}
	r := s.lastRelease(a, e)
	return r == nil || st.released[r.held.GetId()]
}

// Release is the handler of ingress's consumer on approvals' items: it
// records the person's decision on a held item in their inbox, once.
// Requests (the first event of an item) are approvals' own.
func (s *Store) Release(ctx context.Context, d bus.Delivery) error {
	body, ok := d.Event.GetBody().(*alpv1.Event_ApprovalDecided)
	if !ok {
		return nil // a request: nothing is decided yet
	}
	dec := body.ApprovalDecided
	tenant, personID, envelopeID, heldID := d.Event.GetHeader().GetTenant(), dec.GetPersonId(), dec.GetEnvelopeId(), dec.GetItemId()
	switch {
	case !s.o.Tenants.Hosts(tenant) || alp.ValidatePersonID(personID) != nil:
		return bus.Permanent(fmt.Errorf("inbox: decision without hosted tenant or person (tenant %q)", tenant))
	case envelopeID == "" || heldID == "":
		return bus.Permanent(fmt.Errorf("inbox: decision on %s without envelope or item", d.Subject))
	case dec.GetState() == alpv1.ApprovalState_APPROVAL_STATE_PENDING || dec.GetState() == alpv1.ApprovalState_APPROVAL_STATE_UNSPECIFIED:
		return bus.Permanent(fmt.Errorf("inbox: decision on %s decides nothing (%s)", d.Subject, dec.GetState()))
	}
	// alp.approvals.<tenant>.<person>.item.<item>: the decision is about
	// the person and item its subject is for.
	if want, err := streams.ApprovalItemSubject(tenant, personID, heldID); err != nil || want != d.Subject {
		return bus.Permanent(fmt.Errorf("inbox: decision on %s names another person or item", d.Subject))
	}
	people := s.identity()
	if people == nil {
		return fmt.Errorf("%w: identity's projection is not open yet", ErrUnavailable)
	}
	if _, err := people.Person(ctx, tenant, personID); errors.Is(err, identitystore.ErrNotFound) {
		s.log.Info("decision for a person who is gone not recorded", "tenant", tenant, "envelope", envelopeID)
		return nil
	} else if err != nil {
		return fmt.Errorf("inbox: the person: %w", err)
	}
	subject, err := streams.InboxDecisionSubject(tenant, personID, envelopeID, heldID)
	if err != nil {
		return bus.Permanent(err)
	}
	ev := s.o.NewEvent("approval_decided", tenant, d.Event, envelopeID, nil)
	ev.Body = &alpv1.Event_ApprovalDecided{ApprovalDecided: proto.CloneOf(dec)}
	if _, err := s.o.Bus.Append(ctx, subject, 0, ev); err != nil && !errors.Is(err, bus.ErrConflict) {
		return fmt.Errorf("inbox: recording the decision on %s: %w", heldID, err)
	}
	return nil
}

// applyDecision adds a decision to its entry (or keeps it for the entry
// still to come: the two subjects are not ordered). Under f's lock.
func (p *person) applyDecision(seq uint64, dec *alpv1.ApprovalDecided) {
	id := dec.GetEnvelopeId()
	dc := decision{seq: seq, d: dec}
	if e := p.byID[id]; e != nil {
		e.decisions = append(e.decisions, dc)
		return
	}
	if p.early == nil {
		p.early = map[string][]decision{}
	}
	p.early[id] = append(p.early[id], dc)
}

// applyAck records an acknowledgement: of the item as first offered
// (….ack.<agent>.<envelope>) or again after a release (….<held id>).
// Under f's lock.
func (p *person) applyAck(subject string, ack *alpv1.InboxAcked) {
	tok := streams.AgentToken(ack.GetAgentId())
	if p.acks[tok] == nil {
		p.acks[tok] = map[string]*ackState{}
	}
	st := p.acks[tok][ack.GetEnvelopeId()]
	if st == nil {
		st = &ackState{}
		p.acks[tok][ack.GetEnvelopeId()] = st
	}
	// alp.inbox.<tenant>.<person>.ack.<agent token>.<envelope>[.<held id>]
	parts := strings.Split(subject, ".")
	if len(parts) == 8 {
		if st.released == nil {
			st.released = map[string]bool{}
		}
		st.released[parts[7]] = true
		return
	}
	st.base = true
}

// mergeJSON lays the members of add over base (both JSON objects, as
// policy cuts views and held items from one body): objects merge member
// by member, anything else add's. Numbers stay as they were written.
func mergeJSON(base, add []byte) ([]byte, error) {
	if len(base) == 0 {
		return add, nil
	}
	decode := func(b []byte) (any, error) {
		var v any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		return v, nil
	}
	a, err := decode(base)
	if err != nil {
		return nil, fmt.Errorf("the view is not JSON: %w", err)
	}
	b, err := decode(add)
	if err != nil {
		return nil, fmt.Errorf("the released fields are not JSON: %w", err)
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(merge(a, b)); err != nil {
		return nil, err
	}
	return bytes.TrimRight(out.Bytes(), "\n"), nil
}

func merge(a, b any) any {
	am, ok1 := a.(map[string]any)
	bm, ok2 := b.(map[string]any)
	if !ok1 || !ok2 {
		return b
	}
	for k, v := range bm {
		if old, ok := am[k]; ok {
			am[k] = merge(old, v)
		} else {
			am[k] = v
		}
	}
	return am
}
