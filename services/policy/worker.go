package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/seal"
	"github.com/alpd-project/alpd/services/policy/decision"
	"github.com/alpd-project/alpd/services/policy/relationships"
	"github.com/alpd-project/alpd/services/policy/rules"
)

// Reason codes of the worker itself, for messages it cannot decide on
// their merits. They are refusals: the broker fails closed.
const (
	codeUnknownRecipient = "unknown_recipient"
	codeUnknownSender    = "unknown_sender"
	codeBodyUnavailable  = "body_unavailable"
	codeUntrustedSender  = "untrusted_sender"
	codeRulesInvalid     = "rules_invalid"
	// A stranger who was declined may not ask again.
	codeConnectionDeclined = "connection_declined"
	// A type only the broker sends (connection.accept/v1).
	codeBrokerOnlyType = "broker_only_type"
)

// side is one end of a message as the worker resolved it.
type side struct {
	tenant   string
	address  string
	personID string // empty for a remote address
	roles    []string
}

func (s side) local() bool { return s.personID != "" }

// rulesSide is s as the entity model names it. The organization is the
// address's domain, which is the tenant: a tenant is its domain.
func (s side) rulesSide() rules.Side {
	return rules.Side{Address: s.address, Tenant: s.tenant, Org: s.tenant, Roles: s.roles}
}

// party is how the relationships store names s, seen from a person of
// tenant: a person of the same tenant by id, anyone else by address.
func (s side) party(tenant string) relationships.Party {
	if s.local() && s.tenant == tenant {
		return relationships.Party{Person: s.personID}
	}
	return relationships.Party{Address: s.address}
}

// verdict is one SendRequested's decision, ready to publish.
type verdict struct {
	decided     *alpv1.Decided
	deliverable *alpv1.Deliverable // nil unless the recipient is hosted here and the sender side let something through
	recipient   side
}

// refusal is a message that cannot be decided on its merits: the broker
// refuses it with one of the worker's own codes.
type refusal struct{ code, message string }

// evaluation is one message's decision with what it was decided on.
type evaluation struct {
	refused   *refusal
	d         decision.Decision
	sender    side
	recipient side
	versions  []string
	// The relationship as each side saw it.
	senderRel, recipientRel relationships.State
}

// evaluate resolves the recipient, gathers every party's set and the
// relationships, and runs the message through the sender side and, for a
// recipient on this broker, the recipient side. sender.roles is filled in
// here. An error is transient (a projection unavailable).
func (st *state) evaluate(ctx context.Context, sender side, agent rules.Agent, to, typeName string, body []byte, recipientAgentClasses []string) (evaluation, error) {
	ev := evaluation{sender: sender}
	refuse := func(code, msg string) (evaluation, error) {
		ev.refused = &refusal{code, msg}
		return ev, nil
	}
	roles, err := st.people.Roles(sender.tenant, sender.personID)
	if errors.Is(err, identitystore.ErrNotFound) {
		return refuse(codeUnknownSender, "the sender is not known here (erased?)")
	} else if err != nil {
		return ev, fmt.Errorf("policy: sender: %w", err)
	}
	ev.sender.roles = roles
	sender = ev.sender

	if ev.recipient, err = st.resolve(ctx, to); err != nil {
		if errors.Is(err, identitystore.ErrNotFound) {
			return refuse(codeUnknownRecipient, "no person on this broker has that address")
		}
		return ev, err
	}
	recipient := ev.recipient

	typ, _ := st.types.Registry().Lookup(typeName)
	msg := decision.Message{Type: typ, Body: body, Agent: agent, Sender: sender.rulesSide(), Recipient: recipient.rulesSide()}

	if recipient.local() {
		if err := st.preapprovals(&msg, sender, recipient); err != nil {
			return ev, err
		}
	}

	sets, versions, err := st.sets(sender.tenant, sender.personID, recipient)
	if err != nil {
		var invalid *rulesInvalidError
		if errors.As(err, &invalid) {
			return refuse(codeRulesInvalid, invalid.Error())
		}
		return ev, err
	}
	ev.versions = versions

	senderRel, recipientRel, err := st.relationships(sender, recipient)
	if err != nil {
		return ev, err
	}
	ev.senderRel, ev.recipientRel = senderRel, recipientRel

	if recipient.local() {
		if recipientAgentClasses == nil {
			if recipientAgentClasses, err = st.agentClasses(recipient); err != nil {
				return ev, err
			}
		}
		ev.d, err = decision.Decide(ctx, decision.Case{Message: msg, SenderRelationship: senderRel,
			RecipientRelationship: recipientRel, Sets: sets, RecipientAgentClasses: recipientAgentClasses})
	} else {
		ev.d.Sender, err = decision.SenderSide(ctx, msg, senderRel, sets.Sender, sets.SenderOrg)
		ev.d.Combined = ev.d.Sender
		if err == nil && ev.d.Sender.Outcome != decision.Refuse {
			ev.d.Forwarded, err = decision.Project(body, ev.d.Sender.Allowed(), ev.d.Sender.Normalized)
		}
	}
	if err != nil {
		return ev, fmt.Errorf("policy: deciding: %w", err)
	}
	return ev, nil
}

