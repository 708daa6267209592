package decision

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/services/policy/dlp"
	"github.com/alpd-project/alpd/services/policy/freetext"
	"github.com/alpd-project/alpd/services/policy/relationships"
	"github.com/alpd-project/alpd/services/policy/rules"
)

// PartyBroker names the hard rules: they are alpd's, not a party's.
const PartyBroker = "broker"

// Reason codes of the hard rules. A party's denial carries its policy's
// @reason instead.
const (
	CodeInvalidBody      = "invalid_body"
	CodeUnknownType      = "unknown_message_type"
	CodeBlocked          = "blocked"
	CodeStranger         = "stranger"
	CodeNothingAllowed   = "nothing_allowed"
	CodeConnectionHeld   = "connection_request_held"
	CodeCommitmentHeld   = "commitment_held"
	CodeStandingApproval = "standing_approval"
	// An organization's pre-approved relationship covers the commitment.
	CodeOrgPreapproved   = "org_preapproved"
	CodeConfidentialHeld = "confidential_held_for_consumer_agents"
	// Free text: the cap and the DLP detectors (dlp_<detector>).
	CodeFreeTextTooLong = string(freetext.CodeTooLong)
	codeDLPPrefix       = "dlp_"
)

// Action is what happens to one field.
type Action string

// Field actions.
const (
	Allow Action = "allow"
	Deny  Action = "deny"
	// Hold: every rule allows the field, but it waits for the person.
	Hold Action = "hold"
)

// Outcome is what happens to the message.
type Outcome string

// Outcomes.
const (
	Deliver        Outcome = "deliver"
	DeliverPartial Outcome = "deliver_partial"
	HoldOutcome    Outcome = "hold"
	Refuse         Outcome = "refuse"
)

// HeldKind is what the person is asked to decide.
type HeldKind string

// Held item kinds.
const (
	HeldConnectionRequest  HeldKind = "connection_request"
	HeldCommitment         HeldKind = "commitment"
	HeldConfidentialFields HeldKind = "confidential_fields"
)

// Reason names who decided and why. PolicyID is empty for hard rules and
// for another party's policy in a public view.
type Reason struct {
	Party    string `json:"party"`
	PolicyID string `json:"policy_id,omitempty"`
	Code     string `json:"code"`
}

// FieldVerdict is the decision on one field: never its value.
type FieldVerdict struct {
	Pointer  string   `json:"pointer"`
	Class    string   `json:"class"`
	FreeText bool     `json:"freetext,omitempty"`
	Action   Action   `json:"action"`
	Reasons  []Reason `json:"reasons,omitempty"`
	// DLP lists the detectors that matched a free-text field (blocking
	// ones deny it, flags only report).
	DLP []string `json:"dlp,omitempty"`
}

// View is what one trust class of the recipient's agents may see.
type View struct {
	TrustClass string   `json:"trust_class"`
	Pointers   []string `json:"pointers"`
}

// Held is one item only the recipient person may release.
type Held struct {
	Kind     HeldKind `json:"kind"`
	Pointers []string `json:"pointers"`
	Commits  string   `json:"commits,omitempty"`
}

// Result is one stage's decision (or, from Combine, both stages' as the
// sender may see them).
type Result struct {
	Outcome Outcome `json:"outcome"`
	// Reasons about the whole message: hard rules, and the commitment's
	// standing approval.
	Reasons []Reason       `json:"reasons,omitempty"`
	Fields  []FieldVerdict `json:"fields"`
	// Views and Held are set by the recipient side only.
	Views     []View `json:"views,omitempty"`
	Held      []Held `json:"held,omitempty"`
	Untrusted bool   `json:"untrusted_text,omitempty"`
	// Normalized holds the normalized text of each allowed free-text
	// field: what crosses instead of the text as sent (Project uses it).
	Normalized map[string]string `json:"-"`
}

// Allowed are the pointers of the fields that cross (allowed or held).
func (r Result) Allowed() []string {
	var out []string
	for _, f := range r.Fields {
		if f.Action != Deny {
			out = append(out, f.Pointer)
		}
	}
	return out
}

// Message is what both stages decide about. Body is the opened body as
// the stage receives it (for the recipient side, what the sender side let
// through).
type Message struct {
	Type      *msgtypes.Type
	Body      []byte
	Agent     rules.Agent
	Sender    rules.Side
	Recipient rules.Side
	// Withheld are the members another broker's sender side kept back
	// (from what it signed): the recipient side excuses them from the
	// type's "required". Empty on this broker's own sends.
	Withheld []string
	// What besides the recipient's own set may let a commitment through
	// without asking (the recipient side reads them): the recipient's
	// standing rules ("approve always"), and the recipient organization's
	// pre-approved relationships that cover the pair, with the actions
	// they pre-approve. At is when the message is decided: a standing rule
	// that expired by then covers nothing (zero: any rule with an expiry
	// covers nothing).
	StandingRules []StandingRule
	OrgCommits    []relationships.OrgCover
	At            time.Time
}

