package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/nmp"
)

// DoorConfig tunes the send path. Zero values take the defaults.
type DoorConfig struct {
	// DecisionWait is how long a send waits for policy's decision before
	// answering "pending" (default 3s).
	DecisionWait time.Duration
	// Rates: per agent, per person and per tenant (requests per second and
	// burst). Every message counts against all three.
	PerAgent, PerPerson, PerTenant Rate
	// NMP bounds and rules for agent-supplied NMP headers.
	NMP nmp.Config
}

// DefaultDoorConfig returns the defaults.
func DefaultDoorConfig() DoorConfig {
	return DoorConfig{
		DecisionWait: 3 * time.Second,
		PerAgent:     Rate{Limit: 20, Burst: 40},
		PerPerson:    Rate{Limit: 50, Burst: 100},
		PerTenant:    Rate{Limit: 1000, Burst: 2000},
		NMP:          nmp.DefaultConfig(),
	}
}

func (c DoorConfig) complete() DoorConfig {
	d := DefaultDoorConfig()
	if c.DecisionWait <= 0 {
		c.DecisionWait = d.DecisionWait
	}
	for _, r := range []struct{ have, def *Rate }{{&c.PerAgent, &d.PerAgent}, {&c.PerPerson, &d.PerPerson}, {&c.PerTenant, &d.PerTenant}} {
		if r.have.Limit <= 0 || r.have.Burst <= 0 {
			*r.have = *r.def
		}
	}
	if c.NMP == (nmp.Config{}) {
		c.NMP = d.NMP
	}
	return c
}

// Door is the send path every agent binding shares: it admits an agent by
// its credential, with the trust the credential's class earns and the rate
// limits, sends a submission and awaits policy's decision up to a
// deadline, and reads an envelope's outcome later. A binding only decodes
// its wire format into a Submission and encodes the Outcome or the error
// back, so two bindings cannot disagree about who may send what.
type Door struct {
	s      *Service
	cfg    DoorConfig
	limits *limiters
	log    *slog.Logger
}

// newDoor builds the send path on s (Options.Door): the service holds
// the one Door, so every message through any binding counts against the
// same rate limits.
func newDoor(s *Service, cfg DoorConfig) *Door {
	cfg = cfg.complete()
	return &Door{s: s, cfg: cfg, limits: newLimiters(cfg), log: s.Logger}
}

// DecisionWait is how long a send waits for policy's decision before it
// answers pending.
func (d *Door) DecisionWait() time.Duration { return d.cfg.DecisionWait }

// Admit authenticates an agent's bearer credential (the value of an
// Authorization header), sets the trust its class earns, and takes one
// message from the agent's, the person's and the tenant's rate limits. The
// sender is what the credential proves, never what a message says. Errors:
// *agentauth.Error for a refused credential, *RateLimited over a limit.
func (d *Door) Admit(ctx context.Context, authorization string) (Sender, error) {
	p, err := d.s.Authenticator().Authenticate(ctx, authorization)
	if err != nil {
		return Sender{}, err
	}
	trust, reason := trustOf(p)
	class := alpv1.TrustClass_TRUST_CLASS_CONSUMER
	if p.Class == accesstoken.ClassCompany {
		class = alpv1.TrustClass_TRUST_CLASS_COMPANY
	}
	snd := Sender{Tenant: p.Tenant, PersonID: p.PersonID, Address: p.Address, AgentID: p.AgentID, Class: class,
		Trust: trust, TrustReason: reason, Scopes: p.Scopes}
	if err := d.limits.allow(snd, time.Now()); err != nil {
		return Sender{}, err
	}
	return snd, nil
}

// trustOf is the NMP trust a credential earns: company agents are trusted
// (3), consumer agents verified (2) — docs/identity.md.
func trustOf(p agentauth.Principal) (nmpv1.TrustLevel, string) {
	if p.Class == accesstoken.ClassCompany {
		return nmpv1.TrustLevel_TRUST_LEVEL_TRUSTED, "company agent credential (" + p.Credential + ")"
	}
	return nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED, "consumer agent credential (" + p.Credential + ")"
}

// MaySend refuses a sender whose credential lacks alp.ScopeSend: an
// *agentauth.Error (403, with the challenge naming the scope). Send checks
// it too; a binding calls it first when the refusal must come before it
// reads the rest of the message.
func (d *Door) MaySend(snd Sender) error { return d.may(snd, alp.ScopeSend, "sending") }