// decide decides a SendRequested: it opens the body in memory, evaluates
// it, records a held connection request, and seals what crosses. An error
// is transient: the event is redelivered. A message that cannot be
// decided on its merits is refused with a broker reason.
func (s *Service) decide(ctx context.Context, tenant string, req *alpv1.SendRequested, env *alpv1.Envelope) (verdict, error) {
	st := s.state
	refused := func(code, msg string) (verdict, error) {
		env.Body, env.SealedBody = nil, nil
		return verdict{decided: &alpv1.Decided{Outcome: alpv1.Outcome_OUTCOME_REFUSE,
			Reasons: []*alpv1.Reason{{Party: decision.PartyBroker, Code: code, Message: msg}}}}, nil
	}
	trustClass, ok := trustClassOf(envelope.Trust(env))
	if !ok {
		return refused(codeUntrustedSender, "the sending agent's trust is below verified")
	}
	if env.GetType() == msgtypes.ConnectionAccept {
		// Only the person accepting, through their broker, answers a
		// request to connect (tellAsker): an agent's accept would tell
		// the asker's broker of a connection the person never made.
		return refused(codeBrokerOnlyType, msgtypes.ConnectionAccept+" is sent by the broker when the person accepts, not by agents")
	}
	body, err := s.Sealer.Open(ctx, env.GetSealedBody(), []byte(env.GetId()))
	if err != nil {
		if errors.Is(err, seal.ErrKeyDestroyed) {
			return refused(codeBodyUnavailable, "the body can no longer be opened (the sender was erased)")
		}
		return verdict{}, fmt.Errorf("policy: opening the body: %w", err)
	}
	ev, err := st.evaluate(ctx, side{tenant: tenant, address: env.GetFrom(), personID: req.GetSenderPersonId()},
		rules.Agent{ID: env.GetFromAgent(), Person: req.GetSenderPersonId(), TrustClass: trustClass, Tenant: tenant},
		env.GetTo(), env.GetType(), body, nil)
	if err != nil {
		return verdict{}, err
	}
	if ev.refused != nil {
		return refused(ev.refused.code, ev.refused.message)
	}
	d, sender, recipient, versions := ev.d, ev.sender, ev.recipient, ev.versions

	out := verdict{recipient: recipient, decided: &alpv1.Decided{
		Outcome: outcomeProto(d.Combined.Outcome), Reasons: reasonsProto(d.Combined.Reasons),
		Fields: fieldsProto(d.Combined.Fields), RuleVersions: versions,
	}}
	if recipient.local() {
		out.decided.RecipientPersonId, out.decided.RecipientTenant = recipient.personID, recipient.tenant
	}
	if d.Recipient != nil && slices.ContainsFunc(d.Recipient.Held, func(h decision.Held) bool { return h.Kind == decision.HeldConnectionRequest }) {
		// The request is the person's to answer: record it, so their
		// connections page lists it and their answer changes what the
		// two are to each other.
		_, err := st.rels.Request(ctx, recipient.tenant, sender.party(recipient.tenant), recipient.personID, env.GetId())
		switch {
		case errors.Is(err, relationships.ErrDeclined):
			return refused(codeConnectionDeclined, "the recipient declined to connect")
		case errors.Is(err, relationships.ErrBlocked):
			return refused(decision.CodeBlocked, "the recipient blocked the sender")
		case err != nil:
			return verdict{}, fmt.Errorf("policy: recording the connection request: %w", err)
		}
	}
	if d.Forwarded != nil {
		// What leaves the sender side, sealed again with the sender's key:
		// the withheld fields are not in it.
		if env.SealedBody, err = s.Sealer.Seal(ctx, tenant, sender.personID, d.Forwarded, []byte(env.GetId())); err != nil {
			return verdict{}, fmt.Errorf("policy: sealing what crosses: %w", err)
		}
	} else {
		env.SealedBody = nil
	}
	if d.Recipient != nil {
		if out.deliverable, err = s.deliverable(ctx, env, sender, recipient, d, versions); err != nil {
			return verdict{}, err
		}
	}
	return out, nil
}

