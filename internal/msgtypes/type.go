package msgtypes

import (
	"bytes"
	"errors"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Class is a field's classification (x-alp-class).
type Class string

const (
	Public       Class = "public"
	Internal     Class = "internal"
	Confidential Class = "confidential"
)

func (c Class) valid() bool { return c == Public || c == Internal || c == Confidential }

// rank orders classes from least to most restricted; "" (unclassified) is
// below all.
func (c Class) rank() int {
	switch c {
	case Public:
		return 1
	case Internal:
		return 2
	case Confidential:
		return 3
	}
	return 0
}

// stricter returns the more restricted of c and d.
func (c Class) stricter(d Class) Class {
	if d.rank() > c.rank() {
		return d
	}
	return c
}

// Type is one registered message type and version. It is immutable and
// safe for concurrent use.
type Type struct {
	name    string
	owner   string
	commits []string
	digest  string
	schema  []byte
	root    *jsonschema.Schema
	// meta holds the x-alp-* keywords of every compiled subschema that
	// carries one, keyed by the compiled schema: a field's class is read
	// from the schemas that apply to it, so $ref targets, oneOf branches
	// and array items need no path bookkeeping.
	meta map[*jsonschema.Schema]schemaMeta
}

type schemaMeta struct {
	class    Class
	freeText bool
}

// Name is the type's name: "meeting.request/v1", "example.org/expense.approval/v1".
func (t *Type) Name() string { return t.name }

func (t *Type) String() string { return t.name }

// Owner is the tenant that registered the type, or "" for a built-in.
func (t *Type) Owner() string { return t.owner }

// Builtin reports whether the type ships with alpd (spec/types).
func (t *Type) Builtin() bool { return t.owner == "" }

// Commits lists what a message of this type commits the person receiving it to
// (x-alp-commits: "meeting", "payment" …), sorted; nil if nothing.
func (t *Type) Commits() []string { return slices.Clone(t.commits) }

// Digest is the hex SHA-256 of the schema in RFC 8785 canonical form: two
// registrations of one name are the same type exactly when their digests
// are equal.
func (t *Type) Digest() string { return t.digest }

// Schema is the schema document in RFC 8785 canonical form.
func (t *Type) Schema() []byte { return bytes.Clone(t.schema) }

// Validate checks body against the type. A failure is ValidationErrors:
// every failing keyword with the JSON pointer into the body.
func (t *Type) Validate(body []byte) error {
	_, err := t.decodeValid(body)
	return err
}

// Field is one leaf value present in a body: a string, number, boolean or
// null, or a value the schema does not structure further (then the whole
// value is one field).
type Field struct {
	// Pointer is the RFC 6901 pointer to the value in the body.
	Pointer string
	// Class is the strictest x-alp-class of the schemas that apply to the
	// value and to every member or item on the way to it: a field inside
	// a confidential object is confidential whatever its own class says.
	Class Class
	// FreeText is true if any schema that applies to the value says
	// x-alp-freetext.
	FreeText bool
	// Value is the decoded value (numbers as json.Number, so no float
	// rounding).
	Value any
	// MaxLength is the lowest maxLength of the schemas that apply to the
	// value (0: none). Free text is capped again after normalization, which
	// may lengthen it (NFKC expands ligatures), with the lower of this and
	// the 280-character cap.
	MaxLength int
}

// Fields returns every leaf present in body with its pointer, class and
// free-text flag, in document order of the schema's properties (members
// sorted by name, items by index). Call it on a body that passed Validate
// (or use Check): a member the schema does not classify is an error, never
// a silently skipped field.
func (t *Type) Fields(body []byte) ([]Field, error) {
	v, err := decode(body)
	if err != nil {
		return nil, err
	}
	return t.fields(v)
}

// Check validates body and returns its fields, decoding it once.
func (t *Type) Check(body []byte) ([]Field, error) {
	_, fs, err := t.CheckValue(body)
	return fs, err
}

// CheckValue is Check that also returns the decoded body (objects as
// map[string]any, numbers as json.Number), for a caller that builds other
// bodies from it without decoding again.
func (t *Type) CheckValue(body []byte) (any, []Field, error) {
	v, err := t.decodeValid(body)
	if err != nil {
		return nil, nil, err
	}
	fs, err := t.fields(v)
	return v, fs, err
}

// CheckWithheld is CheckValue of a body from which another broker's
// sender side withheld the members at withheld (pointers, as that broker
// signed them): a member the schema requires is no failure when it was
// withheld. Every other keyword holds as for CheckValue.
func (t *Type) CheckWithheld(body []byte, withheld []string) (any, []Field, error) {
	v, err := t.decodeValidWithheld(body, withheld)
	if err != nil {
		return nil, nil, err
	}
	fs, err := t.fields(v)
	return v, fs, err
}

func (t *Type) decodeValid(body []byte) (any, error) { return t.decodeValidWithheld(body, nil) }

func (t *Type) decodeValidWithheld(body []byte, withheld []string) (any, error) {
	v, err := decode(body)
	if err != nil {
		return nil, err
	}
	if err := t.root.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, ValidationErrors{{Keyword: "schema", Message: err.Error()}}
		}
		if es := flatten(ve).withoutWithheld(withheld); len(es) > 0 {
			return nil, es
		}
	}
	return v, nil
}

// withoutWithheld drops the required failures whose every missing member
// is one of withheld.
func (es ValidationErrors) withoutWithheld(withheld []string) ValidationErrors {
	if len(withheld) == 0 {
		return es
	}
	return slices.DeleteFunc(es, func(e ValidationError) bool {
		if e.Keyword != "required" || len(e.missing) == 0 {
			return false
		}
		for _, m := range e.missing {
			if !slices.Contains(withheld, e.Pointer+"/"+escape(m)) {
				return false
			}
		}
		return true
	})
}

func decode(body []byte) (any, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return nil, ValidationErrors{{Keyword: "json", Message: "the body is not JSON: " + err.Error()}}
	}
	return v, nil
}

// flatten turns the library's error tree into its leaves: the keywords that
// failed, each at its place in the body.
func flatten(root *jsonschema.ValidationError) ValidationErrors {
	// Messages are for people and in English; callers match on Keyword.
	// A printer per failure: failures are the rare path.
	printer := message.NewPrinter(language.English)
	var out ValidationErrors
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		kw := ""
		if p := e.ErrorKind.KeywordPath(); len(p) > 0 {
			kw = p[len(p)-1]
		}
		ve := ValidationError{
			Pointer: pointer(e.InstanceLocation),
			Keyword: kw,
			Message: e.ErrorKind.LocalizedString(printer),
		}
		if r, ok := e.ErrorKind.(*kind.Required); ok {
			ve.missing = r.Missing
		}
		out = append(out, ve)
	}
	walk(root)
	slices.SortStableFunc(out, func(a, b ValidationError) int {
		if c := strings.Compare(a.Pointer, b.Pointer); c != 0 {
			return c
		}
		return strings.Compare(a.Keyword, b.Keyword)
	})
	return slices.CompactFunc(out, func(a, b ValidationError) bool {
		return a.Pointer == b.Pointer && a.Keyword == b.Keyword && a.Message == b.Message
	})
}

func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escape(t))
	}
	return b.String()
}
