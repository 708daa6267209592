package rules

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	cedar "github.com/cedar-policy/cedar-go"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
	"github.com/cedar-policy/cedar-go/x/exp/schema"
	"github.com/cedar-policy/cedar-go/x/exp/schema/validate"
)

// Party is one of the four rule holders a field must satisfy.
type Party string

// The four parties, in the order Decide evaluates and reports them.
const (
	PartySender       Party = "sender"
	PartySenderOrg    Party = "sender_org"
	PartyRecipientOrg Party = "recipient_org"
	PartyRecipient    Party = "recipient"
)

// Valid reports whether p is one of the four parties.
func (p Party) Valid() bool {
	switch p {
	case PartySender, PartySenderOrg, PartyRecipientOrg, PartyRecipient:
		return true
	}
	return false
}

// Limits bound what one write may store. A policy set is evaluated for
// every field of every message, so its size is a latency budget.
type Limits struct {
	MaxBytes    int // source text
	MaxPolicies int
}

// Default limits: generous for hand-written rules and small enough that
// four sets of a 30-field message stay within the per-message budget.
const (
	DefaultMaxBytes    = 64 << 10
	DefaultMaxPolicies = 200
)

//go:embed schema.cedarschema
var schemaText []byte

// Engine validates policy sets against alpd's entity model. It holds the
// resolved schema so each write is type-checked without re-parsing it.
// Safe for concurrent use.
type Engine struct {
	limits    Limits
	validator *validate.Validator
}

// New builds an Engine; a zero Limits field takes its default.
func New(limits Limits) (*Engine, error) {
	if limits.MaxBytes <= 0 {
		limits.MaxBytes = DefaultMaxBytes
	}
	if limits.MaxPolicies <= 0 {
		limits.MaxPolicies = DefaultMaxPolicies
	}
	var s schema.Schema
	s.SetFilename("schema.cedarschema")
	if err := s.UnmarshalCedar(schemaText); err != nil {
		return nil, fmt.Errorf("rules: parse entity model: %w", err)
	}
	r, err := s.Resolve()
	if err != nil {
		return nil, fmt.Errorf("rules: resolve entity model: %w", err)
	}
	return &Engine{limits: limits, validator: validate.New(r, validate.WithStrict())}, nil
}

// Limits are the engine's limits, defaults filled in: a surface that
// takes rule text bounds its request bodies by MaxBytes.
func (e *Engine) Limits() Limits { return e.limits }

// Schema returns the entity model in Cedar schema syntax, for docs and for
// editors that validate locally.
func Schema() []byte { return append([]byte(nil), schemaText...) }

// PolicyInfo describes one validated policy. Canonical is cedar-go's
// re-serialisation, so whitespace and comment edits do not count as a
// change in IsTightening.
type PolicyInfo struct {
	ID        string
	Reason    string
	Effect    cedar.Effect
	Line      int
	Column    int
	Canonical string
}

// Set is a validated policy set of one party. Text is what the author
// wrote (stored as is, comments included); Hash is its SHA-256, the key of
// the compiled-set cache and the set's content version.
type Set struct {
	Party    Party
	Text     []byte
	Hash     string
	Policies []PolicyInfo

	parsed []*cedar.Policy // index-aligned with Policies
}

var (
	// @id is echoed in the party's own view and in ledger entries.
	idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)
	// @reason is shown to other parties, so it must be a code, never prose
	// that could leak what the rule says.
	reasonPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	// cedar-go reports "parse error at <file>:<line>:<col> ...".
	parsePos = regexp.MustCompile(`:(\d+):(\d+)\b`)
	// The validator names the action whose context it checked.
	actionSuffix = regexp.MustCompile(` for Alp::Action::"[a-z_]+"`)
)

// DefaultDenyID is the policy id a denial names when no policy of the
// party's set permitted the field; no policy may take it.
const DefaultDenyID = "default-deny"

// Validate parses text as party's policy set and checks it against the
// entity model, the annotation rules and the limits. On refusal it returns
// a *ValidationError listing every problem.
func (e *Engine) Validate(party Party, text []byte) (*Set, error) {
	fail := func(ps ...Problem) (*Set, error) {
		return nil, &ValidationError{Party: party, Problems: ps}
	}
	if !party.Valid() {
		return fail(Problem{Code: CodeUnknownParty, Message: fmt.Sprintf("unknown party %q", party)})
	}
	if len(text) > e.limits.MaxBytes {
		return fail(Problem{Code: CodeTooLarge, Message: fmt.Sprintf("%d bytes, limit %d", len(text), e.limits.MaxBytes)})
	}
	list, err := cedar.NewPolicyListFromBytes(string(party), text)
	if err != nil {
		return fail(parseProblem(err))
	}
	if len(list) > e.limits.MaxPolicies {
		return fail(Problem{Code: CodeTooLarge, Message: fmt.Sprintf("%d policies, limit %d", len(list), e.limits.MaxPolicies)})
	}
	sum := sha256.Sum256(text)
	set := &Set{Party: party, Text: append([]byte(nil), text...), Hash: hex.EncodeToString(sum[:]), parsed: list}
	var problems []Problem
	seen := make(map[string]int, len(list))
	for i, p := range list {
		pos := p.Position()
		at := func(c Code, id, msg string) Problem {
			return Problem{Code: c, Message: msg, PolicyID: id, Line: pos.Line, Column: pos.Column}
		}
		ann := p.Annotations()
		id, hasID := ann["id"]
		reason, hasReason := ann["reason"]
		switch {
		case !hasID:
			problems = append(problems, at(CodeMissingID, "", fmt.Sprintf("policy %d has no @id annotation", i+1)))
		case string(id) == DefaultDenyID || !idPattern.MatchString(string(id)):
			problems = append(problems, at(CodeInvalidID, string(id), fmt.Sprintf("@id must match %s and not be %q", idPattern, DefaultDenyID)))
		default:
			if prev, dup := seen[string(id)]; dup {
				problems = append(problems, at(CodeDuplicateID, string(id), fmt.Sprintf("@id also used by policy %d", prev+1)))
			}
			seen[string(id)] = i
		}
		switch {
		case !hasReason:
			problems = append(problems, at(CodeMissingReason, string(id), "policy has no @reason annotation"))
		case !reasonPattern.MatchString(string(reason)):
			problems = append(problems, at(CodeInvalidReason, string(id), fmt.Sprintf("@reason is a public reason code and must match %s", reasonPattern)))
		}
		for _, msg := range e.typeCheck(string(id), p) {
			problems = append(problems, at(schemaCode(msg), string(id), msg))
		}
		set.Policies = append(set.Policies, PolicyInfo{
			ID: string(id), Reason: string(reason), Effect: p.Effect(),
			Line: pos.Line, Column: pos.Column, Canonical: string(p.MarshalCedar()),
		})
	}
	if len(problems) > 0 {
		return fail(problems...)
	}
	return set, nil
}

