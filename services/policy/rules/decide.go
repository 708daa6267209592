package rules

import (
	"context"
	"errors"
	"fmt"
	"slices"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
)

// Entity types and actions of the entity model (schema.cedarschema).
const (
	entityAgent = types.EntityType("Alp::Agent")
	entityField = types.EntityType("Alp::Field")
	entityAct   = types.EntityType("Alp::Action")
)

var (
	actionShareField = types.NewEntityUID(entityAct, "share_field")
	actionCommit     = types.NewEntityUID(entityAct, "commit")
)

// Field classes, trust classes and relationships the entity model knows.
// Decide refuses other values so a caller's typo cannot slip past a rule
// comparing strings.
const (
	ClassPublic       = "public"
	ClassInternal     = "internal"
	ClassConfidential = "confidential"

	TrustConsumer = "consumer"
	TrustCompany  = "company"

	RelConnected      = "connected"
	RelStranger       = "stranger"
	RelBlocked        = "blocked"
	RelOrgPreapproved = "org_preapproved"
)

// ReasonDefaultDeny is the public reason of a denial by absence of permit.
const ReasonDefaultDeny = "default_deny"

// Agent is the principal: the sending agent.
type Agent struct {
	ID         string `json:"id"`
	Person     string `json:"person"`
	TrustClass string `json:"trust_class"` // TrustConsumer | TrustCompany
	Tenant     string `json:"tenant"`
}

// Side describes the sender or the recipient in the context.
type Side struct {
	Address string   `json:"address"`
	Tenant  string   `json:"tenant"`
	Org     string   `json:"org"`
	Roles   []string `json:"roles,omitempty"`
}

// Context is what the message's two sides and their relationship say.
type Context struct {
	Sender       Side   `json:"sender"`
	Recipient    Side   `json:"recipient"`
	Relationship string `json:"relationship"` // Rel*
}

// Field is the resource: one classified field of the body.
type Field struct {
	Type     string `json:"type"`    // message type, "meeting.request/v1"
	Pointer  string `json:"pointer"` // RFC 6901
	Class    string `json:"class"`   // Class*
	FreeText bool   `json:"freetext,omitempty"`
	Commits  string `json:"commits,omitempty"` // "" unless the type commits the recipient
}

// Message is one message's fields with the principal and context they
// share; DecideMessage builds those once for all fields.
type Message struct {
	Agent   Agent
	Context Context
	Fields  []Field
}

// FieldRequest asks about one field.
type FieldRequest struct {
	Agent   Agent
	Context Context
	Field   Field
}

// Parties are the compiled sets a stage evaluates. A nil slot means that
// party is not evaluated at this stage (the sender side has no recipient
// sets; the recipient side no sender sets); Decide refuses an empty
// Parties and a set in the wrong slot.
type Parties struct {
	Sender       *Compiled
	SenderOrg    *Compiled
	RecipientOrg *Compiled
	Recipient    *Compiled
}

// Denial names who refused a field, by which policy and why. Reason is
// the policy's public @reason code.
type Denial struct {
	Party    Party  `json:"party"`
	PolicyID string `json:"policy_id,omitempty"`
	Reason   string `json:"reason"`
}

// PublicView is the denial as viewer may see it: another party's policy
// id is withheld, leaving only the party and the public reason code. The
// rule text is never in a Denial.
func (d Denial) PublicView(viewer Party) Denial {
	if d.Party != viewer {
		d.PolicyID = ""
	}
	return d
}

// Verdict is the decision on one field. Allowed only if every evaluated
// party permitted it and none forbade it.
type Verdict struct {
	Pointer string   `json:"pointer"`
	Allowed bool     `json:"allowed"`
	Denials []Denial `json:"denials,omitempty"`
}

// PublicView applies Denial.PublicView to every denial.
func (v Verdict) PublicView(viewer Party) Verdict {
	if len(v.Denials) == 0 {
		return v
	}
	out := v
	out.Denials = make([]Denial, len(v.Denials))
	for i, d := range v.Denials {
		out.Denials[i] = d.PublicView(viewer)
	}
	return out
}

// Decide decides one field across the given parties' sets.
func Decide(ctx context.Context, sets Parties, req FieldRequest) (Verdict, error) {
	vs, err := DecideMessage(ctx, sets, Message{Agent: req.Agent, Context: req.Context, Fields: []Field{req.Field}})
	if err != nil {
		return Verdict{}, err
	}
	return vs[0], nil
}

// DecideMessage decides every field of msg, in order, across the sets:
// each party's set must permit the field (a party with no matching permit
// denies it as DefaultDenyID) and no forbid may match (deny wins). The
// verdict lists every denial, parties in the order sender, sender_org,
// recipient_org, recipient and policies in source order.
func DecideMessage(ctx context.Context, sets Parties, msg Message) ([]Verdict, error) {
	slots := [4]*Compiled{sets.Sender, sets.SenderOrg, sets.RecipientOrg, sets.Recipient}
	want := [4]Party{PartySender, PartySenderOrg, PartyRecipientOrg, PartyRecipient}
	n := 0
	for i, c := range slots {
		if c == nil {
			continue
		}
		if c.Party != want[i] {
			return nil, fmt.Errorf("rules: %s set in the %s slot", c.Party, want[i])
		}
		n++
	}
	if n == 0 {
		return nil, errors.New("rules: no policy set to evaluate")
	}
	return decide(ctx, slots[:], actionShareField, msg)
}