// StandingRule is one "approve always" of the recipient, as the approvals
// stream records it: messages of Type from Counterparty (an address)
// committing the person to Action, until Expires (zero: no end), unless
// Revoked.
type StandingRule struct {
	ID           string    `json:"id"`
	Type         string    `json:"type"`
	Counterparty string    `json:"counterparty"`
	Action       string    `json:"action"`
	Expires      time.Time `json:"expires,omitzero"`
	Revoked      bool      `json:"revoked,omitempty"`
}

// covers reports whether r lets a message of typeName from sender commit
// the person to action at the time at.
func (r StandingRule) covers(typeName, sender, action string, at time.Time) bool {
	if r.Revoked || r.Type != typeName || r.Action != action || alp.NormalizeAddress(r.Counterparty) != alp.NormalizeAddress(sender) {
		return false
	}
	return r.Expires.IsZero() || (!at.IsZero() && at.Before(r.Expires))
}

// Trust classes of agents, as the entity model names them.
var trustClasses = []string{rules.TrustCompany, rules.TrustConsumer}

// cedarRelationship maps policy's relationship states onto the four the
// entity model knows: a request or a declined one is still a stranger.
func cedarRelationship(s relationships.State) (string, error) {
	switch s {
	case relationships.Blocked:
		return rules.RelBlocked, nil
	case relationships.Connected:
		return rules.RelConnected, nil
	case relationships.OrgPreapproved:
		return rules.RelOrgPreapproved, nil
	case relationships.Requested, relationships.Declined, relationships.Stranger:
		return rules.RelStranger, nil
	}
	return "", fmt.Errorf("decision: unknown relationship %q", s)
}

func refuse(code string) Result {
	return Result{Outcome: Refuse, Reasons: []Reason{{Party: PartyBroker, Code: code}}}
}

// SenderSide decides what may leave the sender: the sender's and the
// sender organization's sets, and the hard rules the sender's broker can
// check (the body's schema, blocks, strangers, the free-text cap, DLP). rel
// is the relationship of the two sides as this broker knows it.
func SenderSide(ctx context.Context, m Message, rel relationships.State, sender, senderOrg *rules.Compiled) (Result, error) {
	return senderSide(ctx, m, rel, sender, senderOrg, nil)
}

func senderSide(ctx context.Context, m Message, rel relationships.State, sender, senderOrg *rules.Compiled, fields []msgtypes.Field) (Result, error) {
	if sender == nil || senderOrg == nil {
		return Result{}, errors.New("decision: the sender side needs the sender's and the sender organization's sets")
	}
	return stage(ctx, m, rel, rules.Parties{Sender: sender, SenderOrg: senderOrg}, nil, fields)
}

// RecipientSide decides what reaches the recipient and how: the recipient
// organization's and the recipient's sets and the remaining hard rules.
// agentClasses are the trust classes of the recipient's agents; nil means
// unknown, and then both are assumed (the cautious choice: confidential
// fields are held for consumer-class agents). m.Body is checked against
// its type, so a body another broker's sender side trimmed of a required
// member no longer passes; Decide, for a recipient on this broker, decides
// on the fields it already checked instead.
func RecipientSide(ctx context.Context, m Message, rel relationships.State, recipientOrg, recipient *rules.Compiled, agentClasses []string) (Result, error) {
	return recipientSide(ctx, m, rel, recipientOrg, recipient, agentClasses, nil)
}

func recipientSide(ctx context.Context, m Message, rel relationships.State, recipientOrg, recipient *rules.Compiled, agentClasses []string, fields []msgtypes.Field) (Result, error) {
	if recipientOrg == nil || recipient == nil {
		return Result{}, errors.New("decision: the recipient side needs the recipient organization's and the recipient's sets")
	}
	if agentClasses == nil {
		agentClasses = trustClasses
	}
	for _, c := range agentClasses {
		if !slices.Contains(trustClasses, c) {
			return Result{}, fmt.Errorf("decision: unknown trust class %q", c)
		}
	}
	return stage(ctx, m, rel, rules.Parties{RecipientOrg: recipientOrg, Recipient: recipient}, agentClasses, fields)
}

// checkBody validates the body against its type and lists its fields,
// with the decoded body; a non-nil Result is the refusal.
func checkBody(m Message) (any, []msgtypes.Field, *Result, error) {
	if m.Type == nil {
		r := refuse(CodeUnknownType)
		return nil, nil, &r, nil
	}
	v, fields, err := m.Type.CheckWithheld(m.Body, m.Withheld)
	if err != nil {
		var ve msgtypes.ValidationErrors
		if errors.As(err, &ve) {
			r := refuse(CodeInvalidBody)
			return nil, nil, &r, nil
		}
		return nil, nil, nil, fmt.Errorf("decision: %s body: %w", m.Type.Name(), err)
	}
	return v, fields, nil, nil
}

