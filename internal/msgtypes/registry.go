package msgtypes

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gowebpki/jcs"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/alpd-project/alpd/internal/alp"
	spectypes "github.com/alpd-project/alpd/spec/types"
)

// formatAddress is the format of an ALP address (internal/alp's rule:
// plain or acct: form).
const formatAddress = "alp-address"

// baseURL names a type's schema for the compiler. Nothing is ever fetched
// from it: remote references are refused before compiling and the loader
// refuses every URL.
const baseURL = "https://types.alp.invalid/"

// Registry holds the message types one broker knows: the built-ins and
// what organizations registered. Readers (ingress, policy) never block:
// the set is swapped whole on each registration.
//
// Register is a pure function of its arguments and of the types already
// registered (no clock, no randomness, keys walked in sorted order), so a
// projection that replays the same registrations in the same order on
// every replica ends with the same registry and the same refusals.
type Registry struct {
	mu    sync.Mutex // serializes Register
	types atomic.Pointer[map[string]*Type]
}

// New returns a registry holding the built-in types of spec/types. An
// error means a built-in schema breaks the registry's own rules, which
// the package's tests rule out.
func New() (*Registry, error) {
	r := &Registry{}
	empty := map[string]*Type{}
	r.types.Store(&empty)
	files, err := fs.Glob(spectypes.Files(), "*.json")
	if err != nil {
		return nil, fmt.Errorf("msgtypes: listing built-in types: %w", err)
	}
	for _, f := range files {
		name, ok := builtinName(f)
		if !ok {
			return nil, fmt.Errorf("msgtypes: built-in file %q is not named <name>.v<N>.json", f)
		}
		b, err := fs.ReadFile(spectypes.Files(), f)
		if err != nil {
			return nil, fmt.Errorf("msgtypes: reading built-in %s: %w", f, err)
		}
		if _, err := r.add("", name, b); err != nil {
			return nil, fmt.Errorf("msgtypes: built-in %s: %w", f, err)
		}
	}
	return r, nil
}

// builtinName maps "meeting.request.v1.json" to "meeting.request/v1".
func builtinName(file string) (string, bool) {
	base, ok := strings.CutSuffix(file, ".json")
	if !ok {
		return "", false
	}
	i := strings.LastIndex(base, ".v")
	if i <= 0 {
		return "", false
	}
	name := base[:i] + "/" + base[i+1:]
	if tenant, p := splitName(name); p != "" || tenant != "" {
		return "", false
	}
	return name, true
}

// Register adds an organization's type. tenant is the registering tenant
// (canonical domain); name must be "<tenant>/<name>/v<N>" under that same
// domain. Registering the identical schema (same canonical form) again
// returns the registered type, so replaying a registration event is
// harmless; a different schema under a registered name is refused
// (CodeTypeExists). Every refusal is a *RegistrationError and leaves the
// registry unchanged.
func (r *Registry) Register(tenant, name string, schema []byte) (*Type, error) {
	t, err := r.Check(tenant, name, schema)
	if err != nil {
		return nil, err
	}
	return r.store(t)
}

// Check runs every check of Register against the registry as it stands
// and returns the type Register would answer (the registered one when the
// schema is identical), without storing anything. A store that appends a
// registration event before registering (internal/msgtypes/typestore)
// refuses bad input with it, so no refused schema ever reaches the stream.
func (r *Registry) Check(tenant, name string, schema []byte) (*Type, error) {
	if err := alp.ValidateTenant(tenant); err != nil {
		return nil, &RegistrationError{Code: CodeInvalidName, Name: name, Message: "registering tenant: " + err.Error()}
	}
	owner, p := splitName(name)
	if p != "" {
		return nil, &RegistrationError{Code: CodeInvalidName, Name: name, Message: "the name " + p}
	}
	if owner == "" {
		if t, ok := r.Lookup(name); ok && t.Builtin() {
			return nil, &RegistrationError{Code: CodeNameCollidesWithBuiltin, Name: name,
				Message: fmt.Sprintf("%s is a built-in type; name yours %s/…", name, tenant)}
		}
		return nil, &RegistrationError{Code: CodeNameNotNamespaced, Name: name,
			Message: fmt.Sprintf("an organization's type is named under its domain: %s/%s", tenant, name)}
	}
	if owner != tenant {
		return nil, &RegistrationError{Code: CodeNameNotNamespaced, Name: name,
			Message: fmt.Sprintf("tenant %s registers types under %s/, not %s/", tenant, tenant, owner)}
	}
	t, err := build(tenant, name, schema)
	if err != nil {
		return nil, err
	}
	if old, ok := r.Lookup(name); ok {
		return existing(old, t)
	}
	return t, nil
}

