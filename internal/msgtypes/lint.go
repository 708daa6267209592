package msgtypes

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Limits of a registered schema. Every replica applies the same ones, so a
// registration event is accepted or refused alike everywhere.
const (
	// MaxSchemaBytes bounds a schema document.
	MaxSchemaBytes = 64 << 10
	// MaxSchemaDepth bounds JSON nesting (objects and arrays) in a schema.
	MaxSchemaDepth = 64
	// MaxFreeText is the longest free text any type may allow, in
	// characters (maxLength counts code points).
	MaxFreeText = 280
)

// The x-alp-* keywords (spec/types/README.md).
const (
	kwClass    = "x-alp-class"
	kwFreeText = "x-alp-freetext"
	kwCommits  = "x-alp-commits"
)

const draft2020 = "https://json-schema.org/draft/2020-12/schema"

// keywords2020 are the JSON Schema 2020-12 keywords (core, applicator,
// unevaluated, validation, format-annotation, content, meta-data). Anything
// else is refused rather than ignored, so a typo ("maxLenght",
// "additionalProperty") cannot silently drop a bound.
var keywords2020 = map[string]bool{
	"$schema": true, "$id": true, "$ref": true, "$anchor": true, "$dynamicRef": true,
	"$dynamicAnchor": true, "$vocabulary": true, "$comment": true, "$defs": true,
	"allOf": true, "anyOf": true, "oneOf": true, "not": true, "if": true, "then": true,
	"else": true, "dependentSchemas": true, "prefixItems": true, "items": true,
	"contains": true, "properties": true, "patternProperties": true,
	"additionalProperties": true, "propertyNames": true, "unevaluatedItems": true,
	"unevaluatedProperties": true, "type": true, "enum": true, "const": true,
	"multipleOf": true, "maximum": true, "exclusiveMaximum": true, "minimum": true,
	"exclusiveMinimum": true, "maxLength": true, "minLength": true, "pattern": true,
	"maxItems": true, "minItems": true, "uniqueItems": true, "maxContains": true,
	"minContains": true, "maxProperties": true, "minProperties": true, "required": true,
	"dependentRequired": true, "format": true, "contentEncoding": true,
	"contentMediaType": true, "contentSchema": true, "title": true, "description": true,
	"default": true, "deprecated": true, "readOnly": true, "writeOnly": true, "examples": true,
}

// formats are the formats the registry asserts. An unknown format would be
// an annotation only, which an author almost never means.
var formats = map[string]bool{
	"date-time": true, "date": true, "time": true, "duration": true, "email": true,
	"uri": true, "uuid": true, "hostname": true, "ipv4": true, "ipv6": true,
	formatAddress: true,
}

// position is what a subschema stands for, which decides whether it must
// be classified.
type position int

const (
	posRoot position = iota
	// posField: the schema of a value that appears in a body as a member or
	// item (properties/*, patternProperties/*, additionalProperties, items,
	// prefixItems/*, unevaluated*): it must carry x-alp-class.
	posField
	// posSub: any other subschema ($defs/*, allOf/anyOf/oneOf branches,
	// not, if/then/else …): it may carry a class (which then tightens the
	// field it applies to) and its own fields must be classified.
	posSub
)

// lint checks a decoded schema document against the registry's rules and
// returns the commitments it declares. It walks keys in sorted order so
// the first problem reported is the same on every replica.
func lint(doc any) (commits []string, err *RegistrationError) {
	if d := depth(doc, 0); d > MaxSchemaDepth {
		return nil, &RegistrationError{Code: CodeSchemaTooLarge,
			Message: fmt.Sprintf("nests %d levels deep; at most %d", d, MaxSchemaDepth)}
	}
	root, ok := doc.(map[string]any)
	if !ok {
		return nil, &RegistrationError{Code: CodeNotAnObject, Message: "the schema must be a JSON object describing an object body"}
	}
	if !hasType(root, "object") || len(typesOf(root)) != 1 {
		return nil, &RegistrationError{Code: CodeNotAnObject, Message: `the root must have "type": "object"`}
	}
	if s, ok := root["$schema"]; ok && s != draft2020 {
		return nil, &RegistrationError{Code: CodeUnsupportedKeyword, Pointer: "/$schema",
			Message: fmt.Sprintf("only %s is supported", draft2020)}
	}
	if c, ok := root[kwCommits]; ok {
		commits, err = lintCommits(c)
		if err != nil {
			return nil, err
		}
	}
	return commits, lintSchema(root, "", posRoot)
}