// typeCheck runs cedar-go's schema validator (x/exp/schema/validate,
// strict mode) and returns one message per problem, without the
// validator's "for policy `…`," prefix since Problem names the policy.
func (e *Engine) typeCheck(id string, p *cedar.Policy) []string {
	err := e.validator.Policy(id, (*xast.Policy)(p.AST()))
	if err == nil {
		return nil
	}
	var out []string
	for _, leaf := range flatten(err) {
		msg := strings.TrimPrefix(leaf.Error(), "for policy `"+id+"`, ")
		// A policy that does not scope its action is checked once per
		// action; the same mistake is reported once.
		msg = actionSuffix.ReplaceAllString(msg, "")
		// The validator adds this after an unknown type or action; the
		// first message already says what is wrong.
		if (strings.HasPrefix(msg, "unable to find an applicable action") && len(out) > 0) || slices.Contains(out, msg) {
			continue
		}
		out = append(out, msg)
	}
	return out
}

func flatten(err error) []error {
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range u.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// schemaCode maps the validator's messages onto our codes. The validator
// lives in cedar-go's experimental tree and has no typed errors, so this
// matches its (Rust-compatible) wording; rules_test pins each mapping.
func schemaCode(msg string) Code {
	switch {
	case strings.HasPrefix(msg, "unrecognized entity type"):
		return CodeUnknownEntityType
	case strings.HasPrefix(msg, "unrecognized action"):
		return CodeUnknownAction
	case strings.HasPrefix(msg, "attribute ") && strings.HasSuffix(msg, " not found"):
		return CodeUnknownAttribute
	}
	return CodeTypeError
}

func parseProblem(err error) Problem {
	msg := strings.TrimPrefix(err.Error(), "parser error: ")
	p := Problem{Code: CodeCedarParse, Message: msg}
	if m := parsePos.FindStringSubmatch(msg); m != nil {
		p.Line, _ = strconv.Atoi(m[1])
		p.Column, _ = strconv.Atoi(m[2])
	}
	return p
}

// IsTightening reports whether next may replace prev when the writer is an
// agent token, which may only tighten its person's rules: every policy of
// prev must be in next unchanged (by @id and canonical text) and every new
// policy must be a forbid. A forbid can only remove permissions — even one
// that errors at evaluation, since Decide fails closed on it.
func IsTightening(prev, next *Set) error {
	if prev == nil || next == nil {
		return errors.New("rules: IsTightening needs both sets")
	}
	refuse := &ValidationError{Party: next.Party}
	if prev.Party != next.Party {
		refuse.Problems = append(refuse.Problems, Problem{Code: CodeLooseningRefused,
			Message: fmt.Sprintf("set of party %s cannot replace one of %s", next.Party, prev.Party)})
		return refuse
	}
	byID := make(map[string]PolicyInfo, len(next.Policies))
	for _, p := range next.Policies {
		byID[p.ID] = p
	}
	for _, old := range prev.Policies {
		cur, ok := byID[old.ID]
		switch {
		case !ok:
			refuse.Problems = append(refuse.Problems, Problem{Code: CodeLooseningRefused, PolicyID: old.ID,
				Message: "an agent may not remove a policy"})
		case cur.Canonical != old.Canonical:
			refuse.Problems = append(refuse.Problems, Problem{Code: CodeLooseningRefused, PolicyID: old.ID,
				Line: cur.Line, Column: cur.Column, Message: "an agent may not change a policy"})
		}
		delete(byID, old.ID)
	}
	for _, p := range next.Policies {
		if _, added := byID[p.ID]; added && p.Effect != cedar.Forbid {
			refuse.Problems = append(refuse.Problems, Problem{Code: CodeLooseningRefused, PolicyID: p.ID,
				Line: p.Line, Column: p.Column, Message: "an agent may only add forbid policies"})
		}
	}
	if len(refuse.Problems) > 0 {
		return refuse
	}
	return nil
}
