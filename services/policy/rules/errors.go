package rules

import (
	"fmt"
	"strings"
)

// Code is the machine-readable kind of a refused write. Clients switch on
// it; the message is for people.
type Code string

// Refusal codes of Validate and IsTightening.
const (
	CodeCedarParse        Code = "cedar_parse"
	CodeMissingID         Code = "missing_id"
	CodeMissingReason     Code = "missing_reason"
	CodeInvalidID         Code = "invalid_id"
	CodeInvalidReason     Code = "invalid_reason"
	CodeDuplicateID       Code = "duplicate_id"
	CodeUnknownEntityType Code = "unknown_entity_type"
	CodeUnknownAction     Code = "unknown_action"
	CodeUnknownAttribute  Code = "unknown_attribute"
	CodeTypeError         Code = "type_error"
	CodeTooLarge          Code = "too_large"
	CodeUnknownParty      Code = "unknown_party"
	CodeLooseningRefused  Code = "loosening_refused"
)

// Problem is one reason a set was refused. Line and Column (1-based) point
// at the offending token for parse errors and at the start of the policy
// otherwise; zero when the problem concerns the whole set.
type Problem struct {
	Code     Code   `json:"code"`
	Message  string `json:"message"`
	PolicyID string `json:"policy_id,omitempty"`
	Line     int    `json:"line,omitempty"`
	Column   int    `json:"column,omitempty"`
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "%d:%d: ", p.Line, p.Column)
	}
	if p.PolicyID != "" {
		fmt.Fprintf(&b, "policy %q: ", p.PolicyID)
	}
	fmt.Fprintf(&b, "%s: %s", p.Code, p.Message)
	return b.String()
}

// ValidationError lists every problem found in one write, so a person
// editing rules fixes them all in one round. Nothing of a refused set is
// stored or compiled.
type ValidationError struct {
	Party    Party     `json:"party"`
	Problems []Problem `json:"problems"`
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return fmt.Sprintf("rules: %s policy set refused: %s", e.Party, strings.Join(parts, "; "))
}

// Has reports whether the error carries a problem with code c.
func (e *ValidationError) Has(c Code) bool {
	for _, p := range e.Problems {
		if p.Code == c {
			return true
		}
	}
	return false
}