// DecideCommit asks the recipient's set whether a committing field may
// commit the recipient without asking. Denied means "hold for approval";
// only the recipient's rules answer this (issue 12, item 4).
func DecideCommit(ctx context.Context, recipient *Compiled, req FieldRequest) (Verdict, error) {
	if recipient == nil || recipient.Party != PartyRecipient {
		return Verdict{}, errors.New("rules: DecideCommit needs the recipient's set")
	}
	vs, err := decide(ctx, []*Compiled{recipient}, actionCommit,
		Message{Agent: req.Agent, Context: req.Context, Fields: []Field{req.Field}})
	if err != nil {
		return Verdict{}, err
	}
	return vs[0], nil
}

// oneEntity is the entity store of one request: the agent and the field
// being decided. A two-entry lookup beats building a map per field.
type oneEntity struct {
	agent types.Entity
	field types.Entity
}

func (g *oneEntity) Get(uid types.EntityUID) (types.Entity, bool) {
	switch uid {
	case g.agent.UID:
		return g.agent, true
	case g.field.UID:
		return g.field, true
	}
	return types.Entity{}, false
}

func decide(ctx context.Context, sets []*Compiled, action types.EntityUID, msg Message) ([]Verdict, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("rules: decide: %w", err)
	}
	if err := checkMessage(msg); err != nil {
		return nil, err
	}
	store := &oneEntity{agent: types.Entity{
		UID: types.NewEntityUID(entityAgent, types.String(msg.Agent.ID)),
		Attributes: types.NewRecord(types.RecordMap{
			"person":      types.String(msg.Agent.Person),
			"trust_class": types.String(msg.Agent.TrustClass),
			"tenant":      types.String(msg.Agent.Tenant),
		}),
	}}
	req := cedar.Request{
		Principal: store.agent.UID,
		Action:    action,
		Context: types.NewRecord(types.RecordMap{
			"sender":       sideRecord(msg.Context.Sender),
			"recipient":    sideRecord(msg.Context.Recipient),
			"relationship": types.String(msg.Context.Relationship),
		}),
	}
	// Fields of one message mostly repeat a few shapes, and each set reads
	// only some attributes of a field (the default sender_org set never
	// reads freetext): each set answers once per distinct projection of a
	// field onto what it reads. This is what keeps a 30-field message
	// within budget.
	type answer struct {
		key     Field
		denials []Denial // nil: permitted
	}
	memo := make([][]answer, len(sets))
	out := make([]Verdict, len(msg.Fields))
	for i, f := range msg.Fields {
		v := Verdict{Pointer: f.Pointer}
		built := false
		for si, c := range sets {
			if c == nil {
				continue
			}
			key := c.reads.project(f)
			if j := slices.IndexFunc(memo[si], func(a answer) bool { return a.key == key }); j >= 0 {
				v.Denials = append(v.Denials, memo[si][j].denials...)
				continue
			}
			if !built {
				store.field = types.Entity{
					UID: types.NewEntityUID(entityField, types.String(f.Pointer)),
					Attributes: types.NewRecord(types.RecordMap{
						"type":     types.String(f.Type),
						"pointer":  types.String(f.Pointer),
						"class":    types.String(f.Class),
						"freetext": types.Boolean(f.FreeText),
						"commits":  types.String(f.Commits),
					}),
				}
				req.Resource = store.field.UID
				built = true
			}
			d := evaluate(c, store, req)
			memo[si] = append(memo[si], answer{key: key, denials: d})
			v.Denials = append(v.Denials, d...)
		}
		v.Allowed = len(v.Denials) == 0
		out[i] = v
	}
	return out, nil
}

// evaluate is one party's answer for one field: the forbids that matched
// (or errored), a default deny when nothing permitted, nil when permitted.
func evaluate(c *Compiled, store *oneEntity, req cedar.Request) []Denial {
	var ds []Denial
	dec, diag := cedar.Authorize(c, store, req)
	for _, r := range diag.Reasons {
		if j := c.index[r.PolicyID]; c.forbid[j] {
			ds = append(ds, Denial{Party: c.Party, PolicyID: string(r.PolicyID), Reason: c.reason[j]})
		}
	}
	// Cedar skips a policy whose evaluation errors; for a forbid that would
	// fail open, so an erroring forbid denies.
	for _, e := range diag.Errors {
		if j := c.index[e.PolicyID]; c.forbid[j] {
			ds = append(ds, Denial{Party: c.Party, PolicyID: string(e.PolicyID), Reason: c.reason[j]})
		}
	}
	if dec != cedar.Allow && len(ds) == 0 {
		ds = append(ds, Denial{Party: c.Party, PolicyID: DefaultDenyID, Reason: ReasonDefaultDeny})
	}
	return ds
}

func sideRecord(s Side) types.Record {
	roles := make([]types.Value, len(s.Roles))
	for i, r := range s.Roles {
		roles[i] = types.String(r)
	}
	return types.NewRecord(types.RecordMap{
		"address": types.String(s.Address),
		"tenant":  types.String(s.Tenant),
		"org":     types.String(s.Org),
		"roles":   types.NewSet(roles...),
	})
}

func checkMessage(msg Message) error {
	switch msg.Agent.TrustClass {
	case TrustConsumer, TrustCompany:
	default:
		return fmt.Errorf("rules: agent %q: unknown trust class %q", msg.Agent.ID, msg.Agent.TrustClass)
	}
	switch msg.Context.Relationship {
	case RelConnected, RelStranger, RelBlocked, RelOrgPreapproved:
	default:
		return fmt.Errorf("rules: unknown relationship %q", msg.Context.Relationship)
	}
	for _, f := range msg.Fields {
		switch f.Class {
		case ClassPublic, ClassInternal, ClassConfidential:
		default:
			return fmt.Errorf("rules: field %s: unknown class %q", f.Pointer, f.Class)
		}
	}
	return nil
}
