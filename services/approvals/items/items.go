// Package items is what waits for a person's decision, as the approvals
// service keeps it: an Item per held item of a deliverable, its states, the
// decisions a person may take on it, and the standing rules ("approve
// always") they created. The pages and the JSON API read and decide through
// Store; the events behind it are on the approvals stream
// (alp.approvals.<tenant>.<person>.item.<item>, streams.ApprovalItemSubject).
package items

import (
	"context"
	"errors"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// Kind is what the person is asked to decide.
type Kind string

// Kinds, as the pages and the API name them.
const (
	ConfidentialFields Kind = "confidential_fields"
	Commitment         Kind = "commitment"
	ConnectionRequest  Kind = "connection_request"
)

// State is where an item stands; every state but Pending is terminal.
type State string

// States.
const (
	Pending        State = "pending"
	ApprovedOnce   State = "approved_once"
	ApprovedAlways State = "approved_always"
	Denied         State = "denied"
	Expired        State = "expired"
	Superseded     State = "superseded"
	Cancelled      State = "cancelled"
)

// Terminal reports whether no decision can change s.
func (s State) Terminal() bool { return s != Pending }

// Decision is what a person may decide on a pending item.
type Decision string

// Decisions.
const (
	ApproveOnce   Decision = "approve_once"
	ApproveAlways Decision = "approve_always"
	Deny          Decision = "deny"
)

// Errors of Store. Each matches one of these with errors.Is.
var (
	// ErrNotFound: no such item (or rule) of this person; another person's
	// item is not found either.
	ErrNotFound = errors.New("approvals: no such item")
	// ErrDecided: the item is no longer pending; the error's item is the
	// final state (a repeated decision shows it).
	ErrDecided = errors.New("approvals: already decided")
	// ErrDigest: the decision was made on another payload than the item
	// holds now (a stale page, or a superseded request).
	ErrDigest = errors.New("approvals: the request changed")
	// ErrNotOffered: the decision is not offered for this item (approve
	// always on confidential fields, on a self-attested agent's request, or
	// on a connection request).
	ErrNotOffered = errors.New("approvals: decision not offered")
	// ErrInvalid: malformed input (unknown decision, bad id).
	ErrInvalid = errors.New("approvals: invalid")
)

// Field is one field the item would disclose, with its class.
type Field struct {
	Pointer string `json:"pointer"`
	Class   string `json:"class"`
}

// Reason is why approval is needed: the party and its rule.
type Reason struct {
	Party   string `json:"party"`
	Rule    string `json:"rule,omitempty"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// Item is one thing waiting for (or decided by) its person.
type Item struct {
	ID       string `json:"id"`
	Tenant   string `json:"-"`
	PersonID string `json:"-"`
	Kind     Kind   `json:"kind"`
	State    State  `json:"state"`

	EnvelopeID string `json:"envelope_id"`
	// Who.
	From         string `json:"from"`
	FromAgent    string `json:"from_agent,omitempty"`
	AgentName    string `json:"agent_name,omitempty"`
	AgentClass   string `json:"agent_class"` // "company" or "consumer"
	Attested     bool   `json:"attested"`
	Verification string `json:"verification"`
	OriginBroker string `json:"origin_broker,omitempty"`
	// What.
	Type      string  `json:"type"`
	InReplyTo string  `json:"in_reply_to,omitempty"`
	Commits   string  `json:"commits,omitempty"`
	Disclosed []Field `json:"disclosed"`
	// Why.
	Reasons []Reason `json:"reasons"`

	PayloadDigest string    `json:"payload_digest"`
	BindingCode   string    `json:"binding_code"`
	Created       time.Time `json:"created"`
	Expires       time.Time `json:"expires"`

	// Set once decided.
	Decided        time.Time `json:"decided,omitzero"`
	StandingRuleID string    `json:"standing_rule_id,omitempty"`
	SupersededBy   string    `json:"superseded_by,omitempty"`
	DecisionReason string    `json:"decision_reason,omitempty"`

	// Payload is the held values, sealed with the person's data key
	// (Store.Render opens it); never serialized.
	Payload *alpv1.SealedBody `json:"-"`
}

// Offers is the decisions a pending item offers: approve once and deny
// always; approve always only for a commitment from an attested agent.
func (it Item) Offers() []Decision {
	if it.State != Pending {
		return nil
	}
	if it.Kind == Commitment && it.Attested {
		return []Decision{ApproveOnce, ApproveAlways, Deny}
	}
	return []Decision{ApproveOnce, Deny}
}

// Detail is one line of what an item says, in plain language: the
// field's label, its value as a person reads it (dates, durations, amounts
// formatted), the pointer and class it comes from.
type Detail struct {
	Pointer string `json:"pointer"`
	Label   string `json:"label"`
	Value   string `json:"value"`
	Class   string `json:"class"`
}

// Rendered is an item's payload opened for its person: the lines to show,
// a one-sentence summary, and the RFC 9396-shaped authorization_details
// object the decision is about.
type Rendered struct {
	Summary              string         `json:"summary"`
	Details              []Detail       `json:"details"`
	AuthorizationDetails map[string]any `json:"authorization_details"`
}

// StandingRule is an "approve always": what may commit the person without
// asking, until Expires or revoked.
type StandingRule struct {
	ID           string    `json:"id"`
	Type         string    `json:"type"`
	Counterparty string    `json:"counterparty"`
	Action       string    `json:"action"`
	Created      time.Time `json:"created"`
	Expires      time.Time `json:"expires"`
	Revoked      bool      `json:"revoked"`
	FromItem     string    `json:"from_item"`
}

// Active reports whether the rule covers anything at now.
func (r StandingRule) Active(now time.Time) bool { return !r.Revoked && now.Before(r.Expires) }

// Actor is who decides: the signed-in person (never an agent).
type Actor struct {
	PersonID string
	// SessionID ties the ledger entry to the web session that decided.
	SessionID string
}

// Store is what the pages and the API use.
type Store interface {
	// List is the person's items, pending first, then newest first.
	List(ctx context.Context, tenant, personID string) ([]Item, error)
	// Get is one of the person's items (ErrNotFound for anyone else's).
	Get(ctx context.Context, tenant, personID, id string) (Item, error)
	// Render opens the item's payload for its person.
	Render(ctx context.Context, it Item) (Rendered, error)
	// Decide records the person's decision on a pending item, bound to
	// payloadDigest (the digest the person saw). It answers the item as it
	// now stands; ErrDecided (with the final item), ErrDigest, ErrNotOffered,
	// ErrNotFound, ErrInvalid otherwise, and nothing is written.
	Decide(ctx context.Context, tenant, personID, id string, d Decision, payloadDigest string, by Actor) (Item, error)
	// Rules is the person's standing rules, active first.
	Rules(ctx context.Context, tenant, personID string) ([]StandingRule, error)
	// RevokeRule revokes one of the person's standing rules (ErrNotFound;
	// revoking a revoked rule answers it unchanged).
	RevokeRule(ctx context.Context, tenant, personID, ruleID string, by Actor) (StandingRule, error)
}