// existing is the answer to registering t under the name of old.
func existing(old, t *Type) (*Type, error) {
	if old.digest == t.digest {
		return old, nil
	}
	return nil, &RegistrationError{Code: CodeTypeExists, Name: t.name,
		Message: "this type version is registered with a different schema; register the change as the next version"}
}

// add checks, compiles and stores one type.
func (r *Registry) add(owner, name string, schema []byte) (*Type, error) {
	t, err := build(owner, name, schema)
	if err != nil {
		return nil, err
	}
	return r.store(t)
}

// store adds a built type unless its name is taken (see existing).
func (r *Registry) store(t *Type) (*Type, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := *r.types.Load()
	if old, ok := cur[t.name]; ok {
		return existing(old, t)
	}
	next := maps.Clone(cur)
	next[t.name] = t
	r.types.Store(&next)
	return t, nil
}

// Lookup returns the type of that name, built-in or registered. A
// namespaced name carries its owner, so one lookup serves every tenant:
// the recipient of example.org's expense.approval/v1 validates with
// example.org's schema.
func (r *Registry) Lookup(name string) (*Type, bool) {
	t, ok := (*r.types.Load())[name]
	return t, ok
}

// Names lists every known type name, sorted.
func (r *Registry) Names() []string {
	return slices.Sorted(maps.Keys(*r.types.Load()))
}

// build runs every check on a schema and compiles it; it touches no
// registry state.
func build(owner, name string, schema []byte) (*Type, error) {
	refuse := func(code Code, ptr, msg string) error {
		return &RegistrationError{Code: code, Name: name, Pointer: ptr, Message: msg}
	}
	if len(schema) > MaxSchemaBytes {
		return nil, refuse(CodeSchemaTooLarge, "", fmt.Sprintf("%d bytes; at most %d", len(schema), MaxSchemaBytes))
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, refuse(CodeInvalidSchema, "", "not JSON: "+err.Error())
	}
	commits, lerr := lint(doc)
	if lerr != nil {
		lerr.Name = name
		return nil, lerr
	}
	canon, err := jcs.Transform(schema)
	if err != nil {
		return nil, refuse(CodeInvalidSchema, "", "cannot canonicalize: "+err.Error())
	}
	sum := sha256.Sum256(canon)

	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	c.RegisterFormat(&jsonschema.Format{Name: formatAddress, Validate: validateAddress})
	url := baseURL + name
	if err := c.AddResource(url, doc); err != nil {
		return nil, refuse(CodeInvalidSchema, "", err.Error())
	}
	root, err := c.Compile(url)
	if err != nil {
		return nil, refuse(CodeInvalidSchema, "", compileMessage(err))
	}
	t := &Type{name: name, owner: owner, commits: commits, digest: hex.EncodeToString(sum[:]),
		schema: canon, root: root, meta: map[*jsonschema.Schema]schemaMeta{}}
	collectMeta(doc, root, doc, t.meta, map[*jsonschema.Schema]bool{})
	return t, nil
}

// compileMessage keeps the compiler's first line: it names the keyword
// and location.
func compileMessage(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i > 0 {
		s = s[:i]
	}
	return s
}

