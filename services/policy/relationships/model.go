package relationships

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/msgtypes"
)

// Errors. Every error a command or query returns matches one of them with
// errors.Is (or is a NATS failure); ErrInvalid's message names the field.
var (
	// ErrInvalid: a command's or query's input failed validation.
	ErrInvalid = errors.New("relationships: invalid")
	// ErrNotFound: no such connection of the person.
	ErrNotFound = errors.New("relationships: not found")
	// ErrState: the connection is not in a state the command applies to
	// (accepting a declined one, declining an accepted one).
	ErrState = errors.New("relationships: not in that state")
	// ErrDeclined: the person asked already declined this asker.
	ErrDeclined = errors.New("relationships: declined")
	// ErrBlocked: the person asked blocked this asker.
	ErrBlocked = errors.New("relationships: blocked")
	// ErrNotHosted: the tenant is not one of this store's.
	ErrNotHosted = errors.New("relationships: tenant not hosted")
)

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
}

// State is what one party is to a person, as Relationship answers it.
type State string

// States, in the order Relationship checks them.
const (
	Blocked        State = "blocked"
	Connected      State = "connected"
	OrgPreapproved State = "org_preapproved"
	Requested      State = "requested"
	Declined       State = "declined"
	Stranger       State = "stranger"
)

// ConnState is the state of a connection.
type ConnState string

// Connection states.
const (
	ConnRequested ConnState = "requested"
	ConnAccepted  ConnState = "accepted"
	ConnDeclined  ConnState = "declined"
)

// Party is someone on the other side: a person of the tenant (Person), or
// a remote address (Address, someone at another broker or another tenant).
// Exactly one is set in commands; queries may give a person's Address too
// (it says their domain for role_may_receive_from).
type Party struct {
	Person  string `json:"person,omitempty"`
	Address string `json:"address,omitempty"`
}

func (p Party) String() string {
	if p.Person != "" {
		return "person " + p.Person
	}
	return "address " + p.Address
}

// checkParty validates a command's party: exactly one of person and
// address, the address normalized.
func checkParty(field string, p Party) (Party, error) {
	switch {
	case p.Person != "" && p.Address != "":
		return Party{}, invalid(field, "give a person or an address, not both")
	case p.Person != "":
		if err := alp.ValidatePersonID(p.Person); err != nil {
			return Party{}, invalid(field+".person", "%v", err)
		}
		return p, nil
	case p.Address != "":
		if err := alp.ValidateAddress(p.Address); err != nil {
			return Party{}, invalid(field+".address", "%v", err)
		}
		return Party{Address: alp.NormalizeAddress(p.Address)}, nil
	default:
		return Party{}, invalid(field, "a person or an address is required")
	}
}

// checkQueryParty validates a query's party: a person, an address or both.
func checkQueryParty(field string, p Party) (Party, error) {
	if p.Person == "" && p.Address == "" {
		return Party{}, invalid(field, "a person or an address is required")
	}
	if p.Person != "" {
		if err := alp.ValidatePersonID(p.Person); err != nil {
			return Party{}, invalid(field+".person", "%v", err)
		}
	}
	if p.Address != "" {
		if err := alp.ValidateAddress(p.Address); err != nil {
			return Party{}, invalid(field+".address", "%v", err)
		}
		p.Address = alp.NormalizeAddress(p.Address)
	}
	return p, nil
}

func checkPerson(field, id string) error {
	if err := alp.ValidatePersonID(id); err != nil {
		return invalid(field, "%v", err)
	}
	return nil
}

// domainOf is the party's domain: its address's, or the tenant's for a
// person of the tenant without one.
func domainOf(tenant string, p Party) string {
	if p.Address != "" {
		if a, err := alp.ParseAddress(p.Address); err == nil {
			return a.Domain()
		}
		return ""
	}
	return tenant
}

// Connection is one connection of the projection.
type Connection struct {
	ID string `json:"id"`
	// From asked; To is the person asked, who decides.
	From       Party     `json:"from"`
	To         string    `json:"to"`
	State      ConnState `json:"state"`
	EnvelopeID string    `json:"envelope_id,omitempty"`
	Requested  time.Time `json:"requested"`
	// Decided is when it was accepted or declined.
	Decided time.Time `json:"decided,omitzero"`
}

// Other is the party on the other side of the connection from person.
func (c Connection) Other(person string) Party {
	if c.To == person {
		return c.From
	}
	return Party{Person: c.To}
}