// preapprovals fills in what may let a commitment to recipient through
// besides their own set: their standing rules, and their organization's
// rules covering the pair with the actions they pre-approve, as of now.
func (st *state) preapprovals(msg *decision.Message, sender, recipient side) error {
	msg.At = time.Now()
	msg.StandingRules = st.standing.Rules(recipient.tenant, recipient.personID)
	party := sender.party(recipient.tenant)
	if party.Person != "" {
		party.Address = sender.address
	}
	covers, err := st.rels.OrgCommits(recipient.tenant, party, recipient.personID, recipient.roles)
	if err != nil {
		return fmt.Errorf("policy: the organization's pre-approvals: %w", err)
	}
	msg.OrgCommits = covers
	return nil
}

// trustClassOf maps the envelope's trust onto the entity model's agent
// classes: ingress gives company agents trusted and consumer agents (and
// personal access tokens) verified; anything lower may not send.
func trustClassOf(t nmpv1.TrustLevel) (string, bool) {
	switch t {
	case nmpv1.TrustLevel_TRUST_LEVEL_TRUSTED:
		return rules.TrustCompany, true
	case nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED:
		return rules.TrustConsumer, true
	}
	return "", false
}

// deliverable seals each trust class's view and each held item with the
// recipient's data key. The caller sets its envelope header once the hop
// is over.
func (s *Service) deliverable(ctx context.Context, env *alpv1.Envelope, sender, recipient side, d decision.Decision, versions []string) (*alpv1.Deliverable, error) {
	r := *d.Recipient
	dv := &alpv1.Deliverable{
		RecipientPersonId: recipient.personID, SenderPersonId: sender.personID,
		Outcome: outcomeProto(r.Outcome), Reasons: reasonsProto(r.Reasons), Fields: fieldsProto(r.Fields),
		UntrustedText: r.Untrusted, RuleVersions: versions,
	}
	sealPart := func(pointers []string, aad []byte) (*alpv1.SealedBody, error) {
		if len(pointers) == 0 {
			return nil, nil
		}
		part, err := d.Body(pointers, r.Normalized)
		if err != nil {
			return nil, err
		}
		return s.Sealer.Seal(ctx, recipient.tenant, recipient.personID, part, aad)
	}
	for _, v := range r.Views {
		body, err := sealPart(v.Pointers, seal.ViewAAD(env.GetId(), v.TrustClass))
		if err != nil {
			return nil, fmt.Errorf("policy: sealing the %s view: %w", v.TrustClass, err)
		}
		dv.Views = append(dv.Views, &alpv1.TrustView{TrustClass: v.TrustClass, Body: body, Pointers: v.Pointers})
	}
	for _, h := range r.Held {
		id := "h" + bus.HashID("held", env.GetId(), recipient.personID, string(h.Kind))
		body, err := sealPart(h.Pointers, seal.HeldAAD(env.GetId(), id))
		if err != nil {
			return nil, fmt.Errorf("policy: sealing a held %s: %w", h.Kind, err)
		}
		dv.Held = append(dv.Held, &alpv1.HeldItem{Id: id, Kind: heldKindProto(h.Kind), Pointers: h.Pointers, Commits: h.Commits, Body: body})
	}
	return dv, nil
}

// resolve finds who an address is: a person of a tenant hosted here, or a
// remote address (someone at another broker).
func (st *state) resolve(ctx context.Context, to string) (side, error) {
	a, err := alp.ParseAddress(to)
	if err != nil {
		return side{}, fmt.Errorf("%w: recipient %q", identitystore.ErrNotFound, to)
	}
	out := side{tenant: a.Domain(), address: a.String()}
	if !st.tenants.Hosts(a.Domain()) {
		return out, nil
	}
	if out.personID, out.roles, err = st.people.OwnerOf(ctx, a.Domain(), a.String()); err != nil {
		return side{}, fmt.Errorf("policy: recipient: %w", err)
	}
	return out, nil
}

// relationships answers what the two sides are to each other, as each
// side sees it. A person writing to themselves (one person's own agents)
// is connected. The sender side sees a block the sender made; for a
// recipient here it otherwise sees what the recipient's side records
// (a connection accepted in another tenant here is only recorded there).
func (st *state) relationships(sender, recipient side) (senderRel, recipientRel relationships.State, err error) {
	if recipient.local() && recipient.tenant == sender.tenant && recipient.personID == sender.personID {
		return relationships.Connected, relationships.Connected, nil
	}
	senderRel, err = st.rels.Relationship(sender.tenant, recipient.party(sender.tenant), sender.personID, sender.roles)
	if err != nil {
		return "", "", fmt.Errorf("policy: relationship as the sender sees it: %w", err)
	}
	if !recipient.local() {
		return senderRel, "", nil
	}
	recipientRel, err = st.rels.Relationship(recipient.tenant, sender.party(recipient.tenant), recipient.personID, recipient.roles)
	if err != nil {
		return "", "", fmt.Errorf("policy: relationship as the recipient sees it: %w", err)
	}
	if senderRel != relationships.Blocked {
		senderRel = recipientRel
	}
	return senderRel, recipientRel, nil
}

