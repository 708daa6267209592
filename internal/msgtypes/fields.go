package msgtypes

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// maxApplicable bounds the schemas that apply at one place in a body (a
// $ref chain, allOf members, the branch of a oneOf …). Lint bounds the
// schema's size, so this is a guard against a reference cycle, not a limit
// a real type meets.
const maxApplicable = 256

func (t *Type) fields(v any) ([]Field, error) {
	out := make([]Field, 0, 16)
	err := t.walk(v, t.root, "", "", false, &out)
	return out, err
}

// walk appends the fields of v, which the schemas in sch (and what they
// pull in) describe; class and free are inherited from the members on the
// way to v.
func (t *Type) walk(v any, s *jsonschema.Schema, ptr string, class Class, free bool, out *[]Field) error {
	var buf [8]*jsonschema.Schema
	app, err := applicable(v, append(buf[:0], s))
	if err != nil {
		return fmt.Errorf("at %q: %w", ptr, err)
	}
	for _, a := range app {
		if m, ok := t.meta[a]; ok {
			class = class.stricter(m.class)
			free = free || m.freeText
		}
	}
	switch x := v.(type) {
	case map[string]any:
		if structuresObject(app) {
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				kp := ptr + "/" + escape(k)
				n := 0
				for _, a := range app {
					for _, c := range memberSchemas(a, k) {
						n++
						if err := t.walkMember(x[k], c, kp, class, free, out, n); err != nil {
							return err
						}
					}
				}
				if n == 0 {
					return fmt.Errorf("at %q: no schema classifies this member", kp)
				}
			}
			return nil
		}
	case []any:
		if structuresArray(app) {
			for i, e := range x {
				ip := ptr + "/" + strconv.Itoa(i)
				n := 0
				for _, a := range app {
					if c := itemSchema(a, i); c != nil {
						n++
						if err := t.walkMember(e, c, ip, class, free, out, n); err != nil {
							return err
						}
					}
				}
				if n == 0 {
					return fmt.Errorf("at %q: no schema classifies this item", ip)
				}
			}
			return nil
		}
	}
	if class == "" {
		return fmt.Errorf("at %q: the value is not classified", ptr)
	}
	f := Field{Pointer: ptr, Class: class, FreeText: free, Value: v}
	for _, a := range app {
		if a.MaxLength != nil && (f.MaxLength == 0 || *a.MaxLength < f.MaxLength) {
			f.MaxLength = *a.MaxLength
		}
	}
	*out = append(*out, f)
	return nil
}

// walkMember walks one member or item. When several schemas describe it
// (a property declared in two allOf members), the first walk appends its
// fields and each further one only tightens them: one value is one field.
func (t *Type) walkMember(v any, c *jsonschema.Schema, ptr string, class Class, free bool, out *[]Field, n int) error {
	if n == 1 {
		return t.walk(v, c, ptr, class, free, out)
	}
	var again []Field
	if err := t.walk(v, c, ptr, class, free, &again); err != nil {
		return err
	}
	for _, g := range again {
		i := slices.IndexFunc(*out, func(f Field) bool { return f.Pointer == g.Pointer })
		if i < 0 {
			*out = append(*out, g)
			continue
		}
		f := &(*out)[i]
		f.Class = f.Class.stricter(g.Class)
		f.FreeText = f.FreeText || g.FreeText
	}
	return nil
}

// applicable expands the schemas that apply to v in place: $ref targets,
// allOf members, the oneOf branch and the anyOf branches that v matches,
// then or else after if, and dependentSchemas whose member v has. The
// result has no duplicates.
func applicable(v any, set []*jsonschema.Schema) ([]*jsonschema.Schema, error) {
	add := func(s *jsonschema.Schema) {
		if s != nil && !slices.Contains(set, s) {
			set = append(set, s)
		}
	}
	for i := 0; i < len(set); i++ {
		if len(set) > maxApplicable {
			return nil, fmt.Errorf("more than %d schemas apply", maxApplicable)
		}
		s := set[i]
		add(s.Ref)
		for _, a := range s.AllOf {
			add(a)
		}
		for _, b := range s.OneOf {
			if b.Validate(v) == nil {
				add(b)
				break
			}
		}
		for _, b := range s.AnyOf {
			if b.Validate(v) == nil {
				add(b)
			}
		}
		if s.If != nil {
			if s.If.Validate(v) == nil {
				add(s.Then)
			} else {
				add(s.Else)
			}
		}
		if obj, ok := v.(map[string]any); ok {
			for k, d := range s.DependentSchemas {
				if _, has := obj[k]; has {
					add(d)
				}
			}
		}
	}
	return set, nil
}

func structuresObject(app []*jsonschema.Schema) bool {
	for _, a := range app {
		if len(a.Properties) > 0 || len(a.PatternProperties) > 0 || a.UnevaluatedProperties != nil {
			return true
		}
		if _, ok := a.AdditionalProperties.(*jsonschema.Schema); ok {
			return true
		}
	}
	return false
}

func structuresArray(app []*jsonschema.Schema) bool {
	for _, a := range app {
		if a.Items2020 != nil || len(a.PrefixItems) > 0 || a.UnevaluatedItems != nil {
			return true
		}
	}
	return false
}

// memberSchemas are the schemas a describes member k with: its property,
// the patternProperties it matches, otherwise additionalProperties, and
// unevaluatedProperties as the last resort.
func memberSchemas(a *jsonschema.Schema, k string) []*jsonschema.Schema {
	if p, ok := a.Properties[k]; ok {
		return []*jsonschema.Schema{p}
	}
	var out []*jsonschema.Schema
	for re, p := range a.PatternProperties {
		if re.MatchString(k) {
			out = append(out, p)
		}
	}
	if len(out) > 0 {
		return out
	}
	if p, ok := a.AdditionalProperties.(*jsonschema.Schema); ok {
		return []*jsonschema.Schema{p}
	}
	if a.UnevaluatedProperties != nil {
		return []*jsonschema.Schema{a.UnevaluatedProperties}
	}
	return nil
}

func itemSchema(a *jsonschema.Schema, i int) *jsonschema.Schema {
	if i < len(a.PrefixItems) {
		return a.PrefixItems[i]
	}
	if a.Items2020 != nil {
		return a.Items2020
	}
	return a.UnevaluatedItems
}