// MayRead refuses a sender whose credential lacks alp.ScopeRead, which
// reading and acknowledging the person's inbox take: an *agentauth.Error
// (403, with the challenge naming the scope).
func (d *Door) MayRead(snd Sender) error { return d.may(snd, alp.ScopeRead, "reading the inbox") }

// MayReply refuses a sender whose credential lacks either scope a reply
// to an inbox item takes: alp.send for the message, alp.read for the item
// it answers (ReplyTo reads it). Every binding's reply needs both.
func (d *Door) MayReply(snd Sender) error {
	if err := d.MaySend(snd); err != nil {
		return err
	}
	return d.MayRead(snd)
}

func (d *Door) may(snd Sender, scope, what string) error {
	if slices.Contains(snd.Scopes, scope) {
		return nil
	}
	e := &accesstoken.Error{Code: accesstoken.CodeInsufficientScope, Scope: scope}
	return &agentauth.Error{Status: http.StatusForbidden, Code: accesstoken.CodeInsufficientScope,
		Description: "the credential does not allow " + what + " (scope " + scope + ")",
		Challenge:   e.WWWAuthenticate(d.s.Authenticator().ResourceMetadataURL)}
}

// NMPReport is what the broker made of an agent's NMP header, for the
// agent to hear before anything is stored.
type NMPReport struct {
	// Ignored is what the broker did not take from the header.
	Ignored []string
	// Conflicts the agent's signals show (CONFLICT, INCONSISTENCY, RISK):
	// reported back, not refused.
	Conflicts []string
}

// BudgetHalted refuses a send whose agent's NMP budget is at or over the
// halt threshold.
type BudgetHalted struct {
	TokensUsed, MaxTokens, Percent uint64
}

func (e *BudgetHalted) Error() string { return "ingress: " + e.Description() }

// Description says why, for the agent.
func (e *BudgetHalted) Description() string {
	return fmt.Sprintf("the NMP budget is spent: tokens_used %d of max_tokens %d is at or over the halt threshold (%d%%)",
		e.TokensUsed, e.MaxTokens, e.Percent)
}

// AgentNMP parses the NMP header the agent sent (the JSON of an
// nmp_message) and attaches it to sub, whose Sender is set: Accept merges it
// after the ingress hop. Merging it here on the credential's trust gives the
// same budget, signals and ignored parts, which the agent must hear about
// before anything is stored; an agent that asks for less trust caps it.
// Errors: *nmp.Error for a header that does not parse, *BudgetHalted.
func (d *Door) AgentNMP(sub *Submission, raw []byte) (NMPReport, error) {
	agent, err := nmp.ParseAgentHeader(raw, d.cfg.NMP.Limits)
	if err != nil {
		return NMPReport{}, err
	}
	trust := sub.Sender.Trust
	hdr, ignored := nmp.Apply(&nmpv1.NmpHeader{Trust: trust}, agent, d.cfg.NMP)
	var rep NMPReport
	for _, ig := range ignored {
		rep.Ignored = append(rep.Ignored, ig.String())
	}
	if nmp.Halted(hdr.GetBudget(), d.cfg.NMP.Halt) {
		return NMPReport{}, &BudgetHalted{TokensUsed: hdr.GetBudget().GetTokensUsed(), MaxTokens: hdr.GetBudget().GetMaxTokens(),
			Percent: d.cfg.NMP.Halt.Percent}
	}
	for _, c := range nmp.Detect(hdr.GetSignals(), d.cfg.NMP.Rules) {
		rep.Conflicts = append(rep.Conflicts, string(c.Kind)+": "+c.Message)
	}
	if hdr.GetTrust() < trust {
		sub.TrustCap, sub.TrustCapReason = agent.TrustCap()
	}
	sub.AgentNMP, sub.NMP = agent, d.cfg.NMP
	return rep, nil
}

// Outcome names, the same in every binding.
const (
	OutcomeDeliver        = "deliver"
	OutcomeDeliverPartial = "deliver_partial"
	OutcomeHold           = "hold"
	OutcomeRefuse         = "refuse"
	// OutcomePending: policy has not decided within the wait.
	OutcomePending = "pending"
)

var outcomeNames = map[alpv1.Outcome]string{
	alpv1.Outcome_OUTCOME_DELIVER:         OutcomeDeliver,
	alpv1.Outcome_OUTCOME_DELIVER_PARTIAL: OutcomeDeliverPartial,
	alpv1.Outcome_OUTCOME_HOLD:            OutcomeHold,
	alpv1.Outcome_OUTCOME_REFUSE:          OutcomeRefuse,
}

