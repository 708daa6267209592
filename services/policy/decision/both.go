package decision

import (
	"context"
	"fmt"

	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/services/policy/relationships"
	"github.com/alpd-project/alpd/services/policy/rules"
)

// Sets are every party's compiled set for one message.
type Sets struct {
	Sender, SenderOrg, RecipientOrg, Recipient *rules.Compiled
}

// Case is one message between two people on this broker, as the worker,
// DryRun and the conformance vectors describe it.
type Case struct {
	Message Message
	// SenderRelationship is the relationship as the sender side sees it,
	// RecipientRelationship as the recipient side does (they differ when,
	// say, the sender blocked the recipient).
	SenderRelationship, RecipientRelationship relationships.State
	Sets                                      Sets
	// RecipientAgentClasses are the trust classes of the recipient's
	// agents (nil: unknown, both assumed).
	RecipientAgentClasses []string
}

// Decision is a local message's two stages and what the sender may see of
// them.
type Decision struct {
	Sender    Result
	Recipient *Result // nil when the sender side refused
	// Combined is what the sender's agent hears: every field's verdict
	// (sender side first, then the recipient side's for what crossed),
	// another party's policy ids withheld.
	Combined Result
	// Forwarded is the body as it left the sender side.
	Forwarded []byte
	// body is the decoded body as sent, which Body projects.
	body any
}

// Body is the body with only the fields at pointers (each one that
// crossed the sender side), free text as in replace: a trust class's view
// or a held item's body, built without decoding the body again.
func (d Decision) Body(pointers []string, replace map[string]string) ([]byte, error) {
	if d.body == nil {
		return Project(d.Forwarded, pointers, replace)
	}
	return projectValue(d.body, pointers, replace)
}

// Decide runs both stages of a message to a recipient on this broker: the
// sender side, then the recipient side on what the sender side let
// through.
//
// The body is checked against its type once, here. The recipient side
// decides the fields that crossed as that check listed them, rather than
// checking Forwarded again: a projection that withholds a required member,
// a oneOf branch's distinguishing member or an array item (null) no longer
// matches the schema, and checking it would refuse as invalid_body every
// message the sender side only trimmed.
func Decide(ctx context.Context, c Case) (Decision, error) {
	body, fields, refused, err := checkBody(c.Message)
	if err != nil {
		return Decision{}, err
	}
	if refused != nil {
		return Decision{Sender: *refused, Combined: *refused}, nil
	}
	s, err := senderSide(ctx, c.Message, c.SenderRelationship, c.Sets.Sender, c.Sets.SenderOrg, fields)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Sender: s, Combined: s, body: body}
	if s.Outcome == Refuse {
		return d, nil
	}
	allowed := s.Allowed()
	fwd, err := projectValue(body, allowed, s.Normalized)
	if err != nil {
		return Decision{}, fmt.Errorf("decision: forwarding the sender side's fields: %w", err)
	}
	d.Forwarded = fwd
	// s.Fields is index-aligned with fields.
	crossed := make([]msgtypes.Field, 0, len(allowed))
	for i, f := range fields {
		if s.Fields[i].Action != Deny {
			crossed = append(crossed, f)
		}
	}
	m := c.Message
	m.Body = fwd
	r, err := recipientSide(ctx, m, c.RecipientRelationship, c.Sets.RecipientOrg, c.Sets.Recipient, c.RecipientAgentClasses, crossed)
	if err != nil {
		return Decision{}, err
	}
	d.Recipient = &r
	d.Combined = Merge(s, r, true)
	return d, nil
}

// Merge is both stages in one: fields the sender side denied keep its
// verdict, the others take the recipient side's; the outcome is the
// recipient side's, and deliver becomes deliver partial when the sender
// side withheld something. With withhold, it is what the sender may see:
// the recipient parties' policy ids are withheld (party and code remain).
func Merge(sender, recipient Result, withhold bool) Result {
	reasons := func(rs []Reason) []Reason {
		if withhold {
			return publicReasons(rs)
		}
		return rs
	}
	out := Result{Outcome: recipient.Outcome, Untrusted: recipient.Untrusted}
	out.Reasons = append(reasons(sender.Reasons), reasons(recipient.Reasons)...)
	byPointer := make(map[string]FieldVerdict, len(recipient.Fields))
	for _, f := range recipient.Fields {
		byPointer[f.Pointer] = f
	}
	for _, f := range sender.Fields {
		if f.Action != Deny {
			if r, ok := byPointer[f.Pointer]; ok {
				r.Reasons = reasons(r.Reasons)
				f = r
			} else {
				// The recipient side refused the whole message before
				// deciding any field (blocked, stranger): the field did not
				// cross, for the message's reasons.
				f.Action = Deny
				f.Reasons = reasons(recipient.Reasons)
			}
		}
		out.Fields = append(out.Fields, f)
	}
	if out.Outcome == Deliver && sender.Outcome == DeliverPartial {
		out.Outcome = DeliverPartial
	}
	for _, h := range recipient.Held {
		out.Held = append(out.Held, Held{Kind: h.Kind, Pointers: h.Pointers, Commits: h.Commits})
	}
	return out
}

// publicReasons withholds the policy ids of the recipient's parties: the
// sender learns who refused and the public code, never the rule.
func publicReasons(rs []Reason) []Reason {
	if len(rs) == 0 {
		return nil
	}
	out := make([]Reason, len(rs))
	for i, r := range rs {
		if r.Party == string(rules.PartyRecipient) || r.Party == string(rules.PartyRecipientOrg) {
			r.PolicyID = ""
		}
		out[i] = r
	}
	return out
}