// agentClasses are the trust classes of the recipient's agents as
// identity records them now (live grants and tokens): they decide which
// views are made and whether confidential fields wait for the person.
func (st *state) agentClasses(recipient side) ([]string, error) {
	cs, err := st.people.AgentClasses(recipient.tenant, recipient.personID, time.Now())
	if err != nil {
		return nil, fmt.Errorf("policy: the recipient's agents: %w", err)
	}
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		switch c {
		case alpv1.TrustClass_TRUST_CLASS_COMPANY:
			out = append(out, rules.TrustCompany)
		case alpv1.TrustClass_TRUST_CLASS_CONSUMER:
			out = append(out, rules.TrustConsumer)
		}
	}
	return out, nil
}

// rulesInvalidError is a stored set that no longer validates against the
// entity model: messages it governs are refused until it is fixed.
type rulesInvalidError struct{ err error }

func (e *rulesInvalidError) Error() string { return e.err.Error() }

// sets gathers every party's current compiled set (the shipped template
// where a party never wrote one) and their versions. An empty tenant is a
// sender at another broker, whose sets are its broker's: only the
// recipient's are gathered.
func (st *state) sets(tenant, senderID string, recipient side) (decision.Sets, []string, error) {
	var sets decision.Sets
	var versions []string
	get := func(t string, party rules.Party, owner string) (*rules.Compiled, error) {
		c, v, err := st.rules.Current(t, party, owner)
		if err != nil {
			if c == nil && v > 0 {
				return nil, &rulesInvalidError{err}
			}
			return nil, fmt.Errorf("policy: %s rules: %w", party, err)
		}
		versions = append(versions, fmt.Sprintf("%s:%s:%d", party, owner, v))
		return c, nil
	}
	var err error
	if tenant != "" {
		if sets.Sender, err = get(tenant, rules.PartySender, senderID); err != nil {
			return sets, nil, err
		}
		if sets.SenderOrg, err = get(tenant, rules.PartySenderOrg, tenant); err != nil {
			return sets, nil, err
		}
	}
	if recipient.local() {
		if sets.RecipientOrg, err = get(recipient.tenant, rules.PartyRecipientOrg, recipient.tenant); err != nil {
			return sets, nil, err
		}
		if sets.Recipient, err = get(recipient.tenant, rules.PartyRecipient, recipient.personID); err != nil {
			return sets, nil, err
		}
	}
	return sets, versions, nil
}

// The decision's values as the wire has them.

func outcomeProto(o decision.Outcome) alpv1.Outcome {
	switch o {
	case decision.Deliver:
		return alpv1.Outcome_OUTCOME_DELIVER
	case decision.DeliverPartial:
		return alpv1.Outcome_OUTCOME_DELIVER_PARTIAL
	case decision.HoldOutcome:
		return alpv1.Outcome_OUTCOME_HOLD
	}
	return alpv1.Outcome_OUTCOME_REFUSE
}

func reasonsProto(rs []decision.Reason) []*alpv1.Reason {
	out := make([]*alpv1.Reason, len(rs))
	for i, r := range rs {
		out[i] = &alpv1.Reason{Party: r.Party, Rule: r.PolicyID, Code: r.Code, Message: decision.Explain(r)}
	}
	return out
}

func fieldsProto(fs []decision.FieldVerdict) []*alpv1.FieldVerdict {
	out := make([]*alpv1.FieldVerdict, len(fs))
	for i, f := range fs {
		fv := &alpv1.FieldVerdict{Pointer: f.Pointer, Class: f.Class, Freetext: f.FreeText, Dlp: f.DLP}
		switch f.Action {
		case decision.Allow:
			fv.Action = alpv1.FieldAction_FIELD_ACTION_ALLOW
		case decision.Hold:
			fv.Action = alpv1.FieldAction_FIELD_ACTION_HOLD
		default:
			fv.Action = alpv1.FieldAction_FIELD_ACTION_DENY
		}
		for _, r := range reasonsProto(f.Reasons) {
			r.Field = f.Pointer
			fv.Reasons = append(fv.Reasons, r)
		}
		out[i] = fv
	}
	return out
}

func heldKindProto(k decision.HeldKind) alpv1.HeldKind {
	switch k {
	case decision.HeldConnectionRequest:
		return alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST
	case decision.HeldCommitment:
		return alpv1.HeldKind_HELD_KIND_COMMITMENT
	case decision.HeldConfidentialFields:
		return alpv1.HeldKind_HELD_KIND_CONFIDENTIAL_FIELDS
	}
	return alpv1.HeldKind_HELD_KIND_UNSPECIFIED
}