// Outcome is what became of one envelope, as far as the sender may know.
type Outcome struct {
	EnvelopeID string
	// Type and To are the envelope's as sent; empty for a pending envelope
	// looked up by id (Status), whose sealed event is not opened for it.
	Type, To string
	// Decided: policy has decided; false while pending.
	Decided bool
	// Outcome is one of the Outcome names; OutcomePending while undecided
	// (and for a decision of a kind this broker does not know).
	Outcome string
	// Reasons are about the whole message.
	Reasons []Reason
	// Fields are every field's verdict, as the sender may see them.
	Fields []FieldVerdict
	// Duplicate: the agent had already submitted this idempotency key; no
	// new event was written.
	Duplicate bool
	// Delivery is where an envelope to a recipient at another broker
	// stands (Status only; nil for a recipient hosted here, and for one
	// the sender side refused: nothing left this broker).
	Delivery *Delivery
	// Approval is where an envelope stands that its recipient (hosted
	// here) was asked to decide part of (Status only; nil when nothing
	// was held).
	Approval *Approval
}

// Reason is one reason of policy's decision: the party, its rule (the
// policy id; empty where another party's ids are withheld from the
// sender), the field it is about (for a reason about the whole message),
// the public reason code and a message in words.
type Reason struct {
	Party, Rule, Field, Code, Message string
}

// Field actions, the same in every binding.
const (
	ActionAllow = "allow"
	ActionDeny  = "deny"
	ActionHold  = "hold"
)

var actionNames = map[alpv1.FieldAction]string{
	alpv1.FieldAction_FIELD_ACTION_ALLOW: ActionAllow,
	alpv1.FieldAction_FIELD_ACTION_DENY:  ActionDeny,
	alpv1.FieldAction_FIELD_ACTION_HOLD:  ActionHold,
}

// FieldVerdict is policy's decision on one field of the body: its RFC 6901
// pointer and class, the action (ActionAllow, ActionDeny, ActionHold) and
// every party's reason for a denial or hold. Never the value.
type FieldVerdict struct {
	Pointer, Class, Action string
	Reasons                []Reason
}

// outcomeOf describes envelope id as sent (env) and decided (d, nil while
// pending).
func outcomeOf(id string, env *alpv1.Envelope, d *alpv1.Decided) Outcome {
	o := Outcome{EnvelopeID: id, Type: env.GetType(), To: env.GetTo(), Outcome: OutcomePending}
	if d == nil {
		return o
	}
	o.Decided = true
	if name, ok := outcomeNames[d.GetOutcome()]; ok {
		o.Outcome = name
	}
	o.Reasons = reasonsOf(d.GetReasons())
	for _, f := range d.GetFields() {
		action, ok := actionNames[f.GetAction()]
		if !ok {
			// An action this broker does not know crosses nothing.
			action = ActionDeny
		}
		o.Fields = append(o.Fields, FieldVerdict{Pointer: f.GetPointer(), Class: f.GetClass(), Action: action, Reasons: reasonsOf(f.GetReasons())})
	}
	return o
}

func reasonsOf(rs []*alpv1.Reason) []Reason {
	var out []Reason
	for _, r := range rs {
		out = append(out, Reason{Party: r.GetParty(), Rule: r.GetRule(), Field: r.GetField(), Code: r.GetCode(), Message: r.GetMessage()})
	}
	return out
}

// Codes of a BodyError.
const (
	// CodeUnknownMessageType: no built-in or registered type has the name.
	CodeUnknownMessageType = "unknown_message_type"
	// CodeInvalidBody: the body fails its type's schema.
	CodeInvalidBody = "invalid_body"
)

// BodyError refuses a submission at the door: its type is unknown, or its
// body fails the type's schema (every failing keyword with its JSON
// pointer into the body). Nothing is stored; every binding answers 422
// with the code.
type BodyError struct {
	Code string
	// Type is the message type as the agent named it.
	Type string
	// Errors are the schema's failures (CodeInvalidBody).
	Errors msgtypes.ValidationErrors
}

func (e *BodyError) Error() string { return "ingress: " + e.Description() }