// stage runs one side; agentClasses is nil on the sender side. fields nil
// means m.Body is checked against its type here; Decide passes the fields
// it already checked instead (see there).
func stage(ctx context.Context, m Message, rel relationships.State, sets rules.Parties, agentClasses []string, fields []msgtypes.Field) (Result, error) {
	recipientSide := sets.Recipient != nil
	if fields == nil {
		var refused *Result
		var err error
		if _, fields, refused, err = checkBody(m); refused != nil || err != nil {
			if refused != nil {
				return *refused, nil
			}
			return Result{}, err
		}
	}
	crel, err := cedarRelationship(rel)
	if err != nil {
		return Result{}, err
	}
	if crel == rules.RelBlocked {
		return refuse(CodeBlocked), nil
	}
	isRequest := m.Type.Name() == msgtypes.ConnectionRequest
	if crel == rules.RelStranger && !isRequest {
		return refuse(CodeStranger), nil
	}

	msg := rules.Message{Agent: m.Agent, Context: rules.Context{Sender: m.Sender, Recipient: m.Recipient, Relationship: crel}}
	commits := m.Type.Commits()
	msg.Fields = make([]rules.Field, len(fields))
	for i, f := range fields {
		msg.Fields[i] = rules.Field{Type: m.Type.Name(), Pointer: f.Pointer, Class: string(f.Class), FreeText: f.FreeText}
		if len(commits) > 0 {
			msg.Fields[i].Commits = commits[0]
		}
	}
	verdicts, err := rules.DecideMessage(ctx, sets, msg)
	if err != nil {
		return Result{}, fmt.Errorf("decision: %w", err)
	}

	res := Result{Fields: make([]FieldVerdict, len(fields))}
	for i, f := range fields {
		fv := FieldVerdict{Pointer: f.Pointer, Class: string(f.Class), FreeText: f.FreeText, Action: Allow}
		for _, d := range verdicts[i].Denials {
			fv.Reasons = append(fv.Reasons, Reason{Party: string(d.Party), PolicyID: d.PolicyID, Code: d.Reason})
		}
		if f.FreeText {
			checkFreeText(&fv, f.Value, f.MaxLength, &res)
		}
		if len(fv.Reasons) > 0 {
			fv.Action = Deny
		}
		res.Fields[i] = fv
	}
	allowed := res.Allowed()
	if len(allowed) == 0 {
		res.Outcome = Refuse
		res.Reasons = []Reason{{Party: PartyBroker, Code: CodeNothingAllowed}}
		res.Normalized = nil
		return res, nil
	}
	res.Outcome = Deliver
	if len(allowed) < len(res.Fields) {
		res.Outcome = DeliverPartial
	}
	if !recipientSide {
		return res, nil
	}

	// Free text labels whatever carries it as untrusted, a held item as
	// much as a view: the person who releases it reads the same text.
	res.Untrusted = slices.ContainsFunc(res.Fields, func(f FieldVerdict) bool { return f.FreeText && f.Action != Deny })
	// The recipient side: who sees what, and what waits for the person.
	switch {
	case isRequest:
		res.hold(HeldConnectionRequest, allowed, "", CodeConnectionHeld)
		return res, nil
	case len(commits) > 0:
		why, err := preapproved(ctx, sets.Recipient, m, msg, commits)
		if err != nil {
			return Result{}, err
		}
		if why == nil {
			res.hold(HeldCommitment, allowed, commits[0], CodeCommitmentHeld)
			return res, nil
		}
		res.Reasons = append(res.Reasons, why...)
	}
	res.views(agentClasses)
	return res, nil
}

// checkFreeText applies the cap and the DLP scan to an allowed free-text
// value, adding reasons that deny it; the normalized text is what crosses.
func checkFreeText(fv *FieldVerdict, value any, maxLength int, res *Result) {
	s, _ := value.(string)
	n, err := freetext.Check(s, true, maxLength)
	var fe *freetext.Error
	if errors.As(err, &fe) {
		fv.Reasons = append(fv.Reasons, Reason{Party: PartyBroker, Code: string(fe.Code)})
		return
	}
	findings := dlp.Scan(n)
	for _, f := range findings {
		if !slices.Contains(fv.DLP, string(f.Detector)) {
			fv.DLP = append(fv.DLP, string(f.Detector))
		}
		if f.Severity == dlp.Block && !slices.ContainsFunc(fv.Reasons, func(r Reason) bool { return r.Code == codeDLPPrefix+string(f.Detector) }) {
			fv.Reasons = append(fv.Reasons, Reason{Party: PartyBroker, Code: codeDLPPrefix + string(f.Detector)})
		}
	}
	if len(fv.Reasons) == 0 {
		if res.Normalized == nil {
			res.Normalized = map[string]string{}
		}
		res.Normalized[fv.Pointer] = n.Text()
	}
}

