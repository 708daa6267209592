package msgtypes

import (
	"fmt"
	"strings"
)

// Code names why a schema or a name was refused at registration. Codes are
// stable: callers (the admin API, alpctl, a projection's log) show them to
// people and match on them.
type Code string

const (
	// CodeUnclassifiedProperty: a property, array item or map value without
	// x-alp-class (or the boolean schema true, which can carry none).
	CodeUnclassifiedProperty Code = "unclassified_property"
	// CodeUnknownKeyword: a keyword that is neither JSON Schema 2020-12 nor
	// one of x-alp-class, x-alp-freetext and x-alp-commits.
	CodeUnknownKeyword Code = "unknown_keyword"
	// CodeMisplacedKeyword: x-alp-commits below the root, or x-alp-class or
	// x-alp-freetext on the root.
	CodeMisplacedKeyword Code = "misplaced_keyword"
	// CodeInvalidKeywordValue: an x-alp-* keyword with a value outside its
	// range (a class other than public, internal, confidential …).
	CodeInvalidKeywordValue Code = "invalid_keyword_value"
	// CodeFreetextUncapped: x-alp-freetext on a schema that is not a string
	// with maxLength ≤ 280.
	CodeFreetextUncapped Code = "freetext_uncapped"
	// CodeRemoteRef: a $ref that leaves the schema's own document.
	CodeRemoteRef Code = "remote_ref"
	// CodeUnsupportedKeyword: a 2020-12 keyword the registry refuses
	// because it would move the schema's base or resolve at run time
	// ($id, $anchor, $schema below the root, $dynamicRef, $dynamicAnchor,
	// $vocabulary).
	CodeUnsupportedKeyword Code = "unsupported_keyword"
	// CodeUnknownFormat: a format the registry does not assert.
	CodeUnknownFormat Code = "unknown_format"
	// CodeOpenObject: an object schema without additionalProperties or
	// unevaluatedProperties, through which unclassified members would pass.
	CodeOpenObject Code = "open_object"
	// CodeOpenArray: an array schema without items.
	CodeOpenArray Code = "open_array"
	// CodeNotAnObject: the root does not describe a JSON object.
	CodeNotAnObject Code = "not_an_object"
	// CodeSchemaTooLarge: more than MaxSchemaBytes bytes or MaxSchemaDepth
	// levels of nesting.
	CodeSchemaTooLarge Code = "schema_too_large"
	// CodeInvalidSchema: not JSON, or refused by the JSON Schema compiler.
	CodeInvalidSchema Code = "invalid_schema"
	// CodeInvalidName: a type name that is not "<name>/v<N>" or
	// "<tenant>/<name>/v<N>".
	CodeInvalidName Code = "invalid_name"
	// CodeNameNotNamespaced: an organization's type not under its own
	// tenant domain.
	CodeNameNotNamespaced Code = "name_not_namespaced"
	// CodeNameCollidesWithBuiltin: an organization registering a built-in
	// type's name.
	CodeNameCollidesWithBuiltin Code = "name_collides_with_builtin"
	// CodeTypeExists: the name is registered with a different schema (a
	// type version is immutable: publish v<N+1>).
	CodeTypeExists Code = "type_exists"
)

// RegistrationError is why Register refused a type. Nothing of the type is
// kept.
type RegistrationError struct {
	Code Code
	// Name is the type name as given.
	Name string
	// Pointer is the RFC 6901 JSON pointer into the schema where the
	// problem is ("" for the whole schema, or when the name is at fault).
	Pointer string
	// Message says what is wrong in words.
	Message string
}

func (e *RegistrationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "message type %s: %s", quote(e.Name), e.Code)
	if e.Pointer != "" {
		fmt.Fprintf(&b, " at %s", quote(e.Pointer))
	}
	b.WriteString(": ")
	b.WriteString(e.Message)
	return b.String()
}

// ValidationError is one reason a body does not match its type: where in
// the body (an RFC 6901 pointer, "" for the whole body), the JSON Schema
// keyword that failed ("required", "format", "maxLength" …, or "json" for a
// body that is not JSON) and a message in words.
type ValidationError struct {
	Pointer string `json:"pointer"`
	Keyword string `json:"keyword"`
	Message string `json:"message"`
	// missing are the member names a required failure misses.
	missing []string
}

func (e ValidationError) Error() string {
	return fmt.Sprintf("%s at %s: %s", e.Keyword, quote(e.Pointer), e.Message)
}

// ValidationErrors are every reason a body failed, sorted by pointer and
// keyword. Validate returns it as its error.
type ValidationErrors []ValidationError

func (es ValidationErrors) Error() string {
	if len(es) == 0 {
		return "invalid body"
	}
	s := "invalid body: " + es[0].Error()
	if len(es) > 1 {
		s += fmt.Sprintf(" (and %d more)", len(es)-1)
	}
	return s
}

// quote renders untrusted input for an error: quoted and truncated.
func quote(s string) string {
	const max = 120
	if len(s) > max {
		return fmt.Sprintf("%q…", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