// ConnectionID is the id of the connection between two parties of tenant:
// a hash of the pair, the same whichever of two people of the tenant asks.
func ConnectionID(tenant string, from Party, to string) string {
	if from.Person != "" {
		a, b := from.Person, to
		if b < a {
			a, b = b, a
		}
		return "c" + bus.HashID("connection", tenant, "person", a, b)
	}
	return "c" + bus.HashID("connection", tenant, "address", from.Address, to)
}

// TargetKind says what a block is about.
type TargetKind string

// Block targets.
const (
	TargetPerson  TargetKind = "person"
	TargetAddress TargetKind = "address"
	TargetDomain  TargetKind = "domain"
)

// Target is who a person blocks: a person of the tenant, a remote address
// or every address at a domain.
type Target struct {
	Kind  TargetKind `json:"kind"`
	Value string     `json:"value"`
}

func checkTarget(t Target) (Target, error) {
	switch t.Kind {
	case TargetPerson:
		if err := alp.ValidatePersonID(t.Value); err != nil {
			return Target{}, invalid("value", "%v", err)
		}
	case TargetAddress:
		if err := alp.ValidateAddress(t.Value); err != nil {
			return Target{}, invalid("value", "%v", err)
		}
		t.Value = alp.NormalizeAddress(t.Value)
	case TargetDomain:
		t.Value = strings.ToLower(t.Value)
		if err := alp.ValidateTenant(t.Value); err != nil {
			return Target{}, invalid("value", "%v", err)
		}
	default:
		return Target{}, invalid("kind", "%q: want person, address or domain", t.Kind)
	}
	return t, nil
}

// OrgRuleKind names an organization rule.
type OrgRuleKind string

// Organization rules.
const (
	// SameOrg: every two people of the tenant are connected.
	SameOrg OrgRuleKind = "same_org"
	// RoleMayReceiveFrom: the tenant's people with Role may receive from
	// any address at Domain.
	RoleMayReceiveFrom OrgRuleKind = "role_may_receive_from"
)

// OrgRule is a pre-approved relationship of a tenant.
type OrgRule struct {
	Kind   OrgRuleKind `json:"kind"`
	Role   string      `json:"role,omitempty"`
	Domain string      `json:"domain,omitempty"`
	// Commits are the x-alp-commits actions ("meeting") the relationship
	// also pre-approves: a message committing the recipient to one of
	// them, between people the rule covers, is delivered without asking.
	// Sorted and distinct; not part of the rule's id (changing them
	// changes the same rule).
	Commits []string `json:"commits,omitempty"`
}

const (
	maxRole = 256
	// maxOrgCommits bounds an org rule's commit actions: an organization
	// pre-approves a few kinds of commitment, not a vocabulary.
	maxOrgCommits = 8
)

// CheckOrgRule validates r and answers it normalized (the domain in lower
// case), as SetOrgRule stores it; a caller setting several rules checks
// them all first, so that a bad one stores none.
func CheckOrgRule(r OrgRule) (OrgRule, error) {
	switch r.Kind {
	case SameOrg:
		if r.Role != "" || r.Domain != "" {
			return OrgRule{}, invalid("rule", "same_org takes no role or domain")
		}
	case RoleMayReceiveFrom:
		if r.Role == "" || len(r.Role) > maxRole {
			return OrgRule{}, invalid("rule.role", "want 1 to %d characters", maxRole)
		}
		r.Domain = strings.ToLower(r.Domain)
		if err := alp.ValidateTenant(r.Domain); err != nil {
			return OrgRule{}, invalid("rule.domain", "%v", err)
		}
	default:
		return OrgRule{}, invalid("rule.kind", "%q: want same_org or role_may_receive_from", r.Kind)
	}
	commits, err := checkCommits(r.Commits)
	if err != nil {
		return OrgRule{}, err
	}
	r.Commits = commits
	return r, nil
}

// checkCommits validates an org rule's commit actions and answers them
// sorted and distinct (nil for none).
func checkCommits(in []string) ([]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := slices.Clone(in)
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > maxOrgCommits {
		return nil, invalid("rule.commits", "at most %d actions", maxOrgCommits)
	}
	for i, c := range out {
		if err := msgtypes.CheckCommitWord(c); err != nil {
			return nil, invalid(fmt.Sprintf("rule.commits[%d]", i), "%v", err)
		}
	}
	return out, nil
}

// OrgRuleID is the id of a rule of tenant: a hash of the rule.
func OrgRuleID(tenant string, r OrgRule) string {
	return "r" + bus.HashID("org_rule", tenant, string(r.Kind), r.Role, r.Domain)
}