// CheckCommitWord validates one x-alp-commits word ("meeting",
// "payment"): what a type's root may list, and what standing rules and an
// organization's pre-approved relationships name as the action they cover.
func CheckCommitWord(s string) error {
	if s == "" || len(s) > 64 || strings.Contains(s, ".") || shortNameProblem(s) != "" {
		return fmt.Errorf("msgtypes: commit word %q: want 1 to 64 characters of a-z, 0-9 and _, starting with a letter", s)
	}
	return nil
}

func lintCommits(v any) ([]string, *RegistrationError) {
	bad := &RegistrationError{Code: CodeInvalidKeywordValue, Pointer: "/" + kwCommits,
		Message: `x-alp-commits is a non-empty list of distinct words of a-z, 0-9 and _ ("meeting", "payment")`}
	list, ok := v.([]any)
	if !ok || len(list) == 0 || len(list) > 16 {
		return nil, bad
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, ok := e.(string)
		if !ok || slices.Contains(out, s) || CheckCommitWord(s) != nil {
			return nil, bad
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out, nil
}

func lintSchema(v any, ptr string, pos position) *RegistrationError {
	switch s := v.(type) {
	case bool:
		// false admits nothing, so nothing needs a class; true admits
		// anything and can carry no class.
		if s && pos == posField {
			return &RegistrationError{Code: CodeUnclassifiedProperty, Pointer: ptr,
				Message: "the schema true admits any value and cannot carry x-alp-class; write a classified schema"}
		}
		return nil
	case map[string]any:
		return lintObject(s, ptr, pos)
	default:
		return &RegistrationError{Code: CodeInvalidSchema, Pointer: ptr, Message: "a schema must be an object or a boolean"}
	}
}

func lintObject(m map[string]any, ptr string, pos position) *RegistrationError {
	for _, k := range sortedKeys(m) {
		kp := ptr + "/" + escape(k)
		if strings.HasPrefix(k, "x-alp-") {
			if err := lintALPKeyword(m, k, kp, pos); err != nil {
				return err
			}
			continue
		}
		if !keywords2020[k] {
			return &RegistrationError{Code: CodeUnknownKeyword, Pointer: kp,
				Message: fmt.Sprintf("%q is not a JSON Schema 2020-12 keyword nor an x-alp-* one", k)}
		}
		switch k {
		case "$ref":
			ref, ok := m[k].(string)
			if !ok {
				return &RegistrationError{Code: CodeInvalidSchema, Pointer: kp, Message: "$ref must be a string"}
			}
			if !strings.HasPrefix(ref, "#") {
				return &RegistrationError{Code: CodeRemoteRef, Pointer: kp,
					Message: fmt.Sprintf("$ref %s leaves this schema; only references into it (#/$defs/…) are allowed", quote(ref))}
			}
			if ref != "#" && !strings.HasPrefix(ref, "#/") {
				return &RegistrationError{Code: CodeUnsupportedKeyword, Pointer: kp,
					Message: "a $ref is a JSON pointer into this schema (#/$defs/…); anchors are not supported"}
			}
		case "$id", "$anchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary":
			return &RegistrationError{Code: CodeUnsupportedKeyword, Pointer: kp,
				Message: fmt.Sprintf("%s is not supported: the registry names the schema and resolves every reference when it registers it", k)}
		case "$schema":
			if pos != posRoot {
				return &RegistrationError{Code: CodeUnsupportedKeyword, Pointer: kp, Message: "$schema is allowed only on the root"}
			}
		case "format":
			if f, ok := m[k].(string); ok && !formats[f] {
				return &RegistrationError{Code: CodeUnknownFormat, Pointer: kp,
					Message: fmt.Sprintf("format %q is not asserted by the registry", f)}
			}
		}
	}
	if pos == posField {
		if _, ok := m[kwClass]; !ok {
			return &RegistrationError{Code: CodeUnclassifiedProperty, Pointer: ptr,
				Message: "every property, array item and map value needs x-alp-class (public, internal or confidential)"}
		}
	}
	if isObjectSchema(m) {
		_, ap := m["additionalProperties"]
		_, up := m["unevaluatedProperties"]
		if !ap && !up {
			return &RegistrationError{Code: CodeOpenObject, Pointer: ptr,
				Message: `an object schema needs "additionalProperties": false (or a classified schema), so no unclassified member passes`}
		}
	}
	if hasType(m, "array") {
		if _, ok := m["items"]; !ok {
			return &RegistrationError{Code: CodeOpenArray, Pointer: ptr,
				Message: `an array schema needs "items" (a classified schema, or false after prefixItems)`}
		}
	}
	return lintChildren(m, ptr)
}

func lintALPKeyword(m map[string]any, k, kp string, pos position) *RegistrationError {
	switch k {
	case kwClass:
		if pos == posRoot {
			return &RegistrationError{Code: CodeMisplacedKeyword, Pointer: kp, Message: "x-alp-class belongs on properties, not on the root"}
		}
		if c, _ := m[k].(string); !Class(c).valid() {
			return &RegistrationError{Code: CodeInvalidKeywordValue, Pointer: kp, Message: "x-alp-class is public, internal or confidential"}
		}
	case kwFreeText:
		if pos == posRoot {
			return &RegistrationError{Code: CodeMisplacedKeyword, Pointer: kp, Message: "x-alp-freetext belongs on string properties, not on the root"}
		}
		b, ok := m[k].(bool)
		if !ok {
			return &RegistrationError{Code: CodeInvalidKeywordValue, Pointer: kp, Message: "x-alp-freetext is true or false"}
		}
		if b {
			n, ok := intValue(m["maxLength"])
			if !hasType(m, "string") || len(typesOf(m)) != 1 || !ok || n > MaxFreeText {
				return &RegistrationError{Code: CodeFreetextUncapped, Pointer: kp[:len(kp)-len(kwFreeText)-1],
					Message: fmt.Sprintf(`free text needs "type": "string" and "maxLength" of at most %d`, MaxFreeText)}
			}
		}
	case kwCommits:
		if pos != posRoot {
			return &RegistrationError{Code: CodeMisplacedKeyword, Pointer: kp, Message: "x-alp-commits belongs on the root: a type commits a person as a whole"}
		}
	default:
		return &RegistrationError{Code: CodeUnknownKeyword, Pointer: kp,
			Message: fmt.Sprintf("%q is not an ALP keyword (x-alp-class, x-alp-freetext, x-alp-commits)", k)}
	}
	return nil
}

// lintChildren walks every subschema of m.
func lintChildren(m map[string]any, ptr string) *RegistrationError {
	one := func(k string, pos position) *RegistrationError {
		if v, ok := m[k]; ok {
			return lintSchema(v, ptr+"/"+k, pos)
		}
		return nil
	}
	each := func(k string, pos position) *RegistrationError {
		switch c := m[k].(type) {
		case map[string]any:
			for _, name := range sortedKeys(c) {
				if err := lintSchema(c[name], ptr+"/"+k+"/"+escape(name), pos); err != nil {
					return err
				}
			}
		case []any:
			for i, s := range c {
				if err := lintSchema(s, fmt.Sprintf("%s/%s/%d", ptr, k, i), pos); err != nil {
					return err
				}
			}
		case nil:
		default:
			return &RegistrationError{Code: CodeInvalidSchema, Pointer: ptr + "/" + k, Message: k + " has the wrong JSON type"}
		}
		return nil
	}
	for _, step := range []func() *RegistrationError{
		func() *RegistrationError { return each("$defs", posSub) },
		func() *RegistrationError { return one("additionalProperties", posField) },
		func() *RegistrationError { return each("allOf", posSub) },
		func() *RegistrationError { return each("anyOf", posSub) },
		func() *RegistrationError { return one("contains", posSub) },
		func() *RegistrationError { return one("contentSchema", posSub) },
		func() *RegistrationError { return each("dependentSchemas", posSub) },
		func() *RegistrationError { return one("else", posSub) },
		func() *RegistrationError { return one("if", posSub) },
		func() *RegistrationError { return one("items", posField) },
		func() *RegistrationError { return one("not", posSub) },
		func() *RegistrationError { return each("oneOf", posSub) },
		func() *RegistrationError { return each("patternProperties", posField) },
		func() *RegistrationError { return each("prefixItems", posField) },
		func() *RegistrationError { return each("properties", posField) },
		func() *RegistrationError { return one("propertyNames", posSub) },
		func() *RegistrationError { return one("then", posSub) },
		func() *RegistrationError { return one("unevaluatedItems", posField) },
		func() *RegistrationError { return one("unevaluatedProperties", posField) },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// isObjectSchema reports whether m describes objects with members: it
// declares members or its type admits objects.
func isObjectSchema(m map[string]any) bool {
	_, p := m["properties"]
	_, pp := m["patternProperties"]
	return p || pp || hasType(m, "object")
}

func typesOf(m map[string]any) []string {
	switch t := m["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, e := range t {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func hasType(m map[string]any, t string) bool { return slices.Contains(typesOf(m), t) }

func intValue(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := n.Int64()
	return i, err == nil
}

// depth is the JSON nesting depth of v.
func depth(v any, d int) int {
	if d > MaxSchemaDepth {
		return d
	}
	deepest := d
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			deepest = max(deepest, depth(e, d+1))
		}
	case []any:
		for _, e := range x {
			deepest = max(deepest, depth(e, d+1))
		}
	}
	return deepest
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// escape encodes one RFC 6901 reference token.
func escape(tok string) string {
	if !strings.ContainsAny(tok, "~/") {
		return tok
	}
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}