// preapproved answers why the message may commit the recipient without
// asking, or nil when it may not: every word of x-alp-commits must be
// covered, by the first of the recipient's own set (it permits
// Alp::Action::"commit"), a standing rule of theirs (the lowest id of
// those that match), an organization rule covering the pair (the lowest
// id). Each cover is one reason, in the order of the words.
func preapproved(ctx context.Context, recipient *rules.Compiled, m Message, msg rules.Message, commits []string) ([]Reason, error) {
	var out []Reason
	add := func(r Reason) {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	for _, c := range commits {
		v, err := rules.DecideCommit(ctx, recipient, rules.FieldRequest{Agent: msg.Agent, Context: msg.Context,
			Field: rules.Field{Type: msg.Fields[0].Type, Pointer: "", Class: rules.ClassPublic, Commits: c}})
		if err != nil {
			return nil, fmt.Errorf("decision: commit: %w", err)
		}
		if v.Allowed {
			add(Reason{Party: string(rules.PartyRecipient), Code: CodeStandingApproval})
			continue
		}
		if id := standingRuleFor(m, c); id != "" {
			add(Reason{Party: string(rules.PartyRecipient), PolicyID: id, Code: CodeStandingApproval})
			continue
		}
		if id := orgRuleFor(m.OrgCommits, c); id != "" {
			add(Reason{Party: string(rules.PartyRecipientOrg), PolicyID: id, Code: CodeOrgPreapproved})
			continue
		}
		return nil, nil
	}
	return out, nil
}

// standingRuleFor is the lowest id of the standing rules that let m
// commit the recipient to action; empty for none.
func standingRuleFor(m Message, action string) string {
	var id string
	for _, r := range m.StandingRules {
		if r.covers(m.Type.Name(), m.Sender.Address, action, m.At) && (id == "" || r.ID < id) {
			id = r.ID
		}
	}
	return id
}

// orgRuleFor is the lowest id of the organization rules that pre-approve
// action; empty for none.
func orgRuleFor(covers []relationships.OrgCover, action string) string {
	var id string
	for _, c := range covers {
		if slices.Contains(c.Commits, action) && (id == "" || c.RuleID < id) {
			id = c.RuleID
		}
	}
	return id
}

// hold makes the whole message wait for the person: every crossing field
// is held, and no agent sees anything yet.
func (r *Result) hold(kind HeldKind, pointers []string, commits, code string) {
	r.Outcome = HoldOutcome
	r.Reasons = append(r.Reasons, Reason{Party: PartyBroker, Code: code})
	r.Held = append(r.Held, Held{Kind: kind, Pointers: pointers, Commits: commits})
	for i := range r.Fields {
		if r.Fields[i].Action == Allow {
			r.Fields[i].Action = Hold
		}
	}
}

// views builds each trust class's view: company-class agents see every
// crossing field; consumer-class agents every one but the confidential
// ones, which are held for the person. With no company-class agent the
// confidential fields reach nobody now, so their action is hold.
func (r *Result) views(agentClasses []string) {
	var all, consumer, confidential []string
	for _, f := range r.Fields {
		if f.Action != Allow {
			continue
		}
		all = append(all, f.Pointer)
		if f.Class == rules.ClassConfidential {
			confidential = append(confidential, f.Pointer)
		} else {
			consumer = append(consumer, f.Pointer)
		}
	}
	company := slices.Contains(agentClasses, rules.TrustCompany)
	if company {
		r.Views = append(r.Views, View{TrustClass: rules.TrustCompany, Pointers: all})
	}
	consumerAgent := slices.Contains(agentClasses, rules.TrustConsumer)
	if consumerAgent {
		r.Views = append(r.Views, View{TrustClass: rules.TrustConsumer, Pointers: consumer})
	}
	// Held for the person whenever an agent of theirs cannot see them: a
	// consumer-class one, or none at all.
	if len(confidential) > 0 && (consumerAgent || !company) {
		r.Held = append(r.Held, Held{Kind: HeldConfidentialFields, Pointers: confidential})
		r.Reasons = append(r.Reasons, Reason{Party: PartyBroker, Code: CodeConfidentialHeld})
	}
	if !company {
		for i := range r.Fields {
			if r.Fields[i].Action == Allow && r.Fields[i].Class == rules.ClassConfidential {
				r.Fields[i].Action = Hold
			}
		}
	}
}