// collectMeta walks the compiled schema beside its source and records
// the x-alp-* keywords of each compiled node. $defs are reached through
// the references that use them (the compiled tree keeps no $defs).
func collectMeta(doc any, s *jsonschema.Schema, raw any, meta map[*jsonschema.Schema]schemaMeta, seen map[*jsonschema.Schema]bool) {
	if s == nil || seen[s] {
		return
	}
	seen[s] = true
	m, ok := raw.(map[string]any)
	if !ok {
		return
	}
	c, _ := m[kwClass].(string)
	f, _ := m[kwFreeText].(bool)
	if c != "" || f {
		meta[s] = schemaMeta{class: Class(c), freeText: f}
	}
	sub := func(cs *jsonschema.Schema, v any) { collectMeta(doc, cs, v, meta, seen) }
	if ref, ok := m["$ref"].(string); ok && s.Ref != nil {
		sub(s.Ref, resolve(doc, ref))
	}
	props, _ := m["properties"].(map[string]any)
	for k, cs := range s.Properties {
		sub(cs, props[k])
	}
	pats, _ := m["patternProperties"].(map[string]any)
	for re, cs := range s.PatternProperties {
		sub(cs, pats[re.String()])
	}
	if cs, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		sub(cs, m["additionalProperties"])
	}
	sub(s.Items2020, m["items"])
	prefix, _ := m["prefixItems"].([]any)
	for i, cs := range s.PrefixItems {
		if i < len(prefix) {
			sub(cs, prefix[i])
		}
	}
	list := func(css []*jsonschema.Schema, k string) {
		l, _ := m[k].([]any)
		for i, cs := range css {
			if i < len(l) {
				sub(cs, l[i])
			}
		}
	}
	list(s.AllOf, "allOf")
	list(s.AnyOf, "anyOf")
	list(s.OneOf, "oneOf")
	deps, _ := m["dependentSchemas"].(map[string]any)
	for k, cs := range s.DependentSchemas {
		sub(cs, deps[k])
	}
	for k, cs := range map[string]*jsonschema.Schema{
		"not": s.Not, "if": s.If, "then": s.Then, "else": s.Else, "contains": s.Contains,
		"propertyNames": s.PropertyNames, "contentSchema": s.ContentSchema,
		"unevaluatedItems": s.UnevaluatedItems, "unevaluatedProperties": s.UnevaluatedProperties,
	} {
		sub(cs, m[k])
	}
}

// resolve follows a local reference ("#" or "#/json/pointer") in doc; nil
// if it does not resolve (the compiler has refused such a schema already).
func resolve(doc any, ref string) any {
	frag := strings.TrimPrefix(ref, "#")
	if frag == "" {
		return doc
	}
	cur := doc
	for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := cur.(type) {
		case map[string]any:
			cur = x[tok]
		case []any:
			i := 0
			if _, err := fmt.Sscanf(tok, "%d", &i); err != nil || i < 0 || i >= len(x) {
				return nil
			}
			cur = x[i]
		default:
			return nil
		}
	}
	return cur
}

// validateAddress is the alp-address format: internal/alp's address rule.
func validateAddress(v any) error {
	s, ok := v.(string)
	if !ok {
		return nil
	}
	if _, err := alp.ParseAddress(s); err != nil {
		var ae *alp.Error
		if errors.As(err, &ae) {
			return errors.New(ae.Reason)
		}
		return err
	}
	return nil
}

// noLoader refuses every URL: a type's schema is self-contained.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("loading %s: schemas may not reference other documents", url)
}

// ConnectionRequest is the built-in type of a request to connect: the one
// type a stranger may send (policy holds it for the person, federation lets
// only it through from strangers, every agent door sends it).
const ConnectionRequest = "connection.request/v1"

// ConnectionAccept is the built-in type of the answer to a request to
// connect: a broker sends it (never an agent) on behalf of the person who
// accepted, to the asker at another broker, whose policy then records the
// two as connected. A stranger may send it too: the asker's policy checks
// that it answers the asker's own request.
const ConnectionAccept = "connection.accept/v1"