// Description says what is wrong, for the agent.
func (e *BodyError) Description() string {
	if e.Code == CodeUnknownMessageType {
		return fmt.Sprintf("message type %q is not known here: use a built-in type (such as note/v1 or meeting.request/v1) "+
			"or one an organization hosted here registered (<domain>/<name>/v<N>)", e.Type)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the body does not match %s:", e.Type)
	const shown = 3
	for i, v := range e.Errors {
		if i == shown {
			fmt.Fprintf(&b, " (and %d more)", len(e.Errors)-shown)
			break
		}
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s at %q: %s", v.Keyword, v.Pointer, v.Message)
	}
	return b.String()
}

// ErrTypesUnavailable: the message types cannot be consulted yet (the
// projection is not open, or too stale to call a name unknown); the agent
// retries.
var ErrTypesUnavailable = errors.New("ingress: message types unavailable")

// checkBody checks an envelope's body against its type, as the door does
// before anything is stored: a *BodyError for an unknown type or a body
// the type's schema refuses, ErrTypesUnavailable while the types are not
// known well enough to tell. Policy validates again.
func (d *Door) checkBody(env *alpv1.Envelope) error {
	// A type registered a moment ago may not have reached this replica
	// yet: only a fresh registry calls a name unknown (Type).
	t, err := d.s.typeNamed(env.GetType())
	if errors.Is(err, ErrUnknownType) {
		return &BodyError{Code: CodeUnknownMessageType, Type: env.GetType()}
	}
	if err != nil {
		return err
	}
	err = t.Validate(env.GetBody())
	var ve msgtypes.ValidationErrors
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ve):
		return &BodyError{Code: CodeInvalidBody, Type: env.GetType(), Errors: ve}
	default:
		return fmt.Errorf("ingress: checking a %s body: %w", env.GetType(), err)
	}
}

// Send checks sub's body against its type (checkBody), submits it (from
// an admitted sender) and waits up to DecisionWait for policy's decision; past it, the outcome is pending and the agent
// looks it up later (Status). The decision is awaited before the
// submission is appended, so a fast decision is not missed; a retry of a
// submission decided long ago finds the decision in the stream. A failure
// while waiting is logged and answered as pending: the envelope is stored,
// and the agent can ask again.
func (d *Door) Send(ctx context.Context, sub Submission) (Outcome, error) {
	if err := d.MaySend(sub.Sender); err != nil {
		return Outcome{}, err
	}
	if err := d.checkBody(sub.Envelope); err != nil {
		return Outcome{}, err
	}
	id, err := d.s.EnvelopeID(ctx, sub.Sender, sub.IdempotencyKey)
	if err != nil {
		return Outcome{}, err
	}
	sub.EnvelopeID = id
	w, err := d.s.Await(sub.Sender.Tenant, sub.Sender.PersonID, id)
	if err != nil {
		return Outcome{}, err
	}
	defer w.Close()
	acc, err := d.s.Accept(ctx, sub)
	if err != nil {
		return Outcome{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, d.cfg.DecisionWait)
	defer cancel()
	dec, err := w.Wait(wctx, acc.Duplicate)
	if err != nil {
		d.log.Warn("waiting for a decision failed", "envelope", acc.EnvelopeID, "err", err)
	}
	o := outcomeOf(acc.EnvelopeID, sub.Envelope, dec)
	o.Duplicate = acc.Duplicate
	return o, nil
}

// Status is the outcome of one of snd's person's envelopes, for an agent
// whose send answered pending, that follows one sent to another broker
// (Outcome.Delivery), or one its recipient here was asked to decide part
// of (Outcome.Approval: held until they decide, then the outcome): decided, or pending while its
// SendRequested is on the send stream; ErrUnknownEnvelope when the person
// never sent it (or its events aged out). An id that is not a UUID is
// ErrInvalidEnvelopeID.
func (d *Door) Status(ctx context.Context, snd Sender, envelopeID string) (Outcome, error) {
	id, err := ParseEnvelopeID(envelopeID)
	if err != nil {
		return Outcome{}, err
	}
	dec, err := d.s.Decision(ctx, snd.Tenant, snd.PersonID, id)
	if err != nil {
		return Outcome{}, err
	}
	if dec != nil {
		o := outcomeOf(id, dec.GetEnvelope(), dec)
		if d.s.remoteRecipient(dec) {
			if o.Delivery, err = d.s.Delivery(ctx, snd.Tenant, snd.PersonID, id); err != nil {
				return Outcome{}, err
			}
		}
		if dec.GetRecipientPersonId() != "" && dec.GetOutcome() != alpv1.Outcome_OUTCOME_REFUSE {
			if o.Approval, err = d.s.approval(ctx, dec, id); err != nil {
				return Outcome{}, err
			}
		}
		return o, nil
	}
	sent, err := d.s.Submitted(ctx, snd.Tenant, snd.PersonID, id)
	if err != nil {
		return Outcome{}, err
	}
	if !sent {
		return Outcome{}, fmt.Errorf("%w: %s", ErrUnknownEnvelope, id)
	}
	return outcomeOf(id, nil, nil), nil
}
